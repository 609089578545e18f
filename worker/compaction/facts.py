"""Facts: what a handoff note must keep from an evicted span, extracted deterministically.

Task, every user instruction verbatim, files read / edited / created, commands with their outcome,
error lines and what came next, decisions, open questions and the next planned action.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from worker.compaction.harness import user_instructions
from worker.compaction.model import Block, Turn, block_text

PATH_KEYS = ("file_path", "path", "filePath", "notebook_path", "filename", "file")
COMMAND_KEYS = ("command", "cmd", "script")
READ_TOOL = re.compile(r"(?i)read|view|open|cat\b|get_file|glob|grep|search|ls\b|find")
CREATE_TOOL = re.compile(r"(?i)write|create|new_file|save")
EDIT_TOOL = re.compile(r"(?i)edit|replace|patch|insert|apply|update")
SHELL_TOOL = re.compile(r"(?i)bash|shell|terminal|exec|run|command|powershell|sh\b")
EDITOR_COMMANDS = {
    "view": "read",
    "create": "created",
    "str_replace": "edited",
    "insert": "edited",
    "undo_edit": "edited",
}
ERROR_LINE = re.compile(
    r"(?i)\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|no such file|cannot|refused)\b"
)
DECISION = re.compile(
    r"(?i)\b(i'll|i will|let's|let me|decided|decision|instead|we should|the fix is|the issue is|root cause|the problem is)\b"
)
SYSTEM_INJECTED = ("<system-reminder>", "<command-", "<local-command-", "Caveat:")

MAX_ITEM_CHARS = 400
MAX_COMMAND_CHARS = 200  # the first line; a heredoc or script body is in the archive
MAX_INSTRUCTION_CHARS = 2_000
ERROR_LINES_PER_RESULT = 3

Facts = dict[str, Any]
LIST_KEYS = (
    "instructions",
    "files_read",
    "files_edited",
    "files_created",
    "commands",
    "errors",
    "decisions",
    "questions",
)


def empty_facts() -> Facts:
    return {"task": "", "next_action": "", **{k: [] for k in LIST_KEYS}}


def extract(turns: Sequence[Turn], task: str = "") -> Facts:
    """The facts of a span of turns, oldest first, each list without duplicates."""
    facts = empty_facts()
    facts["task"] = _cut(task, MAX_INSTRUCTION_CHARS)
    calls = {b["id"]: b for t in turns for b in t.content if b.get("type") == "tool_use"}
    results = {b["tool_use_id"]: b for t in turns for b in t.content if b.get("type") == "tool_result"}
    open_errors: list[int] = []  # errors not yet followed by an action: the next call is the fix attempt
    for turn in turns:
        if turn.role == "user":
            _user_texts(facts, [b["text"] for b in turn.content if b.get("type") == "text"])
        for b in turn.content:
            kind = b.get("type")
            if kind == "text" and turn.role == "assistant":
                _assistant_text(facts, b["text"])
            elif kind == "tool_use":
                action = _call(facts, b, results.get(b["id"]))
                for i in open_errors:
                    facts["errors"][i] += f" -> next: {action}"
                open_errors = []
            elif kind == "tool_result":
                before = len(facts["errors"])
                _errors(facts, b, calls.get(b["tool_use_id"]))
                open_errors.extend(range(before, len(facts["errors"])))
    return {k: (_unique(v) if isinstance(v, list) else v) for k, v in facts.items()}


def fold(previous: Mapping[str, Any], new: Facts) -> Facts:
    """One set of facts from an older note's and a newer span's: lists concatenated, deduplicated."""
    out = empty_facts()
    for k in LIST_KEYS:
        out[k] = _unique([*previous.get(k, []), *new.get(k, [])])
    out["task"] = previous.get("task") or new.get("task", "")
    out["next_action"] = new.get("next_action") or previous.get("next_action", "")
    return out


def _user_texts(facts: Facts, texts: list[str]) -> None:
    facts["instructions"].extend(_cut(x, MAX_INSTRUCTION_CHARS) for x in user_instructions(texts))


def _assistant_text(facts: Facts, text: str) -> None:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]
    facts["decisions"].extend(_cut(s, MAX_ITEM_CHARS) for s in sentences if DECISION.search(s))
    facts["questions"].extend(_cut(s, MAX_ITEM_CHARS) for s in sentences if s.endswith("?"))
    if text.strip():
        facts["next_action"] = _cut(text.strip(), MAX_ITEM_CHARS * 2)


def file_of(call: Block) -> tuple[str, str] | None:
    """The file a tool call names and what it does to it: (path, "read" | "edited" | "created")."""
    args = call.get("input") or {}
    path = next((str(args[k]) for k in PATH_KEYS if isinstance(args.get(k), str)), "")
    if not path:
        return None
    editor_cmd = args.get("command") if isinstance(args.get("command"), str) else None
    return path, _file_action(str(call.get("name", "")), editor_cmd)


def command_of(call: Block) -> str | None:
    """The shell command a tool call runs; None for a file tool (an editor's `command`) or any other."""
    args = call.get("input") or {}
    command = next((args[k] for k in COMMAND_KEYS if isinstance(args.get(k), str)), None)
    editor_cmd = args.get("command") if isinstance(args.get("command"), str) else None
    editor = file_of(call) is not None and editor_cmd in EDITOR_COMMANDS
    if command and not editor and SHELL_TOOL.search(str(call.get("name", ""))):
        return str(command)
    return None


def _call(facts: Facts, call: Block, result: Block | None) -> str:
    """Record a tool call's file and command; returns a short label of the action."""
    name = str(call.get("name", ""))
    touched = file_of(call)
    path = touched[0] if touched else ""
    if touched:
        facts[f"files_{touched[1]}"].append(path)
    command = command_of(call)
    if command:
        first_line = command.strip().splitlines()[0] if command.strip() else command
        more = " …" if command.strip().count("\n") else ""
        facts["commands"].append(f"{_cut(first_line, MAX_COMMAND_CHARS)}{more} -> {_outcome(result)}")
        return f"{name}: {_cut(command.splitlines()[0] if command.strip() else command, 120)}"
    return f"{name} {path}".strip()


def _file_action(tool: str, editor_cmd: str | None) -> str:
    if editor_cmd in EDITOR_COMMANDS:
        return EDITOR_COMMANDS[editor_cmd]
    if EDIT_TOOL.search(tool):
        return "edited"
    if CREATE_TOOL.search(tool):
        return "created"
    return "read"


def _outcome(result: Block | None) -> str:
    if result is None:
        return "no result recorded"
    text = block_text(result)
    if result.get("is_error"):
        return "error: " + _cut(_first_error_line(text) or text.strip().split("\n")[0], 200)
    exit_code = re.search(r"(?i)exit(?:ed with)? code[: ]+(\d+)", text)
    if exit_code and exit_code.group(1) != "0":
        return f"exit code {exit_code.group(1)}"
    return "ok"


def _errors(facts: Facts, result: Block, call: Block | None) -> None:
    text = block_text(result)
    echoes = _echoes_files(call) if call is not None and not result.get("is_error") else ""
    if echoes == "read":
        # `raise Error` in a file that was read or grepped is content, not a failure
        return
    if echoes == "write":
        # a write or edit answers with a status line and then echoes the file: only the status counts
        text = text.strip().split("\n")[0]
    lines = [ln.strip() for ln in text.splitlines() if ERROR_LINE.search(ln)]
    if not lines and not result.get("is_error"):
        return
    where = f" (from {call.get('name')})" if call else ""
    for line in (lines or [text.strip().split("\n")[0]])[:ERROR_LINES_PER_RESULT]:
        if line:
            facts["errors"].append(_cut(line, MAX_ITEM_CHARS) + where)


def _echoes_files(call: Block) -> str:
    """What a file tool's result shows: "read" (files or grep hits), "write" (a status line, then the
    file), or "" for a shell or any other tool, whose output is an outcome."""
    name = str(call.get("name", ""))
    command = (call.get("input") or {}).get("command")
    editor_cmd = command if isinstance(command, str) and command in EDITOR_COMMANDS else None
    file_tool = READ_TOOL.search(name) or CREATE_TOOL.search(name) or EDIT_TOOL.search(name)
    if editor_cmd is None and (SHELL_TOOL.search(name) or not file_tool):
        return ""
    return "read" if _file_action(name, editor_cmd) == "read" else "write"


def _first_error_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ERROR_LINE.search(ln)), "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
