"""Message builders for tests: the wire messages an agent appends (user text, an assistant tool
call, its result, a text exchange, a real long session)."""

from __future__ import annotations

from typing import Any

from tests.conftest import require
from tests.integration.realdata import claude_code_files, load_messages


def user(text: str) -> dict[str, Any]:
    """A user message of plain text."""
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    """An assistant message of plain text."""
    return {"role": "assistant", "content": text}


def exchange(ask: str, answer: str = "Noted.") -> list[dict[str, Any]]:
    """A user message and the assistant's text answer."""
    return [user(ask), assistant(answer)]


def assistant_tool(tid: str, name: str = "bash", tool_input: dict[str, Any] | None = None) -> dict[str, Any]:
    """An assistant message calling one tool (`bash` running `ls` unless told)."""
    block = {
        "type": "tool_use",
        "id": tid,
        "name": name,
        "input": {"command": "ls"} if tool_input is None else tool_input,
    }
    return {"role": "assistant", "content": [block]}


def result(tid: str, text: str = "out", *, is_error: bool = False) -> dict[str, Any]:
    """The user message carrying one tool call's result."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": text}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def tool_unit(tid: str, tool_input: dict[str, Any], output: str, name: str = "Bash") -> list[dict[str, Any]]:
    """A whole tool loop: the call and its result."""
    return [assistant_tool(tid, name, tool_input), result(tid, output)]


def long_session(turns: int = 200) -> list[dict[str, Any]]:
    """The first `turns` messages of the smallest real Claude Code session that has that many
    (skips locally, fails under CI=true, when the shared data holds none)."""
    for path in claude_code_files():
        if path.stat().st_size < 4_000_000 and len(messages := load_messages(path)) >= turns:
            return messages[:turns]
    require(False, f"needs the shared data: a Claude Code transcript of {turns}+ messages under 4 MB")
    raise AssertionError("unreachable")
