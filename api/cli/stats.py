"""`compactd stats SID`: a session's statistics from a running compactd, over HTTP with the
tenant's key (the same numbers and the same tenant scoping as the inspector), rendered as a
plain-text table with the per-turn prompt size as a Unicode sparkline (pure: dict in, text out)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from worker.settings import Settings

_LISTEN = Settings.model_fields
DEFAULT_URL = f"http://{_LISTEN['host'].default}:{_LISTEN['port'].default}"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("stats", help="a session's prompt size per turn, epochs, files and redactions")
    s.add_argument("sid", help="the session id")
    s.add_argument(
        "--url",
        default=os.environ.get("COMPACTD_URL", DEFAULT_URL),
        help=f"where compactd listens (default: COMPACTD_URL, else {DEFAULT_URL})",
    )
    s.add_argument("--key", default=os.environ.get("COMPACTD_KEY"), help="API key (default: COMPACTD_KEY)")
    s.add_argument("--width", type=int, default=60, help="sparkline width in characters (default 60)")
    s.add_argument("--json", action="store_true", help="print the stats JSON instead of the table")
    s.set_defaults(func=run_stats)


class StatsError(Exception):
    """Raised when the stats cannot be fetched; the message says what to fix."""


def fetch_stats(url: str, key: str, sid: str, timeout: float = 30) -> dict[str, Any]:
    """GET /v1/sessions/{sid}/stats; a problem+json answer becomes a StatsError with its detail."""
    target = f"{url.rstrip('/')}/v1/sessions/{urllib.parse.quote(sid, safe='')}/stats"
    request = urllib.request.Request(target, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            problem = json.loads(exc.read())
            detail = problem.get("detail") or problem.get("title")
        except ValueError:
            detail = exc.reason
        raise StatsError(f"{exc.code} from {url}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatsError(f"cannot reach compactd at {url} ({reason}); set --url or COMPACTD_URL") from None


def run_stats(args: argparse.Namespace) -> int:
    if not args.key:
        print("compactd stats: no API key: pass --key or set COMPACTD_KEY", file=sys.stderr)
        return 2
    try:
        stats = fetch_stats(args.url, args.key, args.sid)
    except StatsError as exc:
        print(f"compactd stats: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(stats, indent=1) if args.json else render_stats(stats, args.width))
    return 0


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


def _uncompacted(stats: dict[str, Any]) -> str:
    """The history as the agent produced it, and how much of it went to files at ingest."""
    offloaded = stats.get("offloaded_tokens", 0)
    shown = f"{stats['raw_tokens']:,}"
    return f"{shown} ({offloaded:,} of them offloaded to files at ingest)" if offloaded else shown


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
        ("uncompacted tokens", _uncompacted(stats)),
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
