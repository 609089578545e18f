"""Ingest: one append's messages made ready to store (normalize -> redact -> offload -> count).

It sits above both pure packages (compaction's model and stages, redaction's Redactor) so that
neither imports the other; it does no I/O itself. The append flow calls `ingest`; the store calls
`rewrite_turn_end` when an append's seam redaction rewrote the turn stored before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from worker.compaction.assemble import strip_cache_control
from worker.compaction.model import Block, FileWrite, Policy, Transcript, Turn
from worker.compaction.normalize import normalize_message
from worker.compaction.offload import Offload
from worker.compaction.tokens import count_message
from worker.redaction import Redactor
from worker.redaction.seams import Message, edge_text, redact_seams, with_edge_text


@dataclass(frozen=True, slots=True)
class Ingested:
    turns: tuple[Turn, ...]
    files: tuple[FileWrite, ...]
    # `after`'s blocks with the part of a secret that crosses into the first message redacted
    # (None: nothing crosses)
    after: tuple[Block, ...] | None = None


def ingest(
    messages: Sequence[Any],
    *,
    first_seq: int,
    redactor: Redactor,
    policy: Policy,
    after: Message | None = None,
) -> Ingested:
    """Normalize, redact, offload and count each message, before anything is persisted. A secret
    split between two consecutive messages is redacted on both sides (worker/redaction/seams.py),
    the boundary with `after` (the stored message these follow, redacted already) included.

    Raises InvalidTranscript naming the bad message. Offloaded payloads come back as files.
    """
    normalized = [normalize_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    # a secret cut in two by a message boundary first: neither half is recognisable alone
    # (the stored message this append follows first: its end is scanned with the new first message)
    changed = None
    if after is not None:
        before, *seamed = redact_seams([after, *normalized], redactor, stored_first=True)
        changed = before[1] if before[1] is not after[1] else None
    else:
        seamed = redact_seams(normalized, redactor)
    turns = []
    for i, (role, blocks) in enumerate(seamed):
        blocks = tuple(redactor.redact_block(strip_cache_control(b)) for b in blocks)
        turns.append(Turn(seq=first_seq + i, role=role, content=blocks, tokens=count_message(blocks)))  # type: ignore[arg-type]
    offloaded = Offload(policy.offload_tokens, policy.preview_tokens)(
        Transcript(system="", turns=tuple(turns))
    )
    return Ingested(turns=offloaded.turns, files=offloaded.files, after=changed)


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
