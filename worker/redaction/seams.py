"""Secrets cut in two by a message boundary: the text a message ends with and the text the next one
starts with are redacted as one (Redactor.seam_cuts), before each block is redacted alone.

    edge_text(blocks, last=True)        the text a message ends with ("" when it ends otherwise)
    with_edge_text(blocks, text, last)  the blocks with that text replaced
    redact_seams(messages, redactor)    every boundary between consecutive messages, redacted
    reseam(previous, first, redactor)   the boundary with the turn stored before an append
    rewrite_turn_end(turns, seq, a, b)  a snapshot's copy of that stored turn, rewritten alike

A message's edge is its first or last block when that block is text (a text block, a tool result
given as a string or ending/starting with a text block); a boundary next to a tool call's input,
an image or a thinking block joins nothing (a signed thinking block is never edited).

Across two appends the first half is stored already: the store (append_turns) rewrites that turn
and the copy of it in the session's snapshots (their prompt is assembled again); the API then drops
the cached prompt. A half recognised alone, on either side, takes the unbroken rest of its token
on the other side with it (`continued`: a PEM key to its END line, any other to the next space or
quote). Within one append that is not needed: both halves are seen before either is redacted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from worker.compaction.model import Block, Turn
from worker.compaction.tokens import count_message

if TYPE_CHECKING:
    from worker.redaction.redact import Cut, Redactor

Message = tuple[str, tuple[Block, ...]]  # (role, blocks), as normalize_message returns them


def _edge_at(blocks: Sequence[Block], *, last: bool) -> tuple[int, int] | None:
    """Where a message's first (last) text is: (block index, index inside a tool result's list of
    blocks, or -1 for the block itself); None when the message starts (ends) with something else."""
    if not blocks:
        return None
    at = len(blocks) - 1 if last else 0
    block = blocks[at]
    content = block.get("content")
    if block.get("type") == "text" or (block.get("type") == "tool_result" and isinstance(content, str)):
        return at, -1
    if block.get("type") == "tool_result" and isinstance(content, list) and content:
        inner = len(content) - 1 if last else 0
        if isinstance(content[inner], dict) and content[inner].get("type") == "text":
            return at, inner
    return None


def edge_text(blocks: Sequence[Block], *, last: bool) -> str:
    """The text at the start (or end) of a message, "" when it starts (ends) with something else."""
    where = _edge_at(blocks, last=last)
    if where is None:
        return ""
    at, inner = where
    block = blocks[at]
    if inner >= 0:
        return str(block["content"][inner].get("text", ""))
    return str(block.get("text", "")) if block.get("type") == "text" else str(block["content"])


def with_edge_text(blocks: tuple[Block, ...], text: str, *, last: bool) -> tuple[Block, ...]:
    """blocks with their edge text (see edge_text) replaced by text."""
    where = _edge_at(blocks, last=last)
    assert where is not None, "the message has no edge text to replace"
    at, inner = where
    block = blocks[at]
    if inner >= 0:
        content = list(block["content"])
        content[inner] = {**content[inner], "text": text}
        new = {**block, "content": content}
    else:
        new = {**block, "text" if block.get("type") == "text" else "content": text}
    return (*blocks[:at], new, *blocks[at + 1 :])


def redact_seams(messages: Sequence[Message], redactor: Redactor) -> list[Message]:
    """messages with every secret that crosses the boundary of two consecutive ones replaced on
    both sides; a message left unchanged is returned as it was.

    Every boundary is scanned in the texts as they came, so what one boundary replaces never
    hides a secret from the next (a value that ran on into a message whose end starts a key).
    A message whose one text both boundaries cut gets both cuts, merged where they overlap."""
    starts: list[list[Cut]] = [[] for _ in messages]
    ends: list[list[Cut]] = [[] for _ in messages]
    for i in range(len(messages) - 1):
        left = edge_text(messages[i][1], last=True)
        right = edge_text(messages[i + 1][1], last=False)
        if left and right:
            ends[i], starts[i + 1] = redactor.seam_cuts(left, right)
    out = list(messages)
    made: dict[tuple[str, str], str] = {}  # a crossing secret is one placeholder on both sides
    for i, (role, blocks) in enumerate(messages):
        if not starts[i] and not ends[i]:
            continue
        if _edge_at(blocks, last=False) == _edge_at(blocks, last=True):
            text = redactor.apply_cuts(edge_text(blocks, last=True), starts[i] + ends[i], made)
            blocks = with_edge_text(with_edge_text(blocks, text, last=True), text, last=False)
        else:
            for cuts, last in ((starts[i], False), (ends[i], True)):
                if cuts:
                    text = redactor.apply_cuts(edge_text(blocks, last=last), cuts, made)
                    blocks = with_edge_text(blocks, text, last=last)
        out[i] = (role, blocks)
    return out


@dataclass(frozen=True, slots=True)
class Reseamed:
    """A boundary with the turn stored before this append, redacted."""

    previous: tuple[Block, ...]  # the stored last message, its end redacted
    first: tuple[Block, ...]  # this append's first message, its start redacted
    taken: tuple[str, str]  # (the text taken from the previous message's end, what replaced it)


# a placeholder at the very end (start) of a text, and the run of a token that continues it
_ENDS_REDACTED = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]\Z")
_STARTS_REDACTED = re.compile(r"\A\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")
_LEADING_RUN = re.compile(r"\A[^\s\"'`,;)\]}>]+")
_TRAILING_RUN = re.compile(r"[^\s\"'`=:,;(\[{<]+\Z")
# the rest of a key block that is not PEM (WireGuard `PrivateKey = …`): key material only
_KEY_RUN = re.compile(r"\A[A-Za-z0-9+/=]{16,}")
_PEM_REST = re.compile(r"\A[A-Za-z0-9+/=\s]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")


def continued(left: str, right: str, redactor: Redactor) -> tuple[str, str]:
    """Both already redacted alone: a secret recognised in one half whose other half runs on,
    unbroken, across the boundary (`…[REDACTED:x]` | `Qq0Pp rest`) loses that other half too; a
    private key's rest runs to its END line."""
    if (end := _ENDS_REDACTED.search(left)) is not None:
        kind = end.group(1)
        run = (
            _PEM_REST.match(right) or _KEY_RUN.match(right)
            if kind == "private_key"
            else _LEADING_RUN.match(right)
        )
        if run is not None and run.group(0).strip():
            return left, redactor.placeholder(kind, run.group(0)) + right[run.end() :]
    if (start := _STARTS_REDACTED.match(right)) is not None:
        run = _TRAILING_RUN.search(left)
        if run is not None:
            return left[: run.start()] + redactor.placeholder(start.group(1), run.group(0)), right
    return left, right


