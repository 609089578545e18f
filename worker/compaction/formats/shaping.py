"""Shaping: a format's raw entries into a valid Anthropic conversation.

Importers yield Entries (role, blocks, where they came from). shape() then, in order:
- moves blocks that cannot stand in their role (tool_use from a user, tool_result from the
  assistant, thinking from a user) to text, or drops them;
- folds streamed pieces of one API message back together (same `group`, only tool results in
  between: Claude Code and OpenHands write parallel calls one line per call, results interleaved);
- merges same-role neighbours, drops messages with no content, merges again: roles alternate;
- gives every tool_use a unique, API-safe id, answers it with exactly one tool_result in the next
  user message (results first; a missing one is synthesized as an error) and turns results that
  answer nothing into text;
- starts the conversation with a user message.
Every repair appends a warning naming where it happened.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from worker.compaction.errors import InvalidTranscript
from worker.compaction.formats.blocks import result_text
from worker.compaction.model import Block, Role

NO_RESULT = "[compactd: no result was recorded for this call]"
START_TEXT = "(conversation start)"
UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Entry:
    """One source message: its role, blocks and where it came from ("line 12", "history[3]").

    group: the API message id streamed pieces share (None: never folded into a neighbour).
    boundary: a compaction summary starts here (its message index is reported).
    """

    role: Role
    blocks: tuple[Block, ...]
    where: str
    group: str | None = None
    boundary: bool = False


@dataclass(slots=True)
class _Message:
    """A message being shaped: blocks with the place each came from."""

    role: Role
    items: list[tuple[Block, str]]
    group: str | None = None
    boundaries: list[str] = field(default_factory=list)  # wheres of entries that start one
    where: str = "synthesized"


def shape(
    entries: Iterable[Entry], warnings: list[str], sources: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """(valid alternating messages, (message, block) index where each compaction boundary starts).

    A boundary's block index is > 0 when the first entry after it was merged into a message that
    already held blocks (e.g. the last tool results before Claude Code compacted). `sources`, if
    given, receives where each message's last block came from (when the message was complete).
    """
    placed = [_placed(e, warnings) for e in entries]
    merged = _merged(_nonempty(_merged(_folded(placed)), warnings))
    paired = _paired(merged, warnings)
    if not paired:
        raise InvalidTranscript("no conversation messages found: nothing to import")
    if paired[0].role != "user":
        warnings.append(
            f"{paired[0].items[0][1]}: the conversation starts with the assistant; "
            f"inserted a user message {START_TEXT!r}"
        )
        paired.insert(0, _Message("user", [({"type": "text", "text": START_TEXT}, "synthesized")]))
    messages = [{"role": m.role, "content": [b for b, _ in m.items]} for m in paired]
    if sources is not None:
        sources.extend(m.items[-1][1] if m.items else "" for m in paired)
    return messages, [
        (i, next((j for j, (_, w) in enumerate(m.items) if w == where), 0))
        for i, m in enumerate(paired)
        for where in m.boundaries
    ]


def _placed(entry: Entry, warnings: list[str]) -> _Message:
    """The entry's blocks that may stand in its role (others become text or go, with a warning)."""
    items: list[tuple[Block, str]] = []
    for block in entry.blocks:
        kind = block.get("type")
        if entry.role == "user" and kind == "tool_use":
            warnings.append(f"{entry.where}: tool_use {block.get('id')} in a user message; kept as text")
            block = {"type": "text", "text": f"[tool_use {block.get('name')}: {block.get('input')}]"}
        elif entry.role == "assistant" and kind == "tool_result":
            warnings.append(f"{entry.where}: tool_result in an assistant message; kept as text")
            block = {"type": "text", "text": _orphan_text(block)}
        elif entry.role == "user" and kind in ("thinking", "redacted_thinking"):
            warnings.append(f"{entry.where}: a {kind} block in a user message; dropped")
            continue
        items.append((block, entry.where))
    return _Message(entry.role, items, entry.group, [entry.where] if entry.boundary else [], entry.where)


def _nonempty(messages: list[_Message], warnings: list[str]) -> list[_Message]:
    """Messages with content (checked after folding: a streamed piece may be blank on its own)."""
    for m in messages:
        if not m.items:
            warnings.append(f"{m.where}: {m.role} message with no content; dropped")
    return [m for m in messages if m.items]


def _only_results(message: _Message) -> bool:
    return message.role == "user" and all(b.get("type") == "tool_result" for b, _ in message.items)


