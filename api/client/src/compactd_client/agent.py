"""A tool-using agent loop for the `anthropic` SDK with compactd in the middle.

    run = run_agent(anthropic.Anthropic(), Compactd(model="claude-sonnet-4-6"), "demo",
                    task="Fix the failing test", tools=MY_TOOLS, call_tool=my_tool)

Every turn: fetch the ready prompt from compactd (your tools plus compactd's own), call the model,
append its response; answer each tool call — compactd's own (`read_file`, `grep`,
`update_working_memory`) through compactd, yours through `call_tool` — and append the results.
The session in compactd therefore holds every turn, and the model only ever sees the compacted
prompt. The SDK client is used duck-typed (`client.messages.create(**kwargs)`): this module does
not import `anthropic`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactd_client.client import AsyncCompactd, Compactd
from compactd_client.errors import ProblemError
from compactd_client.types import FileExcerpt, Memory

COMPACTD_TOOLS = frozenset({"read_file", "grep", "update_working_memory"})


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returns to the model: text or content blocks, flagged when it failed."""

    content: str | list[dict[str, Any]]
    is_error: bool = False


ToolFn = Callable[[str, dict[str, Any]], "str | list[dict[str, Any]] | ToolOutput"]
AsyncToolFn = Callable[[str, dict[str, Any]], Any]


@dataclass(slots=True)
class AgentRun:
    """How a run ended: the last model response, why it stopped, and how many model calls it took."""

    session_id: str
    reply: Any
    stop_reason: str
    model_calls: int
    tool_calls: list[str] = field(default_factory=list)  # names, in order, compactd's own included

    @property
    def text(self) -> str:
        """The text blocks of the last response, joined."""
        return "".join(b["text"] for b in assistant_content(self.reply) if b.get("type") == "text")


# -- pure pieces ---------------------------------------------------------------------------------


def assistant_content(reply: Any) -> list[dict[str, Any]]:
    """The response's content as request params (what the API accepts back), not the SDK's full
    response objects: fields the SDK adds on responses (citations=None, ...) are left out."""
    blocks = reply["content"] if isinstance(reply, dict) else reply.content
    return [_param(b if isinstance(b, dict) else b.model_dump(mode="json")) for b in blocks]


