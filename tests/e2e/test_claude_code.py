"""End to end: the real Claude Code CLI (pinned in ops/claude-code) through the real `compactd up`,
with a scripted, checking Messages-API stand-in as the upstream (tests/fakes/claude_upstream.py).

Claude Code runs unchanged: only environment variables point it at compactd. Sixty Bash rounds of
~5-7k tokens each go through a 64k-token session window, so compactd must offload, clip and switch
in summaries several times; the stand-in checks every request it gets, plays a model with preserved
thinking (each reply's thinking bound to its prefix, a block on a changed prefix refused with the
real API's 400), and once in a while follows one of compactd's offload pointers with compactd's own
read_file tool.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, require
from tests.fakes.claude_upstream import ClaudeUpstream
from tests.integration.conftest import free_port, wait_for

pytestmark = pytest.mark.slow

PACKAGE = REPO / "ops" / "claude-code" / "node_modules" / "@anthropic-ai"
CLI = PACKAGE / "claude-code" / "cli-wrapper.cjs"
ROUNDS = 60
WINDOW = 64_000
MAX_OUTPUT_TOKENS = 4_096
PROVIDER_KEY = "sk-ant-api03-" + "Qw7" * 30 + "AA"  # what compactd holds for the upstream
COMPACTD_TOOLS = {"read_file", "grep", "update_working_memory"}
PROMPT = "Run the module checks round by round with Bash until every round has passed, then say so."


def claude_code() -> list[str]:
    """The command that runs the pinned CLI (its native binary, through the wrapper)."""
    node = shutil.which("node")
    require(
        node is not None and CLI.exists() and any(PACKAGE.glob("claude-code-linux-*")),
        "Claude Code is not installed (run `make claude-code`)",
    )
    return [str(node), str(CLI)]


@contextmanager
def compactd_up(tmp: Path, upstream_url: str) -> Iterator[tuple[str, str]]:
    """The real `compactd up` (embedded Redis, SQLite) with the stand-in as its upstream: (url, key)."""
    port, key = free_port(), f"cpd_{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD_", "ANTHROPIC_"))}
    env |= {
        "COMPACTD_PORT": str(port),
        "COMPACTD_DEFAULT_API_KEY": key,
        "COMPACTD_UPSTREAM_URL": upstream_url,
        "COMPACTD_UPSTREAM_API_KEY": PROVIDER_KEY,
        # ingest offloads the largest outputs; the worker compacts as soon as the session is idle
        "COMPACTD_OFFLOAD_TOKENS": "6000",
        "COMPACTD_PREVIEW_TOKENS": "400",
        "COMPACTD_IDLE_SECONDS": "0.2",
        "COMPACTD_WORKER_CONCURRENCY": "1",
        "PYTHONPATH": str(REPO),
    }
    url = f"http://127.0.0.1:{port}"
    with (tmp / "up.out").open("wb") as out, (tmp / "up.err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "up"], cwd=tmp, env=env, stdout=out, stderr=err
        )
        try:

            def ready() -> bool:
                assert proc.poll() is None, f"compactd up exited: {(tmp / 'up.err').read_text()[-3000:]}"
                try:
                    return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for(ready, 120)
            yield url, key
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_claude_code(
    cwd: Path, home: Path, url: str, key: str, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`claude -p` with environment variables only; its stream-json lines (every message it got)."""
    env = {
        **(extra_env or {}),
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": key,
        "ANTHROPIC_CUSTOM_HEADERS": f"x-compactd-context-window: {WINDOW}",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT_TOKENS),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # anything it would fetch from elsewhere goes to a closed port: only loopback answers
        "HTTPS_PROXY": f"http://127.0.0.1:{free_port()}",
        "HTTP_PROXY": f"http://127.0.0.1:{free_port()}",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    args = ["-p", PROMPT, "--allowedTools", "Bash,Read", "--output-format", "stream-json", "--verbose"]
    done = subprocess.run(
        [*claude_code(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=150
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, lines


def blocks_of(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Content blocks of the stream-json messages of one kind ("assistant": what the client received)."""
    out = []
    for line in lines:
        content = line.get("message", {}).get("content") if line.get("type") == kind else None
        out += [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    return out


def test_claude_code_runs_a_long_bash_session_through_compactd(tmp_path: Path) -> None:
    """Claude Code, unchanged, runs 60 large Bash rounds through compactd in a 64k window: exit 0,
    every upstream request valid and in budget, compactd's tools never reach the client, no
    compaction of its own, an offloaded output read back, and the session listed for the inspector."""
    command = claude_code()
    assert command
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    started = time.monotonic()
    with (
        ClaudeUpstream(rounds=ROUNDS, context_window=WINDOW) as upstream,
        compactd_up(tmp_path, upstream.base_url) as (url, key),
    ):
        up_seconds = time.monotonic() - started
        done, lines = run_claude_code(work, home, url, key)
        run_seconds = time.monotonic() - started - up_seconds
        auth = {"Authorization": f"Bearer {key}"}
        sessions = httpx.get(f"{url}/v1/sessions", headers=auth, timeout=10).json()["sessions"]
        inspector = httpx.get(f"{url}/ui", timeout=10)
        main = max(sessions, key=lambda s: s["turns"], default={"id": "none", "turns": 0, "epoch": 0})
        detail = httpx.get(f"{url}/v1/sessions/{main['id']}", headers=auth, timeout=10)
    report = (
        f"up {up_seconds:.0f} s, Claude Code {run_seconds:.0f} s, {len(upstream.requests)} upstream requests, "
        f"reads {upstream.reads}, stderr {done.stderr[-1500:]!r}, last lines {done.stdout[-1500:]!r}"
    )
    mains = [r for r in upstream.requests if r.kind == "main"]
    print(  # shown with -s, and on failure
        f"{report[:120]}; largest upstream request {max((r.tokens for r in mains), default=0)} tokens; "
        f"markers {[sum(r.markers.get(k, 0) > 0 for r in mains) for k in ('offloaded', 'clipped', 'handoff')]} "
        f"(requests showing offloaded, clipped, handoff); refused {len(upstream.refused)}; newest thinking "
        f"carried {sum(upstream.newest_thinking)} of {len(upstream.newest_thinking)}; sessions {sessions}"
    )
    assert done.returncode == 0, report
    (result,) = [line for line in lines if line.get("type") == "result"]
    assert result.get("subtype") == "success" and not result.get("is_error"), report
    assert f"All {ROUNDS} rounds ran." in str(result.get("result")), report
    # every upstream request was a valid Messages request, within the window, and not the client's own compaction
    assert upstream.failures == [], report
    # no thinking block ever reached the model on a changed prefix: nothing refused, so no retry
    # of Claude Code's own (one upstream request per model call, and per compactd tool round)
    assert upstream.refused == [], upstream.refused[:3]
    calls = len({line["message"]["id"] for line in lines if line.get("type") == "assistant"})
    assert len(mains) == calls + len(upstream.reads), (len(mains), calls, len(upstream.reads))
    # the newest turn's thinking rides along except where a rewrite dropped it (a new epoch)
    carried = upstream.newest_thinking
    assert carried and sum(carried) >= 0.9 * len(carried), (sum(carried), len(carried))
    assert not any(r.markers.get("client_restart") for r in upstream.requests), report
    assert max(r.round for r in mains) == ROUNDS
    assert max(r.tokens for r in mains) <= WINDOW
    # compactd offloaded, clipped and summarized on the way (the stand-in saw its markers)
    for marker in ("offloaded", "clipped", "handoff"):
        assert any(r.markers.get(marker) for r in mains), f"no request showed a {marker} marker; {report}"
    # the stand-in followed an offload pointer with compactd's read_file and got the lines it asked for
    assert upstream.reads and all(r.ok for r in upstream.reads), report
    # the client only ever received its own tools, and never had to answer one it does not know
    offered = {name for r in mains for name in r.tools} - COMPACTD_TOOLS
    received = {b["name"] for b in blocks_of(lines, "assistant") if b.get("type") == "tool_use"}
    assert received == {"Bash"}, received
    assert received <= offered
    # the usage it was shown is what compactd really sent, so it never sees a reason to compact
    usage = [line["message"]["usage"]["input_tokens"] for line in lines if line.get("type") == "assistant"]
    assert usage and max(usage) <= WINDOW - MAX_OUTPUT_TOKENS, usage
    results = [b for b in blocks_of(lines, "user") if b.get("type") == "tool_result"]
    assert len(results) == ROUNDS and not any(b.get("is_error") for b in results)
    # the conversation is a session the inspector lists, holding every turn
    assert inspector.status_code == 200
    # one session: every request reconciled with it (no divergence into a linked one)
    assert len(sessions) == 1 and main["turns"] >= 2 * ROUNDS and main["epoch"] >= 2, sessions
    assert detail.status_code == 200 and detail.json()["profile"]["context_window"] == WINDOW, detail.text


def test_claude_code_on_a_message_thread_is_told_threads_are_unsupported_and_resends_whole(
    tmp_path: Path,
) -> None:
    """Claude Code with message threads on (CLAUDE_CODE_TETHER_LIVE=1) starts a thread; compactd
    refuses it as a server without threads does, and the CLI resends the turn with its whole history
    and stops threading: the run succeeds, no `thread` reaches the upstream, one refusal in all."""
    command = claude_code()
    assert command
    rounds = 3
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    with (
        ClaudeUpstream(rounds=rounds, context_window=WINDOW) as upstream,
        compactd_up(tmp_path, upstream.base_url) as (url, key),
    ):
        done, lines = run_claude_code(work, home, url, key, {"CLAUDE_CODE_TETHER_LIVE": "1"})
    log = (tmp_path / "up.err").read_text() + (tmp_path / "up.out").read_text()
    refusals = [line for line in log.splitlines() if "proxy.thread_refused" in line]
    report = f"stderr {done.stderr[-1500:]!r}, last lines {done.stdout[-1500:]!r}, refusals {refusals}"
    assert done.returncode == 0, report
    (result,) = [line for line in lines if line.get("type") == "result"]
    assert f"All {rounds} rounds ran." in str(result.get("result")), report
    # the CLI asked for a thread (so the case is real) and was refused once: it stopped threading
    assert len(refusals) == 1, report
    # no thread upstream, every request valid, one upstream request per model call
    assert upstream.failures == [], upstream.failures
    mains = [r for r in upstream.requests if r.kind == "main"]
    calls = len({line["message"]["id"] for line in lines if line.get("type") == "assistant"})
    assert len(mains) == calls + len(upstream.reads), (len(mains), calls, len(upstream.reads))
