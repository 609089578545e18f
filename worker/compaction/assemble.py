"""Assemble: a transcript becomes the Anthropic request layout of DESIGN §4.

system -> working memory -> handoff note -> compacted turns -> verbatim tail. A fetch adds nothing
but cache breakpoints (their placement is not part of what the provider compares), so within an
epoch every prompt extends the one before: the memory changes since the pinned block ride in the
user turns they were appended with (`memory_note_block`), never in a note renewed per fetch.

Prompt-cache breakpoints (at most 4, the provider's limit): the end of the system prompt and
memory, one stored with the snapshot, and per fetch the newest message and the user message the
previous fetch ended with, so each fetch reads the previous one's prefix. The snapshot's own is
its end, or, when an epoch kept part of the previous prompt, the last message an earlier fetch
ended with before the first rewritten turn (`Transcript.cache_mark`): the new epoch's first
fetch then reads the kept prefix from the cache instead of writing it again. With a handoff, the
end of the notes (one text block each, the earlier ones byte for byte) may carry one
(`Transcript.notes_mark`): the prefix the next summary round reads. A snapshot places at most two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from worker.compaction.model import Block, Policy, Transcript, Turn
from worker.compaction.tokens import count_block, count_text

CACHE_CONTROL = {"type": "ephemeral"}
# A memory note's length at most: the working-memory budget, so one note can carry every change
# since the pinned block (after a summary archived the turns whose notes carried them)
MEMORY_NOTE_TOKENS = 800
# the element a memory note is written in: harness text to the summarizer, not a user instruction
MEMORY_NOTE_TAG = "compactd-memory"
# blocks the API refuses a cache_control on
_UNMARKABLE = {"thinking", "redacted_thinking"}


def assemble(t: Transcript) -> dict[str, Any]:
    """{"system": [text blocks], "messages": [...]}, with the snapshot's breakpoints: after the
    system prompt and memory, and at the end of the messages (the stable prefix of everything
    served until the next epoch), or at the turns its epoch marked (`Transcript.cache_mark`,
    `standing_mark`) and the end of the notes (`notes_mark`): with two of them, their prefixes
    hold the system prompt and it goes unmarked."""
    marks = {t.cache_mark, t.standing_mark} - {0}
    kept = [i for i, turn in enumerate(t.turns) if turn.seq in marks]
    notes = t.notes_mark and t.handoff is not None
    system = system_blocks(t)
    if system and len(kept) + notes < 2:
        system[-1] = {**system[-1], "cache_control": CACHE_CONTROL}
    messages = [turn.as_message() for turn in t.turns]
    if 0 in kept:
        # the task: its own last block, which a note merged after it must not move
        messages[0] = mark_message(messages[0])
    if t.handoff is not None:
        messages = _insert_handoff(messages, t.handoff.notes, marked=notes)
    merged = merge_roles(messages)
    for i in kept:
        if i > 0:
            at = merged_index(messages, i + (1 if t.handoff is not None else 0))
            merged[at] = mark_message(merged[at])
    if merged and not kept and not notes:
        merged[-1] = mark_message(merged[-1])
    return {"system": system, "messages": merged}


def merged_index(messages: Sequence[dict[str, Any]], k: int) -> int:
    """Where messages[k] ends up once merge_roles has merged neighbours of the same role."""
    return sum(1 for i in range(1, k + 1) if messages[i]["role"] != messages[i - 1]["role"])


def system_blocks(t: Transcript) -> list[Block]:
    system: list[Block] = []
    if t.system:
        system.append({"type": "text", "text": t.system})
    if t.memory:
        system.append({"type": "text", "text": f"<working_memory>\n{t.memory}\n</working_memory>"})
    return system


def prefix_tokens(t: Transcript) -> int:
    """Tokens of the system prompt and the memory block (Transcript.tokens() counts the turns)."""
    return sum(count_text(b["text"]) for b in system_blocks(t))


def served_tokens(t: Transcript) -> int:
    """Tokens of the prompt assembled from t, before a fetch adds its tail."""
    return t.tokens() + prefix_tokens(t)


def turn_policy(policy: Policy, t: Transcript) -> Policy:
    """The policy t's turns are compacted with: the budget less the system prompt and the memory
    block (a memory note is part of the turn it came with, counted there)."""
    return policy.reserving(prefix_tokens(t))


def mark_message(message: dict[str, Any]) -> dict[str, Any]:
    """The message with a cache_control breakpoint on its last block that may carry one."""
    blocks = list(message["content"])
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].get("type") not in _UNMARKABLE:
            if "cache_control" not in blocks[i]:
                blocks[i] = {**blocks[i], "cache_control": CACHE_CONTROL}
            return {"role": message["role"], "content": blocks}
    return message


def mark_fetch_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A fetch's own breakpoints, on the part it renders: the newest message, and the user message
    before the newest assistant message, where the previous fetch (one model call ago) put its
    newest breakpoint, so its cached prefix is found exactly, whatever the lookback."""
    if not messages:
        return messages
    out = list(messages)
    out[-1] = mark_message(out[-1])
    last_assistant = next((i for i in range(len(out) - 1, -1, -1) if out[i]["role"] == "assistant"), None)
    if last_assistant is not None and last_assistant > 0:
        out[last_assistant - 1] = mark_message(out[last_assistant - 1])
    return out


def finish(end: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The part of a prompt rendered per fetch: the snapshot's last message with the tail merged
    on, and the fetch's breakpoints."""
    return mark_fetch_breakpoints(merge_roles(end))


def memory_note_block(changes: str) -> Block:
    """The text block a user turn carries the working-memory changes in (since the pinned block
    or the turn's last note): appended with the turn, kept with it, so no later fetch takes it back."""
    return {"type": "text", "text": f"<{MEMORY_NOTE_TAG}>\n{changes}\n</{MEMORY_NOTE_TAG}>"}


def with_memory_note(turn: Turn, changes: str) -> Turn:
    """A user turn with the memory changes appended as its last block, its tokens counted with it."""
    block = memory_note_block(changes)
    return replace(turn, content=(*turn.content, block), tokens=turn.tokens + count_block(block))


def strip_cache_control(block: Block) -> Block:
    """A client's own breakpoint is dropped at ingest: compactd places them (the API allows 4)."""
    content = block.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content):
        block = {**block, "content": [strip_cache_control(p) if isinstance(p, dict) else p for p in content]}
    if "cache_control" not in block:
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def _insert_handoff(
    messages: list[dict[str, Any]], notes: Sequence[str], *, marked: bool = False
) -> list[dict[str, Any]]:
    """The notes (one text block each, oldest first) go right after the first user message (the
    task), which is always kept; `marked`: a breakpoint on the newest note."""
    note_message = {"role": "user", "content": [{"type": "text", "text": n} for n in notes]}
    if marked:
        note_message = mark_message(note_message)
    if not messages:
        return [note_message]
    return [messages[0], note_message, *messages[1:]]


def merge_roles(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge neighbours with the same role (the API would); tool_result blocks stay first."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = (
            list(m["content"]) if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        )
        if out and out[-1]["role"] == m["role"]:
            merged = out[-1]["content"] + content
            if m["role"] == "user":
                merged = [b for b in merged if b.get("type") == "tool_result"] + [
                    b for b in merged if b.get("type") != "tool_result"
                ]
            out[-1] = {"role": m["role"], "content": merged}
        else:
            out.append({"role": m["role"], "content": content})
    return out