def _param(block: dict[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    keep = {
        "text": ("type", "text"),
        "tool_use": ("type", "id", "name", "input"),
        "thinking": ("type", "thinking", "signature"),
        "redacted_thinking": ("type", "data"),
    }.get(str(kind))
    if keep is None:
        return {k: v for k, v in block.items() if v is not None}
    return {k: block[k] for k in keep if k in block}


def tool_uses(content: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in content if b.get("type") == "tool_use"]


def as_output(value: Any) -> ToolOutput:
    """A caller's tool return value (str, content blocks, ToolOutput, anything else as str)."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str | list):
        return ToolOutput(value)
    return ToolOutput(str(value))


def tool_result(tool_use_id: str, out: ToolOutput) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": out.content}
    if out.is_error:
        block["is_error"] = True
    return block


def excerpt_text(excerpt: FileExcerpt) -> str:
    """A read for the model: what range it is (so it can ask for the next one), then the text."""
    more = " (truncated: read a narrower range)" if excerpt.truncated else ""
    return f"[{excerpt.ref}: {excerpt.description}{more}]\n{excerpt.text}"


def memory_text(memory: Memory) -> str:
    return f"working memory updated (version {memory.version}):\n{memory.rendered}"


def problem_output(exc: ProblemError) -> ToolOutput:
    """A refused tool call, told to the model so it can correct itself (the problem never echoes input)."""
    return ToolOutput(f"{exc.title}: {exc.detail or exc.title}", is_error=True)


def _read_args(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "grep":
        return {"pattern": args.get("pattern"), "max_matches": args.get("max_matches")}
    return {"start_line": args.get("start_line"), "end_line": args.get("end_line")}


def _refused(name: str, exc: Exception) -> ToolOutput:
    return ToolOutput(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)


# -- compactd's own tools -------------------------------------------------------------------------


def answer_compactd_tool(cpd: Compactd, sid: str, name: str, args: dict[str, Any]) -> ToolOutput:
    """Answer a call to read_file, grep or update_working_memory through compactd."""
    try:
        if name == "update_working_memory":
            return ToolOutput(memory_text(cpd.update_memory(sid, args.get("ops") or [])))
        return ToolOutput(
            excerpt_text(cpd.read_file(sid, str(args.get("ref", "")), **_read_args(name, args)))
        )
    except ProblemError as exc:
        return problem_output(exc)


async def aanswer_compactd_tool(cpd: AsyncCompactd, sid: str, name: str, args: dict[str, Any]) -> ToolOutput:
    try:
        if name == "update_working_memory":
            return ToolOutput(memory_text(await cpd.update_memory(sid, args.get("ops") or [])))
        excerpt = await cpd.read_file(sid, str(args.get("ref", "")), **_read_args(name, args))
        return ToolOutput(excerpt_text(excerpt))
    except ProblemError as exc:
        return problem_output(exc)


# -- the loops ------------------------------------------------------------------------------------


def run_agent(
    client: Any,
    cpd: Compactd,
    session_id: str,
    *,
    task: str | list[dict[str, Any]] | None = None,
    tools: Sequence[dict[str, Any]] = (),
    call_tool: ToolFn | None = None,
    system: str | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    max_model_calls: int = 50,
    **create_options: Any,
) -> AgentRun:
    """Run the agent until the model stops calling tools (or `max_model_calls`).

    `task` is appended as the next user message (omit it to continue a session whose last turn is
    already the user's); `system` and `model` go with it (the session keeps them). `call_tool(name,
    input)` runs your tools and returns text, content blocks or a ToolOutput; an exception it
    raises becomes an error result the model sees. `create_options` go to messages.create as is.
    """
    model = model or cpd.model
    if task is not None:
        cpd.append(session_id, [{"role": "user", "content": task}], model=model, system=system)
    run = AgentRun(session_id, None, "max_model_calls", 0)
    while run.model_calls < max_model_calls:
        kwargs = cpd.prompt(session_id, model=model, max_tokens=max_tokens, tools=tools)
        reply = client.messages.create(**kwargs, **create_options)
        run.reply, run.model_calls = reply, run.model_calls + 1
        content = assistant_content(reply)
        calls = tool_uses(content)
        cpd.append(
            session_id, [{"role": "assistant", "content": content}], activity="busy" if calls else None
        )
        if not calls:
            run.stop_reason = _stop_reason(reply)
            return run
        results = []
        for call in calls:
            run.tool_calls.append(call["name"])
            results.append(tool_result(call["id"], _run_tool(cpd, session_id, call, call_tool)))
        cpd.append(session_id, [{"role": "user", "content": results}], activity="idle")
    return run


def _run_tool(cpd: Compactd, sid: str, call: dict[str, Any], call_tool: ToolFn | None) -> ToolOutput:
    name, args = call["name"], call.get("input") or {}
    if name in COMPACTD_TOOLS:
        return answer_compactd_tool(cpd, sid, name, args)
    if call_tool is None:
        return ToolOutput(f"no tool named {name!r}", is_error=True)
    try:
        return as_output(call_tool(name, args))
    except Exception as exc:  # the model is told, and can try something else
        return _refused(name, exc)


async def arun_agent(
    client: Any,
    cpd: AsyncCompactd,
    session_id: str,
    *,
    task: str | list[dict[str, Any]] | None = None,
    tools: Sequence[dict[str, Any]] = (),
    call_tool: AsyncToolFn | None = None,
    system: str | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    max_model_calls: int = 50,
    **create_options: Any,
) -> AgentRun:
    """`run_agent` for `anthropic.AsyncAnthropic` and `AsyncCompactd`; `call_tool` may be async."""
    model = model or cpd.model
    if task is not None:
        await cpd.append(session_id, [{"role": "user", "content": task}], model=model, system=system)
    run = AgentRun(session_id, None, "max_model_calls", 0)
    while run.model_calls < max_model_calls:
        kwargs = await cpd.prompt(session_id, model=model, max_tokens=max_tokens, tools=tools)
        reply = await client.messages.create(**kwargs, **create_options)
        run.reply, run.model_calls = reply, run.model_calls + 1
        content = assistant_content(reply)
        calls = tool_uses(content)
        await cpd.append(
            session_id, [{"role": "assistant", "content": content}], activity="busy" if calls else None
        )
        if not calls:
            run.stop_reason = _stop_reason(reply)
            return run
        results = []
        for call in calls:
            run.tool_calls.append(call["name"])
            results.append(tool_result(call["id"], await _arun_tool(cpd, session_id, call, call_tool)))
        await cpd.append(session_id, [{"role": "user", "content": results}], activity="idle")
    return run


async def _arun_tool(
    cpd: AsyncCompactd, sid: str, call: dict[str, Any], call_tool: AsyncToolFn | None
) -> ToolOutput:
    name, args = call["name"], call.get("input") or {}
    if name in COMPACTD_TOOLS:
        return await aanswer_compactd_tool(cpd, sid, name, args)
    if call_tool is None:
        return ToolOutput(f"no tool named {name!r}", is_error=True)
    try:
        value = call_tool(name, args)
        return as_output(await value if inspect.isawaitable(value) else value)
    except Exception as exc:
        return _refused(name, exc)


def _stop_reason(reply: Any) -> str:
    reason = reply.get("stop_reason") if isinstance(reply, dict) else getattr(reply, "stop_reason", None)
    return str(reason or "end_turn")


__all__ = [
    "COMPACTD_TOOLS",
    "AgentRun",
    "ToolOutput",
    "aanswer_compactd_tool",
    "answer_compactd_tool",
    "arun_agent",
    "assistant_content",
    "run_agent",
]
