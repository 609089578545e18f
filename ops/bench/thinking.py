"""Preserved-thinking bench: real sessions replayed over HTTP against a model that binds its thinking.

Run: python -m ops.bench.thinking [--sessions 258c7280,...] [--windows 200000,64000,32000]
[--paces 0.25,1]

Each assistant turn of a real Claude Code session is appended with a thinking block signed, as a
model with preserved thinking signs it, against the prompt compactd served just before
(tests/fakes/preserved_thinking.py: system, tools and every earlier message, cache_control aside;
blocks may go from the start or the end of the history, never from the middle). Every fetch is then
checked as the provider checks it. Per replay: the share of fetches whose thinking passes
(`valid`, the provider would answer 400 to the others), the share of the thinking produced in each
epoch that the epoch's later fetches serve on its own prefix (`own`), rewrites (fetches that do not
extend the one before) per 100 turns, epochs, and the bill under cache prices against the
uncompacted history. Sessions by the policy bench's names (ops/bench/policy.py); the default ones
were never tuned on: `258c7280` (a real Claude Code session, held out from every policy knob) and
`gen10`, an order of real turns first replayed here (`gen11`: first replayed after the last change
of issue 40). All replays run at once in one `compactd up`,
as concurrent agents.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from api.cli.drive import replay_http
from ops.bench.common import data_dir, table
from ops.bench.paced import KEY, running_up
from ops.bench.policy import SESSIONS as LOADERS
from ops.bench.policy import generated
from ops.bench.signing import SignedThinking
from worker.flows.simulate import parse_pace

# never tuned on: a real session held out from every policy knob, and an order first replayed here
SESSIONS = {
    **LOADERS,
    "gen10": lambda root: generated(root, 10, 300),
    "gen11": lambda root: generated(root, 11, 300),  # first replayed after issue 40's last change
}
DEFAULT_SESSIONS = "258c7280,gen10"


def _one(name: str, root: Path, window: int, pace: str, port: int) -> dict[str, Any]:
    system, messages, _ = SESSIONS[name](root)
    report = replay_http(
        f"http://127.0.0.1:{port}",
        KEY,
        system,
        messages,
        pace=parse_pace(pace),
        context_window=window,
        thinking=SignedThinking(),
    )
    s = report.summary()
    return {
        "session": name,
        "window": window,
        **s,
        "valid": s.get("thinking_valid_fetches", 1.0),
        "own": s.get("thinking_own_prefix", 1.0),
    }


COLUMNS = [
    "session",
    "window",
    "pace",
    "fetches",
    "valid",
    "own",
    "rewrites",
    "rewrites_per_100_turns",
    "epochs",
    "deadline_switches",
    "fallbacks_pending",
    "fallbacks_fit",
    "over_budget",
    "fetches_reading_cache",
    "cost_usd",
    "cost_usd_uncompacted",
]


def run(sessions: list[str], windows: list[int], paces: list[str]) -> list[dict[str, Any]]:
    root = data_dir()
    jobs = [(name, window, pace) for name in sessions for window in windows for pace in paces]
    with running_up(KEY) as port, ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return [f.result() for f in [pool.submit(_one, n, root, w, pace, port) for n, w, pace in jobs]]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", default=DEFAULT_SESSIONS)
    parser.add_argument("--windows", default="200000,64000,32000")
    parser.add_argument("--paces", default="0.25,1")
    args = parser.parse_args(argv or [])
    rows = run(args.sessions.split(","), [int(w) for w in args.windows.split(",")], args.paces.split(","))
    print(table(rows, COLUMNS))
    return {"rows": rows}


if __name__ == "__main__":
    main(sys.argv[1:])
