"""Load at an agent's pace (issue 11): many sessions, each an agent that fetches before every turn and
appends every 0.25-5 s, against a real `compactd api` and `compactd worker` on loopback; then the
compaction backlog draining after the load stops.

An asyncio generator rather than locust: the machine has 2 cores, and locust's gevent users and its
own stats process would take a good share of them from the service under test; one asyncio loop
with a minimal keep-alive HTTP client (ops.bench.service.Conn) costs little per request. The agent
model (think time, fetch-then-append) is a few lines here, where locust would add a dependency
tree for the same loop.

    python -m ops.bench.load [--agents 200] [--seconds 120]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import redis
from sqlalchemy import text

from ops.bench.common import table
from ops.bench.service import Conn, _free_port, _wait_port, pct
from tests.services import stop

CONTEXT_WINDOW = 32_000
OUTPUT_RESERVE = 4_000
THINK_SECONDS = (0.25, 5.0)


def _turn(agent: int, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """One tool loop: a command and its output, 20-120 lines (a test run, a file read)."""
    tid = f"toolu_{agent:04d}_{n:05d}"
    lines = rng.randint(20, 120)
    output = "\n".join(
        f"tests/test_mod{n % 17}.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(lines)
    )
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"Running the suite again (step {n})."},
                {
                    "type": "tool_use",
                    "id": tid,
                    "name": "Bash",
                    "input": {"command": f"pytest -k mod{n % 17}"},
                },
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": output}]},
    ]


async def _request(conn: Conn, stats: Stats, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request; a connection the server closed while the agent was thinking (uvicorn keeps an
    idle connection 5 s) is reopened and the request sent again, as an HTTP client pool would."""
    try:
        return await conn.request(method, path, body)
    except (ConnectionError, asyncio.IncompleteReadError):
        stats.reconnects += 1
        conn.close()
        await conn.open()
        return await conn.request(method, path, body)


class Stats:
    def __init__(self) -> None:
        self.reconnects = 0
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.fetches_within = 0
        self.fetches_over = 0
        self.fallbacks = 0


async def _agent(port: int, key: str, agent: int, deadline: float, stats: Stats) -> None:
    rng = random.Random(agent)
    conn = await Conn(port, key).open()
    sid = f"agent-{agent}"
    first = orjson.dumps(
        {
            "messages": [{"role": "user", "content": f"Make the test suite of project {agent} pass."}],
            "context_window": CONTEXT_WINDOW,
            "output_reserve": OUTPUT_RESERVE,
        }
    )
    await conn.request("POST", f"/v1/sessions/{sid}/turns", first)
    await asyncio.sleep(rng.uniform(*THINK_SECONDS))
    n = 0
    while time.monotonic() < deadline:
        t = time.perf_counter()
        status, body = await _request(conn, stats, "GET", f"/v1/sessions/{sid}/prompt")
        stats.latency["fetch"].append(time.perf_counter() - t)
        if status != 200:
            stats.errors["fetch"] += 1
        else:
            prompt = orjson.loads(body)
            within = prompt["token_count"] <= prompt["budget_tokens"]
            stats.fetches_within += within
            stats.fetches_over += not within
            stats.fallbacks += prompt.get("fallback") is not None
        n += 1
        t = time.perf_counter()
        status, _ = await _request(
            conn, stats, "POST", f"/v1/sessions/{sid}/turns", orjson.dumps({"messages": _turn(agent, n, rng)})
        )
        stats.latency["append"].append(time.perf_counter() - t)
        if status != 200:
            stats.errors["append"] += 1
        await asyncio.sleep(rng.uniform(*THINK_SECONDS))
    conn.close()