def _folded(messages: list[_Message]) -> list[_Message]:
    """Streamed pieces of one assistant API message, put back into one message."""
    out: list[_Message] = []
    open_at: int | None = None
    for m in messages:
        if m.role == "assistant" and m.group is not None:
            if (
                open_at is not None
                and out[open_at].group == m.group
                and all(_only_results(x) for x in out[open_at + 1 :])
            ):
                out[open_at].items.extend(m.items)
                continue
            open_at = len(out)
        elif m.role == "assistant":
            open_at = None
        out.append(_Message(m.role, list(m.items), m.group, list(m.boundaries), m.where))
    return out


def _merged(messages: list[_Message]) -> list[_Message]:
    """Same-role neighbours merged into one message (blocks in order)."""
    out: list[_Message] = []
    for m in messages:
        if out and out[-1].role == m.role:
            out[-1].items = out[-1].items + m.items
            out[-1].boundaries = out[-1].boundaries + m.boundaries
        else:
            out.append(m)
    return out


@dataclass(slots=True)
class _Call:
    raw_id: str
    new_id: str
    name: str
    where: str
    answered: bool = False


def _paired(messages: list[_Message], warnings: list[str]) -> list[_Message]:
    """Every tool_use answered exactly once in the next user message; orphan results as text."""
    out: list[_Message] = []
    used: set[str] = set()
    calls: list[_Call] = []
    for m in messages:
        if m.role == "assistant":
            if calls:
                out.append(_Message("user", _answered([], calls, warnings)))
            m.items, calls = _named_calls(m.items, used, warnings)
        else:
            m.items = _answered(m.items, calls, warnings)
            calls = []
        out.append(m)
    if calls:
        out.append(_Message("user", _answered([], calls, warnings)))
    return out


def _named_calls(
    items: list[tuple[Block, str]], used: set[str], warnings: list[str]
) -> tuple[list[tuple[Block, str]], list[_Call]]:
    """The assistant's blocks with every tool_use id unique and API-safe, and its calls in order."""
    out, calls = [], []
    for block, where in items:
        if block.get("type") == "tool_use":
            raw = block["id"]
            safe = _safe_id(raw, where, warnings)
            new = _unique(safe, used)
            if new != safe:
                warnings.append(f"{where}: tool_use id {raw} repeats an earlier call's id; renamed {new}")
            if new != raw:
                block = {**block, "id": new}
            used.add(new)
            calls.append(_Call(raw, new, str(block.get("name")), where))
        out.append((block, where))
    return out, calls


def _safe_id(raw: str, where: str, warnings: list[str]) -> str:
    safe = UNSAFE_ID.sub("_", raw) or "toolu_import"
    if safe != raw:
        warnings.append(f"{where}: tool_use id {raw!r} has characters the API rejects; renamed {safe}")
    return safe


def _unique(safe: str, used: set[str]) -> str:
    if safe not in used:
        return safe
    n = 2
    while f"{safe}_{n}" in used:
        n += 1
    return f"{safe}_{n}"


def _answered(
    items: list[tuple[Block, str]], calls: list[_Call], warnings: list[str]
) -> list[tuple[Block, str]]:
    """A user message's blocks: one result per call (in call order), then everything else."""
    results: dict[str, tuple[Block, str]] = {}
    rest: list[tuple[Block, str]] = []
    for block, where in items:
        if block.get("type") != "tool_result":
            rest.append((block, where))
            continue
        call = next((c for c in calls if c.raw_id == block["tool_use_id"] and not c.answered), None)
        if call is None:
            warnings.append(
                f"{where}: tool_result for {block['tool_use_id']} answers no tool_use in the previous "
                "assistant message; kept as text"
            )
            rest.append(({"type": "text", "text": _orphan_text(block)}, where))
            continue
        call.answered = True
        results[call.new_id] = ({**block, "tool_use_id": call.new_id}, where)
    answered = []
    for call in calls:
        if call.new_id not in results:
            warnings.append(
                f"{call.where}: tool_use {call.new_id} ({call.name}) has no result; synthesized an error result"
            )
            synthesized = {
                "type": "tool_result",
                "tool_use_id": call.new_id,
                "is_error": True,
                "content": NO_RESULT,
            }
            results[call.new_id] = (synthesized, call.where)
        answered.append(results[call.new_id])
    return answered + rest


def _orphan_text(block: Block) -> str:
    text = result_text(block.get("content"))
    error = " (error)" if block.get("is_error") else ""
    return f"[tool result for {block.get('tool_use_id')}{error}]\n{text}".rstrip()
