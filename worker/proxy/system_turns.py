"""Claude Code's `role: "system"` messages, folded into the user turns compactd stores.

Claude Code 2.1.328 (the per-turn-control beta) sends its environment block as a message of its own
with role "system", between the first user message and the first assistant turn — as a list of
blocks carrying `cache_control` on the first request and as a plain string on later ones
(docs/claude-code.md). A session holds user and assistant turns only, so such a message's text is
folded into a neighbouring user message as a `<system-reminder>` text block (how Claude Code marks
system text inside user turns): into the user message before it, else after the tool results of the
user message after it, else it becomes a user message of its own. The same history folds to the same
messages whichever form the system message took, so a conversation reconciles across its requests.
"""

from __future__ import annotations

from typing import Any

from worker.compaction.model import tool_result_text


def system_text(message: dict[str, Any]) -> str:
    """The text of a system message, string or text blocks (cache_control left out): its content has
    the shape of a tool_result's."""
    return tool_result_text(message)


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def is_system(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "system"


def fold_system_messages(messages: list[Any], counts: list[int] | None = None) -> list[Any]:
    """messages with every role "system" message folded into a user message; unchanged (the same
    list) when there is none. `counts`, when given, gets the folded length after each message."""
    if not any(is_system(m) for m in messages):
        if counts is not None:
            counts.extend(range(1, len(messages) + 1))
        return messages
    return fold_onto([], messages, counts)


def fold_onto(out: list[Any], messages: list[Any], counts: list[int] | None = None) -> list[Any]:
    """`out` (extended in place and returned) with `messages` folded after it: the fold of a history
    whose first messages fold to `out`, the last of them not a system message (nothing waits to be
    folded into the next user message). `counts` as in fold_system_messages."""
    waiting: list[dict[str, Any]] = []  # folded text that goes into the next user message
    for m in messages:
        if is_system(m):
            text = system_text(m).strip()
            if text:
                block = {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>"}
                if out and isinstance(out[-1], dict) and out[-1].get("role") == "user":
                    out[-1] = {**out[-1], "content": [*_blocks(out[-1].get("content")), block]}
                else:
                    waiting.append(block)
        else:
            if waiting and isinstance(m, dict) and m.get("role") == "user":
                m = {**m, "content": [*_blocks(m.get("content")), *waiting]}
                waiting = []
            elif waiting:
                out.append({"role": "user", "content": waiting})
                waiting = []
            out.append(m)
        if counts is not None:
            counts.append(len(out))
    if waiting:
        out.append({"role": "user", "content": waiting})
    return out