def _backlog(r: redis.Redis, queue: str, db_url: str) -> tuple[int, int]:
    """(messages waiting in the broker queue, sessions whose snapshot is behind their last seq)."""
    from worker.store.db import make_engine

    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            behind = conn.execute(
                text("SELECT count(*) FROM sessions WHERE version > compacted_through")
            ).scalar()
    finally:
        engine.dispose()
    return int(r.llen(queue)), int(behind or 0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ops.bench.load", description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=200, help="simulated agents, one session each")
    ap.add_argument("--seconds", type=float, default=120.0, help="how long the agents work")
    ap.add_argument("--concurrency", type=int, default=2, help="worker processes")
    args = ap.parse_args(argv if argv is not None else [])

    from worker.store.db import make_engine, migrate
    from worker.store.tenants import create_tenant

    tmp = Path(tempfile.mkdtemp(prefix="compactd-load-"))
    redis_port, api_port = _free_port(), _free_port()
    db_url = f"sqlite:///{tmp / 'compactd.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    env |= {
        "COMPACTD_DATABASE_URL": db_url,
        "COMPACTD_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "COMPACTD_VAR_DIR": str(tmp / "var"),
        "COMPACTD_REDACTION_KEY": "bench-redaction-key",
        "COMPACTD_IDLE_SECONDS": "1.0",
        "COMPACTD_LOG_LEVEL": "WARNING",
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(redis_port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
            )
        )
        _wait_port(redis_port, procs[-1])
        engine = make_engine(db_url)
        migrate(engine)
        key = create_tenant(engine, "load")[1]
        engine.dispose()
        log = (tmp / "service.log").open("wb")
        cli = [sys.executable, "-m", "api.cli.command"]
        procs.append(
            subprocess.Popen([*cli, "api", "--port", str(api_port)], env=env, stdout=log, stderr=log)
        )
        procs.append(
            subprocess.Popen(
                [*cli, "worker", "--concurrency", str(args.concurrency)], env=env, stdout=log, stderr=log
            )
        )
        _wait_port(api_port, procs[1])

        stats = Stats()
        started = time.monotonic()
        deadline = started + args.seconds

        async def run() -> None:
            await asyncio.gather(*(_agent(api_port, key, a, deadline, stats) for a in range(args.agents)))

        asyncio.run(run())
        load_seconds = time.monotonic() - started
        r = redis.Redis(port=redis_port)
        drain: list[tuple[float, int, int]] = []
        stopped = time.monotonic()
        while time.monotonic() - stopped < 180:
            queued, behind = _backlog(r, "compactd", db_url)
            drain.append((time.monotonic() - stopped, queued, behind))
            if queued == 0 and behind == 0:
                break
            time.sleep(1.0)
        r.close()
    finally:
        for p in reversed(procs):
            stop(p, timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    for endpoint in ("fetch", "append"):
        lat = stats.latency[endpoint]
        rows.append(
            {
                "endpoint": endpoint,
                "requests": len(lat),
                "per s": f"{len(lat) / load_seconds:.1f}",
                "errors": stats.errors[endpoint],
                "error %": f"{100 * stats.errors[endpoint] / max(1, len(lat)):.2f}",
                "p50 ms": f"{1000 * pct(lat, 0.5):.1f}",
                "p99 ms": f"{1000 * pct(lat, 0.99):.1f}",
            }
        )
    print(
        f"{args.agents} agents for {load_seconds:.0f} s, think time {THINK_SECONDS[0]}-{THINK_SECONDS[1]} s,"
    )
    print(
        f"window {CONTEXT_WINDOW:,} (output reserve {OUTPUT_RESERVE:,}), {args.concurrency} worker processes"
    )
    print(table(rows, ["endpoint", "requests", "per s", "errors", "error %", "p50 ms", "p99 ms"]))
    fetched = stats.fetches_within + stats.fetches_over
    print(
        f"fetches within budget: {stats.fetches_within:,} of {fetched:,}"
        f" ({100 * stats.fetches_within / max(1, fetched):.2f}%); served with a fallback: {stats.fallbacks:,};"
        f" connections reopened after an idle close: {stats.reconnects:,}"
    )
    print("backlog after the load stopped (s, queued messages, sessions behind):")
    for at, queued, behind in drain[:: max(1, len(drain) // 12)] + drain[-1:]:
        print(f"  {at:6.1f}  {queued:5d}  {behind:5d}")


if __name__ == "__main__":
    main(sys.argv[1:])
