"""LangGraph / LangChain integration: compactd as an interceptor in front of an unchanged agent.

The graph state keeps its full message list; before each model call the new messages are
appended to compactd and the model is given compactd's compacted prompt instead.

    from langgraph.prebuilt import create_react_agent
    hook = CompactdHook(Compactd(model="claude-sonnet-4-6"), system="You are ...")
    graph = create_react_agent(ChatAnthropic(model="claude-sonnet-4-6"), tools,
                               pre_model_hook=hook.pre_model_hook, post_model_hook=hook.post_model_hook)
    graph.invoke({"messages": [("user", "...")]}, {"configurable": {"thread_id": "demo"}})

or, with LangChain v1 agents, `create_agent(model, tools, middleware=[CompactdMiddleware(cpd)])`.
The session id is the thread id unless one is given. langchain-core (and langchain for the
middleware) are imported only when used: `pip install compactd-client[langgraph]`.

Messages map one to one onto compactd turns (a run of tool results is one user turn), so after a
restart the hook finds where it left off from the session's version; only this hook should
append to the session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from compactd_client.agent import assistant_content
from compactd_client.client import Compactd
from compactd_client.errors import ProblemError

# -- LangChain messages <-> Anthropic messages (pure) ----------------------------------------------


def to_anthropic(messages: Sequence[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, messages) in Anthropic's shape. Consecutive ToolMessages (one round of parallel
    calls) become one user turn; every other message is one turn of its own."""
    system: str | None = None
    out: list[dict[str, Any]] = []
    tool_run = False
    for m in messages:
        kind = m.type
        if kind == "system":
            system = m.content if isinstance(m.content, str) else _text_of(m.content)
            continue
        if kind == "tool":
            blocks = _tool_results(m)
            if tool_run:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": "user", "content": blocks})
            tool_run = True
            continue
        tool_run = False
        if kind == "human":
            out.append({"role": "user", "content": _blocks(m.content)})
        elif kind == "ai":
            out.append({"role": "assistant", "content": _assistant_blocks(m)})
        else:
            raise ValueError(f"cannot send a {kind!r} message to compactd (human, ai, tool or system)")
    return system, out


def _text_of(content: Any) -> str:
    return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


def _blocks(content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": b} if isinstance(b, str) else b for b in content]


def _tool_results(m: Any) -> list[dict[str, Any]]:
    """A ToolMessage as tool_result blocks: its own content when it already is one (as
    `from_anthropic` builds them), else one block wrapping its content."""
    if (
        isinstance(m.content, list)
        and m.content
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in m.content)
    ):
        return list(m.content)
    content = m.content if isinstance(m.content, str) else _blocks(m.content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": content}
    if getattr(m, "status", None) == "error":
        block["is_error"] = True
    return [block]


def _assistant_blocks(m: Any) -> list[dict[str, Any]]:
    blocks = assistant_content({"content": _blocks(m.content) if not isinstance(m.content, str) else []})
    if isinstance(m.content, str) and m.content:
        blocks.insert(0, {"type": "text", "text": m.content})
    blocks = [b for b in blocks if b.get("type") in {"text", "tool_use", "thinking", "redacted_thinking"}]
    have = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    for call in getattr(m, "tool_calls", None) or []:
        if call["id"] not in have:
            blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["args"]})
    return blocks or [{"type": "text", "text": "(no content)"}]


