"""Assemble: a transcript becomes the Anthropic request layout of DESIGN §4.

system -> working memory -> handoff note -> compacted turns -> verbatim tail -> status note.
The stable parts come first so the prefix stays byte-identical between epochs; the status note,
the only volatile part, is added at serving time to the last user message.

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

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.compaction.model import Block, Policy, Transcript
from worker.compaction.tokens import count_block, count_text

CACHE_CONTROL = {"type": "ephemeral"}
# Room the engine leaves in the budget for the status note a fetch adds: its budget and files lines
# and the files read (MAX_FILES_SHOWN), plus the memory changes it carries (`turn_policy`: what the note holds).
FILES_NOTE_TOKENS = 600
# The memory changes since the pinned block at the top, at most: the working-memory budget, so the
# note can carry every change and the block is refreshed (the cached prefix written again) only
# when a summary or a new system prompt rewrites the top anyway, or the changes outgrow this.
MEMORY_NOTE_TOKENS = 800
# the changes note of a prompt assembled from the database (no entry cached: after a memory write
# from the API, say), whose snapshot's turns kept room only for the note its job published
DB_NOTE_TOKENS = 200
# files read so far named in the note (the newest), and read ranges per file (the newest); fewer
# files when their lines would pass FILES_NOTE_TOKENS (tests/unit/test_status_note.py)
MAX_FILES_SHOWN = 8
MAX_RANGES_SHOWN = 4
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
    """Tokens of the prompt assembled from t, before a fetch adds its tail and status note."""
    return t.tokens() + prefix_tokens(t)


def turn_policy(policy: Policy, t: Transcript, memory_note: str = "") -> Policy:
    """The policy t's turns are compacted with: the budget less the system prompt, the memory
    block and the room kept for the status note (its file lines and the memory changes it will
    carry, `memory_note`: a line of its own)."""
    note_room = count_text("\n" + memory_note) if memory_note else 0
    return policy.reserving(prefix_tokens(t) + FILES_NOTE_TOKENS + note_room)


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


def finish(end: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """The part of a prompt rendered per fetch: the snapshot's last message with the tail merged
    on, the fetch's breakpoints, and the status note last (after every breakpoint: it changes)."""
    return add_status(mark_fetch_breakpoints(merge_roles(end)), note)


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


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A virtual file the agent can read back, and which line ranges it has read so far."""

    ref: str
    kind: str
    lines: int
    read_ranges: tuple[str, ...] = ()


def status_note(
    tokens_used: int, budget_tokens: int, file_count: int, read: Sequence[FileInfo], memory_note: str = ""
) -> str:
    """The small volatile note at the very end of the prompt: budget, virtual files, what has been
    read of them, and what changed in working memory since the pinned block at the top was rendered.

    The note is billed in full at every fetch (nothing after the last breakpoint is cached), so it
    counts the files and names only the newest ones the agent has read: the prompt names every other
    one where it points to it (the marker of its clipped or offloaded output, or the handoff note
    naming the archive that holds it). The oldest 20, named whether read or not, were 9-12% of the
    bill at 32k and 4-5% at 200k (BENCHMARKS, session 8). The part before the memory changes stays
    within FILES_NOTE_TOKENS, the room the engine leaves for it.

    `file_count`: the session's virtual files; `read`: those read so far, oldest first (a fetch
    builds no FileInfo for the others: with 200 files that was ~0.45 ms of its time here)."""
    lines = [_budget_line(tokens_used, budget_tokens)]
    if file_count:
        lines.append(_virtual_files_line(file_count))
    lines += _read_section(tuple(read))
    if memory_note:
        lines.append(memory_note)
    return "\n".join(lines)


def _budget_line(tokens_used: int, budget_tokens: int) -> str:
    return f"[compactd status] context: {tokens_used:,} of {budget_tokens:,} tokens used."


def _virtual_files_line(count: int) -> str:
    return (
        f"Virtual files: {count:,}. A marker names the file wherever text was clipped, offloaded or"
        " archived (read it with the read_file / grep tools)."
    )


@functools.lru_cache(maxsize=1024)
def _read_section(read: tuple[FileInfo, ...]) -> tuple[str, ...]:
    """The "Read so far" lines: the newest files read, as many as fit FILES_NOTE_TOKENS beside the
    lines before them at their longest (cached: a session's fetches repeat it until its next read)."""
    longest = [_budget_line(10**12, 10**12), _virtual_files_line(10**9), "Read so far (999,999, the newest):"]
    shown = [_read_line(f) for f in read[-MAX_FILES_SHOWN:]]
    while shown and count_text("\n".join([*longest, *shown])) > FILES_NOTE_TOKENS:
        shown.pop(0)  # long ranges: fewer files, the newest kept
    if not shown:
        return ()
    return (
        "Read so far:" if len(shown) == len(read) else f"Read so far ({len(read):,}, the newest):",
        *shown,
    )


def _read_line(f: FileInfo) -> str:
    ranges = list(f.read_ranges[-MAX_RANGES_SHOWN:])
    if len(f.read_ranges) > MAX_RANGES_SHOWN:
        ranges.insert(0, f"{len(f.read_ranges) - MAX_RANGES_SHOWN} earlier")
    return f"- {f.ref} ({f.kind}, {f.lines:,} lines; read: {', '.join(ranges)})"


def note_tokens(note: str) -> int:
    """Tokens the status note adds to a request: a text block of its own on the last message
    (counted as count_request counts it, block overhead included, or the served total runs short)."""
    return count_block({"type": "text", "text": note}) if note else 0


def add_status(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """Append the status note as a text block to the last message if it is from the user."""
    if not messages or messages[-1]["role"] != "user" or not note:
        return messages
    last = messages[-1]
    return [*messages[:-1], {"role": "user", "content": [*last["content"], {"type": "text", "text": note}]}]
