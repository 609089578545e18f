"""Paced replay benchmark: the two long Claude Code sessions appended over HTTP to a real
`compactd up` (default settings: SQLite, embedded Redis, a Celery worker) at an agent's pace.

Run: python -m ops.bench.paced [--paces 0.25,1,recordedx0.1] [--windows 200000,64000,32000]
[--cache-ttl SECONDS] [--service CHECKOUT] (with `--paces recordedx0.2 --cache-ttl 60`, the recorded
session on a clock five times faster with the provider's 5-minute cache scaled the same: its real
idle gaps go cold; `--service` runs another checkout's service under the same harness and bills)
Every (session, window, pace) replay runs at once, each in its own session of one service, as
concurrent agents would. Per replay: fetches over budget (must be 0), validity, fetch p50/p99,
epochs, the share of later fetches that read the cache (`hit`) and that start with the previous
prompt through its last breakpoint (`prefix`), deadline switches, fallbacks served, the provider
cache's read share and the cost under cache pricing against the uncompacted history, and the
fidelity of the final prompt.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from api.cli.drive import replay_http
from ops.bench.common import data_dir, table
from ops.bench.fidelity import final_fidelity
from ops.bench.replay import SESSIONS
from ops.bench.service import _free_port, _wait_port
from worker.compaction.formats import load_transcript
from worker.flows.simulate import parse_pace

KEY = "bench-paced-key-0123456789"


@contextmanager
def running_up(key: str, env_extra: dict[str, str] | None = None) -> Iterator[int]:
    """A real `compactd up` (SQLite, embedded Redis, a worker) in a temporary directory: its port.
    `env_extra`: settings of its own (COMPACTD_…)."""
    workdir = Path(tempfile.mkdtemp(prefix="compactd-bench-"))
    port = _free_port()
    env = {
        **os.environ,
        "COMPACTD_PORT": str(port),
        "COMPACTD_VAR_DIR": str(workdir / "var"),
        "COMPACTD_DATABASE_URL": f"sqlite:///{workdir / 'compactd.db'}",
        "COMPACTD_DEFAULT_API_KEY": key,
        "COMPACTD_LOG_LEVEL": "WARNING",
        **(env_extra or {}),
    }
    env.pop("COMPACTD_REDIS_URL", None)
    log = (workdir / "up.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-m", "api.cli.command", "up"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_port(port, up, timeout=120)
        time.sleep(2)  # the worker comes up after the API
        yield port
    finally:
        up.terminate()
        up.wait(timeout=60)
        log.close()
        if os.environ.get("COMPACTD_BENCH_KEEP"):
            print(f"kept the service's directory and log: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def run(
    paces: list[str], windows: list[int], cache_ttl: float | None = None, service: str | None = None
) -> list[dict[str, Any]]:
    """`cache_ttl`: the provider cache's lifetime for the service and the bills (a scaled clock:
    300 s x 0.2 for `recordedx0.2`), its sweep every tenth of it, so an idle gap past it gets its
    cold job; None: the defaults (300 s, a sweep a minute)."""
    root = data_dir() / "transcripts" / "claude-code" / "spotter"
    jobs = [(name, window, pace) for name in SESSIONS for window in windows for pace in paces]
    env = (
        {
            "COMPACTD_CACHE_TTL_SECONDS": str(cache_ttl),
            "COMPACTD_SWEEP_SECONDS": str(max(1.0, cache_ttl / 10)),
        }
        if cache_ttl
        else None
    )
    ttl = cache_ttl or 300.0
    if service:  # another checkout's service, the same harness and bills (before/after)
        env = {**(env or {}), "PYTHONPATH": service}
    with running_up(KEY, env) as port, ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(_one, root / name, window, pace, port, ttl) for name, window, pace in jobs]
        return [f.result() for f in futures]


def _one(path: Path, window: int, pace: str, port: int, cache_ttl: float = 300.0) -> dict[str, Any]:
    imported = load_transcript(path)
    report = replay_http(
        f"http://127.0.0.1:{port}",
        KEY,
        imported.system,
        imported.messages,
        pace=parse_pace(pace),
        timestamps=imported.meta.get("timestamps"),
        context_window=window,
        cache_ttl_seconds=cache_ttl,
    )
    summary = report.summary()
    fidelity = final_fidelity(imported.system, imported.messages, report.final_request)
    return {
        "session": path.name[:8],
        "window": window,
        **summary,
        # the policy bench's names (ops/bench/policy.py): fetches that read the cache at all, and
        # those that start with the previous prompt through its last breakpoint
        "hit": summary["fetches_reading_cache"],
        "prefix": summary["fetches_keeping_prefix"],
        "final_fidelity": fidelity["all"],
    }


COLUMNS = [
    "session",
    "window",
    "pace",
    "fetches",
    "over_budget",
    "all_valid",
    "max_prompt_tokens",
    "budget_tokens",
    "fetch_p50_ms",
    "fetch_p99_ms",
    "epochs",
    "hit",
    "prefix",
    "deadline_switches",
    "cold_switches",
    "fallbacks_pending",
    "fallbacks_fit",
    "cache_read_share",
    "cost_usd",
    "cost_usd_uncompacted",
    "final_fidelity",
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--paces", default="0.25,1,recordedx0.1")
    parser.add_argument("--windows", default="200000,64000,32000")
    parser.add_argument("--cache-ttl", type=float, default=None, help="seconds (default: the service's, 300)")
    parser.add_argument(
        "--service",
        default=None,
        help="run the service from another checkout (its path): before/after, one bill",
    )
    args = parser.parse_args(argv or [])
    rows = run(args.paces.split(","), [int(w) for w in args.windows.split(",")], args.cache_ttl, args.service)
    print(table(rows, COLUMNS))
    return {"rows": rows}


if __name__ == "__main__":
    main(sys.argv[1:])