def from_anthropic(system: list[dict[str, Any]], messages: Sequence[dict[str, Any]]) -> list[Any]:
    """compactd's served prompt as LangChain messages for the model: the system blocks (with their
    cache_control) as one SystemMessage, assistant turns as AIMessages whose tool_calls mirror their
    tool_use blocks, and each tool_result as a ToolMessage holding the block verbatim (LangGraph
    checks every tool call has one; ChatAnthropic sends such a block unchanged) followed by the
    turn's other blocks (a `<compactd-memory>` note) as a HumanMessage."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = [SystemMessage(content=list(system))] if system else []
    for m in messages:
        content = m["content"]
        if m["role"] == "user":
            if isinstance(content, str):
                out.append(HumanMessage(content=content))
                continue
            results = [b for b in content if b.get("type") == "tool_result"]
            rest = [b for b in content if b.get("type") != "tool_result"]
            out.extend(
                ToolMessage(
                    content=[b],
                    tool_call_id=b["tool_use_id"],
                    status="error" if b.get("is_error") else "success",
                )
                for b in results
            )
            if rest:
                out.append(HumanMessage(content=rest))
            continue
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        calls = [
            {"name": b["name"], "args": b.get("input") or {}, "id": b["id"], "type": "tool_call"}
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        out.append(AIMessage(content=blocks, tool_calls=calls))
    return out


def batch_key(sid: str, after: int, turns: Sequence[dict[str, Any]]) -> str:
    """The Idempotency-Key of appending `turns` after version `after`: derived from what is sent,
    so the same graph step retried (or replayed after a crash) appends once."""
    digest = hashlib.sha256(json.dumps([sid, after, list(turns)], sort_keys=True, default=str).encode())
    return f"lg-{digest.hexdigest()[:32]}"


# -- the interceptor ------------------------------------------------------------------------------


class CompactdHook:
    """pre_model_hook / post_model_hook for `langgraph.prebuilt.create_react_agent`: the system
    prompt given here (or a SystemMessage in the state) is the session's; do not also pass `prompt=`."""

    def __init__(
        self,
        cpd: Compactd,
        session_id: str | None = None,
        *,
        model: str | None = None,
        system: str | None = None,
    ) -> None:
        self.cpd = cpd
        self.session_id = session_id
        self.model = model or cpd.model
        # the agent's system prompt goes to compactd (served back first in every prompt); give it
        # here rather than as create_react_agent(prompt=...), which would add it a second time
        self.system = system
        self._version: dict[str, int] = {}

    def session_for(self, config: Any) -> str:
        sid = self.session_id or ((config or {}).get("configurable") or {}).get("thread_id")
        if not sid:
            raise ValueError("no session: pass session_id= or run the graph with a thread_id")
        return str(sid)

    def sync(self, sid: str, messages: Sequence[Any]) -> None:
        """Append what compactd has not seen yet (found from the session's version)."""
        system, turns = to_anthropic(messages)
        system = system or self.system
        known = self._version.get(sid)
        if known is None:
            known = self._stored(sid)
        new = turns[known:]
        if not new:
            return
        done = self.cpd.append(
            sid, new, model=self.model, system=system, idempotency_key=batch_key(sid, known, new)
        )
        self._version[sid] = done.version

    def _stored(self, sid: str) -> int:
        try:
            return int(self.cpd.session(sid)["version"])
        except ProblemError as exc:
            if exc.status == 404:
                return 0
            raise

    def llm_input(self, sid: str) -> list[Any]:
        served = self.cpd.fetch_prompt(sid)
        return from_anthropic(served.system, served.messages)

    def before_model(self, state: Any, config: Any = None) -> dict[str, Any]:
        """Append the state's new messages; give the model compactd's prompt (the state is unchanged)."""
        sid = self.session_for(config)
        self.sync(sid, _messages(state))
        return {"llm_input_messages": self.llm_input(sid)}

    def after_model(self, state: Any, config: Any = None) -> dict[str, Any]:
        """Append the model's response at once (not only before the next model call)."""
        self.sync(self.session_for(config), _messages(state))
        return {}

    @property
    def pre_model_hook(self) -> Any:
        """`before_model` as LangGraph wants a node: `config` typed as RunnableConfig, so it is passed."""
        return _node(self.before_model)

    @property
    def post_model_hook(self) -> Any:
        return _node(self.after_model)


def _node(method: Any) -> Any:
    from langchain_core.runnables import RunnableConfig

    def node(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return method(state, config)  # type: ignore[no-any-return]

    node.__annotations__ = {"state": Any, "config": RunnableConfig, "return": dict[str, Any]}
    node.__name__ = method.__name__
    return node


def _messages(state: Any) -> list[Any]:
    return list(state["messages"] if isinstance(state, dict) else state.messages)


def CompactdMiddleware(cpd: Compactd, session_id: str | None = None, *, model: str | None = None) -> Any:
    """A LangChain v1 agent middleware (`create_agent(..., middleware=[CompactdMiddleware(cpd)])`)
    doing the same around each model call: append, call the model on compactd's prompt, append the
    response. Built on first use so that langchain is imported only by those who use it."""
    from langchain.agents.middleware import AgentMiddleware

    hook = CompactdHook(cpd, session_id, model=model)

    class _CompactdMiddleware(AgentMiddleware):  # type: ignore[misc]
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            sid = hook.session_for(
                request.runtime.config if hasattr(request.runtime, "config") else _config()
            )
            system = [request.system_message] if request.system_message is not None else []
            hook.sync(sid, [*system, *request.messages])
            served = hook.llm_input(sid)
            head, rest = (served[0], served[1:]) if served and served[0].type == "system" else (None, served)
            response = handler(request.override(messages=rest, system_message=head))
            hook.sync(sid, [*system, *request.messages, *_result_messages(response)])
            return response

    _CompactdMiddleware.__name__ = "CompactdMiddleware"
    return _CompactdMiddleware()


def _config() -> Any:
    from langgraph.config import get_config

    return get_config()


def _result_messages(response: Any) -> list[Any]:
    result = getattr(response, "result", None)
    if result is None:
        return [response]
    return list(result)


__all__ = ["CompactdHook", "CompactdMiddleware", "batch_key", "from_anthropic", "to_anthropic"]
