"""Session statistics for the inspector and `compactd stats`: pure functions over plain data.

The store keeps every turn's token count and, per published snapshot, its epoch, through_seq,
token count and kind (worker/store/inspector.py reads them). From those alone the prompt served after
each turn is derived: the newest snapshot covering at most that turn plus the turns after it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# the placeholder worker/redaction writes; the 8 hex are an HMAC, never the secret
PLACEHOLDER = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")
KINDS = ("structural", "summary", "extend")


@dataclass(frozen=True, slots=True)
class TurnRow:
    seq: int
    role: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Publish:
    """One published snapshot: the served prompt for turns through_seq.. until the next one."""

    epoch: int
    through_seq: int
    tokens: int
    kind: str  # structural | summary | extend (the same epoch, covering new turns)


@dataclass(frozen=True, slots=True)
class FileRow:
    ref: str
    kind: str
    lines: int
    reads: tuple[str, ...]


def snapshot_kind(decision: str, switch: str, summarized: bool = False) -> str:
    """What a publish did: a summary switched in, a structural rewrite (a new epoch), or an extension."""
    if summarized or switch:
        return "summary"
    return "structural" if decision == "new_epoch" else "extend"


def count_redactions(texts: Iterable[str]) -> dict[str, int]:
    """Placeholders per secret kind in the stored texts: counts only, never values."""
    found: Counter[str] = Counter()
    for text in texts:
        found.update(PLACEHOLDER.findall(text))
    return dict(sorted(found.items()))


def applicable(publishes: Sequence[Publish], seq: int) -> Publish | None:
    """The snapshot serving the prompt right after turn `seq`: the newest covering at most it."""
    best: Publish | None = None
    for p in publishes:
        if p.through_seq <= seq and (
            best is None or (p.epoch, p.through_seq) > (best.epoch, best.through_seq)
        ):
            best = p
    return best


def per_turn(
    turns: Sequence[TurnRow], publishes: Sequence[Publish], budget_tokens: int | None = None
) -> list[dict[str, Any]]:
    """Per turn: its tokens, the uncompacted history so far, and the prompt a fetch right after it
    would have served.

    `pressure_tokens` is the newest snapshot plus the turns since (before any snapshot, the turns
    themselves). A fetch never serves more than the budget: past it (the worker had not caught up,
    e.g. during an import) it falls back to the prepared summary or a fit, so `prompt_tokens` is
    capped at `budget_tokens` and `fallback` says the pressure was over it. Linear in turns + publishes.
    """
    ordered = sorted(publishes, key=lambda p: (p.through_seq, p.epoch))
    out: list[dict[str, Any]] = []
    raw = 0
    raw_at: dict[int, int] = {}
    best: Publish | None = None
    i = 0
    for t in sorted(turns, key=lambda t: t.seq):
        raw += t.tokens
        raw_at[t.seq] = raw
        while i < len(ordered) and ordered[i].through_seq <= t.seq:
            p = ordered[i]
            if best is None or (p.epoch, p.through_seq) > (best.epoch, best.through_seq):
                best = p
            i += 1
        pressure = raw if best is None else best.tokens + raw - raw_at.get(best.through_seq, 0)
        over = budget_tokens is not None and pressure > budget_tokens
        out.append(
            {
                "seq": t.seq,
                "role": t.role,
                "tokens": t.tokens,
                "raw_tokens": raw,
                "prompt_tokens": budget_tokens if over else pressure,
                "pressure_tokens": pressure,
                "fallback": over,
                "epoch": best.epoch if best else 0,
            }
        )
    return out


def epoch_marks(publishes: Sequence[Publish]) -> list[dict[str, Any]]:
    """Where each epoch began: the first publish of every epoch after 0, with its kind."""
    first: dict[int, Publish] = {}
    for p in sorted(publishes, key=lambda p: (p.epoch, p.through_seq)):
        if p.epoch > 0 and p.epoch not in first:
            first[p.epoch] = p
    return [
        {"epoch": p.epoch, "at_turn": p.through_seq, "kind": p.kind, "tokens": p.tokens}
        for p in first.values()
    ]


def session_stats(
    session_id: str,
    turns: Sequence[TurnRow],
    publishes: Sequence[Publish],
    *,
    budget_tokens: int,
    memory_items: int,
    files: Sequence[FileRow],
    redactions: dict[str, int],
) -> dict[str, Any]:
    """Everything GET /v1/sessions/{sid}/stats answers, from plain rows."""
    curve = per_turn(turns, publishes, budget_tokens)
    raw = curve[-1]["raw_tokens"] if curve else 0
    served = curve[-1]["prompt_tokens"] if curve else 0
    return {
        "session_id": session_id,
        "turns": len(curve),
        "epoch": max((p.epoch for p in publishes), default=0),
        "raw_tokens": raw,
        "served_tokens": served,
        "budget_tokens": budget_tokens,
        # how many times smaller the served prompt is than the history it stands for
        "compaction_ratio": round(raw / served, 2) if served else 1.0,
        "per_turn": curve,
        "fallback_turns": sum(1 for p in curve if p["fallback"]),
        "epochs": epoch_marks(publishes),
        "memory_items": memory_items,
        "files": [{"ref": f.ref, "kind": f.kind, "lines": f.lines, "reads": list(f.reads)} for f in files],
        "files_read": sum(1 for f in files if f.reads),
        "redactions": dict(sorted(redactions.items())),
    }