def reseam(previous: tuple[Block, ...], first: tuple[Block, ...], redactor: Redactor) -> Reseamed | None:
    """The boundary between a stored message and the first one of a new append (both already
    redacted on their own), redacted as one; None when no secret crosses it."""
    left, right = edge_text(previous, last=True), edge_text(first, last=False)
    if not left or not right:
        return None
    new_left, new_right = continued(left, right, redactor)
    if new_left is left and new_right is right:
        new_left, new_right = redactor.redact_seam(left, right)
    if new_left is left and new_right is right:
        return None
    same = next((i for i, (a, b) in enumerate(zip(left, new_left, strict=False)) if a != b), len(left))
    return Reseamed(
        with_edge_text(previous, new_left, last=True),
        with_edge_text(first, new_right, last=False),
        (left[same:], new_left[same:]),
    )


def rewrite_turn_end(turns: tuple[Turn, ...], seq: int, taken: str, put: str) -> tuple[Turn, ...] | None:
    """turns with the text that turn `seq` ends with changed from ending in `taken` to ending in
    `put` (a snapshot's copy of a turn an append has rewritten); None when there is no such turn
    (summarized away) or its end differs (it was clipped there)."""
    for i, turn in enumerate(turns):
        if turn.seq != seq:
            continue
        edge = edge_text(turn.content, last=True)
        if not taken or not edge.endswith(taken):
            return None
        content = with_edge_text(turn.content, edge[: len(edge) - len(taken)] + put, last=True)
        return (*turns[:i], replace(turn, content=content, tokens=count_message(content)), *turns[i + 1 :])
    return None
