"""Secrets cut in two by a message boundary: the text a message ends with and the text the next one
starts with are redacted as one (Redactor.seam_cuts), before each block is redacted alone.

    edge_text(blocks, last=True)        the text a message ends with ("" when it ends otherwise)
    with_edge_text(blocks, text, last)  the blocks with that text replaced
    redact_seams(messages, redactor)    every boundary between consecutive messages, redacted
    continued_cuts(left, right)         the rest of a token that a redacted half shows the start of
    reseam(previous, first, redactor)   the boundary with the turn stored before an append

A message's edge is its first or last block when that block is text (a text block, a tool result
given as a string or ending/starting with a text block); a boundary next to a tool call's input,
an image or a thinking block joins nothing (a signed thinking block is never edited).

Across two appends the first half is stored already, redacted alone. The append reads that stored
message first, and its ingest scans the boundary with its own first message as it came, before
that one is redacted alone, as within one append (worker/ingest.py, `after=`; `stored_first`). Where
redacting the stored half alone took what shows the rest for a secret, the rest goes with it
(`continued_cuts`): the unbroken rest of a token whose start is a placeholder (a PEM key's to its
END line), a quoted string cut on a line where a secret was redacted. The store (append_turns)
then rewrites that turn and the copy of it in the session's snapshots (ingest.rewrite_turn_end) (their prompt is assembled
again); the API drops the cached prompt. When another append came between (the stored message is
no longer the one read), the append is ingested again (appending.py); `reseam` is the last resort.
A stored message offloaded to a virtual file is scanned with that file's end (its half stays there).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker.redaction.redact import Block

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


def redact_seams(
    messages: Sequence[Message], redactor: Redactor, *, stored_first: bool = False
) -> list[Message]:
    """messages with every secret that crosses the boundary of two consecutive ones replaced on
    both sides; a message left unchanged is returned as it was.

    Every boundary is scanned in the texts as they came, so what one boundary replaces never
    hides a secret from the next (a value that ran on into a message whose end starts a key).
    A message whose one text both boundaries cut gets both cuts, merged where they overlap.
    `stored_first`: the first message is stored already, redacted alone (the one an append
    follows), so a secret it shows redacted takes the rest of its token first (`continued_cuts`)."""
    starts: list[list[Cut]] = [[] for _ in messages]
    ends: list[list[Cut]] = [[] for _ in messages]
    for i in range(len(messages) - 1):
        left = edge_text(messages[i][1], last=True)
        right = edge_text(messages[i + 1][1], last=False)
        if left and right:
            ends[i], starts[i + 1] = redactor.seam_cuts(left, right)
            if stored_first and i == 0:  # and what a secret the stored half shows redacted runs on into
                ran_on = continued_cuts(left, right)
                ends[i], starts[i + 1] = ends[i] + ran_on[0], starts[i + 1] + ran_on[1]
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
_PLACEHOLDER = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")
# (a placeholder at the end, or followed only by the start of the token's rest: `[REDACTED:…]-31`)
_ENDS_REDACTED = re.compile(
    _PLACEHOLDER.pattern + r"((?=[A-Za-z0-9_+/=.-]*[A-Za-z0-9])[A-Za-z0-9_+/=.-]*)?\Z"
)
_STARTS_REDACTED = re.compile(r"\A" + _PLACEHOLDER.pattern)
_LEADING_RUN = re.compile(r"\A[^\s\"'`,;)\]}>]+")
_TRAILING_RUN = re.compile(r"[^\s\"'`=:,;(\[{<]+\Z")
# the rest of a key block that is not PEM (WireGuard `PrivateKey = …`): key material only; a PEM
# key's to its END line, its line breaks maybe escaped (`\\n` in a JSON string shown as text)
_KEY_RUN = re.compile(r"\A[A-Za-z0-9+/=]+")
_PEM_REST = re.compile(r"\A[A-Za-z0-9+/=\s\\]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# a quoted string still open at a text's end (its last line), and the rest of it the next text
# starts with: no white space in either part, and the quote opens (no letter or digit before it:
# `Bob's`, `Don't` are no strings); one whose content a redaction starts runs on across spaces
# (`password: "[REDACTED:…]` | `battery staple" …`: a passphrase the first half already showed)
_OPEN_QUOTE = re.compile(r"(?<![A-Za-z0-9])([\"'`])([^\s\"'`]*)\Z")
_OPEN_REDACTED = re.compile(r"(?<![A-Za-z0-9])([\"'`])(\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\][^\n\"'`]*)\Z")


def _open_string(left: str, right: str) -> tuple[int, int, str] | None:
    """A quoted string cut by the boundary on a line where a secret was redacted already, left
    alone (`value=[REDACTED:…] "Cl` | `eartextPassword1" />`): redacting that secret took the
    context that would show the string for a credential, so the string goes too. (where it starts
    in `left`, where it ends in `right`, the kind of the line's last placeholder); None otherwise."""
    line = left[left.rfind("\n") + 1 :]
    kinds = _PLACEHOLDER.findall(line)
    spaced = _OPEN_REDACTED.search(line)
    opened = spaced or _OPEN_QUOTE.search(line)
    if not kinds or opened is None or line[: opened.start()].count(opened.group(1)) % 2:
        return None  # no redaction on the line, no open string, or the quote found closes one
    rest = r"[^\n\"'`]*" if spaced else r"[^\s\"'`]*"
    close = re.match(rest + re.escape(opened.group(1)), right)
    if close is None or (close.end() == 1 and not opened.group(2)):
        return None
    lead = _PLACEHOLDER.match(opened.group(2))  # a placeholder the string starts with stays
    start = len(left) - len(opened.group(2)) + (lead.end() if lead else 0)
    return start, close.end() - 1, kinds[-1]


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def continued_cuts(left: str, right: str) -> tuple[list[Cut], list[Cut]]:
    """Where a secret that one half shows redacted runs on, unbroken, across the boundary
    (`…[REDACTED:x]` | `Qq0Pp rest`): that other half is cut too (`left` redacted alone; `right`
    redacted alone too, or as it came). A private key's rest runs to its END line, a quoted
    string to its closing quote (`_open_string`). (left cuts, right cuts) as seam_cuts gives them."""
    size = _nbytes(left)
    if (string := _open_string(left, right)) is not None:
        start, end, kind = string
        taken = left[start:] + right[:end]
        if taken:
            at = _nbytes(left[:start])
            return (
                [(at, size, kind, taken)] if at < size else [],
                [(0, _nbytes(right[:end]), kind, taken)] if end else [],
            )
    if (end_of := _ENDS_REDACTED.search(left)) is not None and not _STARTS_REDACTED.match(right):
        kind, rest = end_of.group(1), end_of.group(2) or ""
        run = (
            _PEM_REST.match(right) or _KEY_RUN.match(right)
            if kind == "private_key"
            else _LEADING_RUN.match(right)
        )
        if run is not None and run.group(0).strip():
            taken = rest + run.group(0)
            return (
                [(size - _nbytes(rest), size, kind, taken)] if rest else [],
                [(0, _nbytes(run.group(0)), kind, taken)],
            )
    if (start_of := _STARTS_REDACTED.match(right)) is not None:
        tail = _TRAILING_RUN.search(left)
        if tail is not None:
            return [(_nbytes(left[: tail.start()]), size, start_of.group(1), tail.group(0))], []
    return [], []


def continued(left: str, right: str, redactor: Redactor) -> tuple[str, str]:
    """Both texts with the cuts of `continued_cuts` replaced (one placeholder on both sides)."""
    left_cuts, right_cuts = continued_cuts(left, right)
    made: dict[tuple[str, str], str] = {}
    return redactor.apply_cuts(left, left_cuts, made), redactor.apply_cuts(right, right_cuts, made)


def reseam(previous: tuple[Block, ...], first: tuple[Block, ...], redactor: Redactor) -> Reseamed | None:
    """The boundary between a stored message and the first one of a new append, both redacted
    alone, redacted as one; None when no secret crosses it. A fallback: an append scans that
    boundary at ingest, with its first message as it came (pipeline.ingest `after=`, `reseamed`);
    this is for when the stored message changed since (appending.py retries before it comes to
    that). A secret recognised in one half takes the rest of its token from the other
    (`continued`), else the two are scanned joined."""
    left, right = edge_text(previous, last=True), edge_text(first, last=False)
    if not left or not right:
        return None
    new_left, new_right = continued(left, right, redactor)
    if new_left is left and new_right is right:
        new_left, new_right = redactor.redact_seam(left, right)
    if new_left is left and new_right is right:
        return None
    return reseamed(
        previous, with_edge_text(previous, new_left, last=True), with_edge_text(first, new_right, last=False)
    )


def reseamed(
    previous: tuple[Block, ...], new_previous: tuple[Block, ...], first: tuple[Block, ...]
) -> Reseamed:
    """The stored message rewritten at the boundary with an append's `first` message (its start
    redacted already), and the text the rewrite took from its end."""
    left, new_left = edge_text(previous, last=True), edge_text(new_previous, last=True)
    same = next((i for i, (a, b) in enumerate(zip(left, new_left, strict=False)) if a != b), len(left))
    return Reseamed(new_previous, first, (left[same:], new_left[same:]))
