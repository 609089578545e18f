"""Session statistics for the inspector and `compactd stats`: pure functions over plain data.

The store keeps every turn's token count and, per published snapshot, its epoch, through_seq,
token count and kind (worker/store/inspector.py reads them). From those alone the prompt served after
each turn is derived: the newest snapshot covering at most that turn plus the turns after it.
The uncompacted history counts what the agent produced: a block offloaded at ingest counts whole
(its pointer says how many tokens), not as the preview stored in its place.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from worker.compaction.tokens import count_text

# the placeholder worker/redaction writes; the 8 hex are an HMAC, never the secret
PLACEHOLDER = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")
KINDS = ("structural", "summary", "extend")
# the pointer worker/compaction/pointers.py `offloaded` ends an offloaded block's preview with
OFFLOADED = "[compactd: offloaded; only the start is shown. The whole text is "
_OFFLOADED_WHOLE = re.compile(
    re.escape(OFFLOADED)
    + r"([0-9,]+) tokens, [0-9,]+ lines: read_file ref=(f_[0-9a-f]{16}) \(line ranges\) or grep ref=\2 pattern=\.\.\.\]\Z"
)


@dataclass(frozen=True, slots=True)
class TurnRow:
    seq: int
    role: str
    tokens: int  # as stored (and served before compaction): an offloaded block as its preview
    produced_tokens: int | None = None  # as the agent produced it (None: the same as tokens)

    @property
    def raw_tokens(self) -> int:
        return self.tokens if self.produced_tokens is None else self.produced_tokens


def produced_tokens(tokens: int, content: str) -> int:
    """A stored turn's tokens as the agent produced it: each block offloaded at ingest counted at
    its whole size (from its pointer) instead of the preview and pointer that stand in its place.
    `content` is the stored JSON array of blocks; `tokens` its stored count."""
    if OFFLOADED not in content:
        return tokens
    extra = 0
    for text in _offloadable_texts(orjson.loads(content)):
        found = _OFFLOADED_WHOLE.search(text)
        if found is not None:
            extra += int(found.group(1).replace(",", "")) - count_text(text)
    return tokens + max(0, extra)


def _offloadable_texts(blocks: Any) -> Iterator[str]:
    """Every string Offload may have replaced: text, each text part of a tool_result, tool inputs."""
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict):
            continue
        kind, content = block.get("type"), block.get("content")
        if kind == "text":
            yield str(block.get("text", ""))
        elif kind == "tool_result" and isinstance(content, str):
            yield content
        elif kind == "tool_result" and isinstance(content, list):
            yield from (
                str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
            )
        elif kind == "tool_use" and isinstance(block.get("input"), dict):
            yield from (v for v in block["input"].values() if isinstance(v, str))


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
    """Per turn: its tokens, the uncompacted history so far (what the agent produced, offloaded
    blocks whole), and the prompt a fetch right after it would have served.

    `pressure_tokens` is the newest snapshot plus the turns since (before any snapshot, the turns
    themselves). A fetch never serves more than the budget: past it (the worker had not caught up,
    e.g. during an import) it falls back to the prepared summary or a fit, so `prompt_tokens` is
    capped at `budget_tokens` and `fallback` says the pressure was over it. Linear in turns + publishes.
    """
    ordered = sorted(publishes, key=lambda p: (p.through_seq, p.epoch))
    out: list[dict[str, Any]] = []
    raw = stored = 0
    stored_at: dict[int, int] = {}
    best: Publish | None = None
    i = 0
    for t in sorted(turns, key=lambda t: t.seq):
        raw += t.raw_tokens
        stored += t.tokens
        stored_at[t.seq] = stored
        while i < len(ordered) and ordered[i].through_seq <= t.seq:
            p = ordered[i]
            if best is None or (p.epoch, p.through_seq) > (best.epoch, best.through_seq):
                best = p
            i += 1
        # what is served is what was stored: snapshot + the turns since, as ingest left them
        pressure = stored if best is None else best.tokens + stored - stored_at.get(best.through_seq, 0)
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
    served_tokens: int | None = None,
) -> dict[str, Any]:
    """Everything GET /v1/sessions/{sid}/stats answers, from plain rows. `served_tokens`: a fetch's
    `token_count` now (None: the last turn's prompt_tokens)."""
    curve = per_turn(turns, publishes, budget_tokens)
    raw = curve[-1]["raw_tokens"] if curve else 0
    served = served_tokens if served_tokens is not None else curve[-1]["prompt_tokens"] if curve else 0
    return {
        "session_id": session_id,
        "turns": len(curve),
        "epoch": max((p.epoch for p in publishes), default=0),
        "raw_tokens": raw,
        # of which moved to virtual files at ingest (served as a preview and a pointer)
        "offloaded_tokens": raw - sum(t.tokens for t in turns),
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
