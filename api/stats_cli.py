"""`compactd stats SID`: a session's statistics from a running compactd, over HTTP with the
tenant's key (the same numbers and the same tenant scoping as the inspector)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from api.stats_table import render_stats

DEFAULT_URL = "http://127.0.0.1:8700"


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
