"""`compactd stats` rendering: a session's statistics as a plain-text table and its per-turn prompt
size as a Unicode sparkline. Pure: dict in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 60, top: float | None = None) -> str:
    """One bar per bucket of turns (the bucket's largest value), scaled from 0 to `top` (default:
    the largest value), so a drop at a compaction shows as a drop; at most `width` characters."""
    if not values or width < 1:
        return ""
    n = len(values)
    buckets = min(n, width)
    peaks = [max(values[i * n // buckets : (i + 1) * n // buckets]) for i in range(buckets)]
    ceiling = top if top is not None and top > 0 else max(peaks)
    if ceiling <= 0:
        return BARS[0] * buckets
    last = len(BARS) - 1
    return "".join(BARS[min(last, max(0, round(v / ceiling * last)))] for v in peaks)


def _fallbacks(stats: dict[str, Any]) -> str:
    n = sum(1 for p in stats["per_turn"] if p.get("fallback"))
    if not n:
        return "none (every turn's snapshot + new turns fit)"
    return f"{n:,} (snapshot + new turns over the budget: a fetch then serves a fallback, never more)"


def render_stats(stats: dict[str, Any], width: int = 60) -> str:
    """The numbers of GET /v1/sessions/{sid}/stats as aligned `name  value` lines, then the curve."""
    files = stats["files"]
    epochs = (
        ", ".join(f"{e['epoch']} at turn {e['at_turn']} ({e['kind']})" for e in stats["epochs"]) or "none"
    )
    redactions = ", ".join(f"{k} {v:,}" for k, v in stats["redactions"].items()) or "none"
    rows = [
        ("session", stats["session_id"]),
        ("turns", f"{stats['turns']:,}"),
        ("epoch", str(stats["epoch"])),
        ("served tokens", f"{stats['served_tokens']:,} of {stats['budget_tokens']:,} budget"),
        ("fallback turns", _fallbacks(stats)),
        ("uncompacted tokens", f"{stats['raw_tokens']:,}"),
        ("compaction ratio", f"{stats['compaction_ratio']}x"),
        ("epochs", epochs),
        ("memory items", str(stats["memory_items"])),
        ("virtual files", f"{len(files)} ({stats['files_read']} read)"),
        ("redactions", redactions),
    ]
    label = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(label)}  {v}" for k, v in rows]
    curve = [p["prompt_tokens"] for p in stats["per_turn"]]
    if curve:
        # what a fetch serves never passes the budget: the budget is the top of the scale
        top = stats["budget_tokens"] or max(curve)
        lines.append("")
        lines.append(f"{'prompt/turn'.ljust(label)}  {sparkline(curve, width, top)}")
        lines.append(
            f"{''.ljust(label)}  served prompt, turns 1-{len(curve)}, 0 to {top:,} tokens (the budget)"
        )
    for f in files:
        reads = ", ".join(f["reads"]) or "not read"
        lines.append(f"{'file'.ljust(label)}  {f['ref']} {f['kind']} {f['lines']:,} lines: {reads}")
    return "\n".join(lines)
