"""End to end: the real Codex CLI (pinned in ops/codex) through the real `compactd up`, with a
scripted, checking Responses-API stand-in as the upstream (tests/fakes/agent_upstream.py on
tests/fakes/openai_api.py).

Codex runs unchanged: a custom `model_provider` in its config.toml points at compactd's /v1, its key
is a compactd key, and the provider's http_headers carry the session window. Sixty `exec_command`
rounds of ~8-16 KB go through a 64k-token window, so compactd must offload, clip and switch in
summaries; the stand-in checks every request (tool pairing, the window with
`context_length_exceeded`, every reasoning item on its own prefix), and once follows one of
compactd's offload pointers with compactd's own read_file tool.
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
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, require
from tests.fakes.agent_upstream import codex_upstream
from tests.integration.conftest import free_port, wait_for
from tests.integration.test_docs_snippets import snippet

pytestmark = pytest.mark.slow

CLI = REPO / "ops" / "codex" / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
ROUNDS = 60
WINDOW = 64_000
PROVIDER_KEY = "sk-proj-" + "Wd4" * 30  # what compactd holds for the upstream
COMPACTD_TOOLS = {"read_file", "grep", "update_working_memory"}
PROMPT = "Run the module checks round by round until every round has passed, then say so."


def codex() -> list[str]:
    node = shutil.which("node")
    require(
        node is not None and CLI.exists() and any((CLI.parents[2]).glob("codex-linux-*")),
        "Codex is not installed (run `make codex`)",
    )
    return [str(node), str(CLI)]


@contextmanager
def compactd_up(tmp: Path, upstream_url: str) -> Iterator[tuple[str, str]]:
    """The real `compactd up` (embedded Redis, SQLite) with the stand-in as its OpenAI upstream."""
    port, key = free_port(), f"cpd_{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD_", "OPENAI_", "ANTHROPIC_"))}
    env |= {
        "COMPACTD_PORT": str(port),
        "COMPACTD_DEFAULT_API_KEY": key,
        "COMPACTD_OPENAI_UPSTREAM_URL": upstream_url,
        "COMPACTD_OPENAI_UPSTREAM_API_KEY": PROVIDER_KEY,
        # ingest offloads the ~16 KB outputs; the worker compacts as soon as the session is idle
        "COMPACTD_OFFLOAD_TOKENS": "3000",
        "COMPACTD_PREVIEW_TOKENS": "300",
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


def codex_config(home: Path, url: str, extra: str = "") -> None:
    """The only change a user makes: README's config (a model provider whose base URL is compactd's
    /v1), with this compactd's URL, and the window in the provider's http_headers."""
    config = snippet(REPO / "README.md", "codex-config").replace("http://127.0.0.1:8700", url)
    assert f"{url}/v1" in config
    window = f'http_headers = {{ "x-compactd-context-window" = "{WINDOW}" }}\n'
    (home / "config.toml").write_text(extra + "\n" + config + window)


def run_codex(
    work: Path, home: Path, url: str, key: str, extra: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`codex exec --json` with its config and the compactd key; its JSON events."""
    codex_config(home, url, extra)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home.parent),
        "CODEX_HOME": str(home),
        "COMPACTD_KEY": key,
        # anything it would fetch from elsewhere goes to a closed port: only loopback answers
        "HTTPS_PROXY": f"http://127.0.0.1:{free_port()}",
        "HTTP_PROXY": f"http://127.0.0.1:{free_port()}",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    args = ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", PROMPT]
    done = subprocess.run([*codex(), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    events = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            with suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    return done, events


def test_codex_runs_a_long_shell_session_through_compactd(tmp_path: Path) -> None:
    """Codex, configured only, runs 60 exec_command rounds of ~8 KB through compactd in a 64k window:
    exit 0, every upstream request valid and within the window, every reasoning item on its own
    prefix, no compaction of its own, an offloaded output read back with compactd's read_file, and
    the session listed for the inspector."""
    command = codex()
    assert command
    work, home = tmp_path / "work", tmp_path / "home" / ".codex"
    work.mkdir()
    home.mkdir(parents=True)
    api, driver = codex_upstream(WINDOW, rounds=ROUNDS, read_after=20)
    started = time.monotonic()
    with api, compactd_up(tmp_path, api.base_url) as (url, key):
        up_seconds = time.monotonic() - started
        done, events = run_codex(work, home, url, key)
        run_seconds = time.monotonic() - started - up_seconds
        auth = {"Authorization": f"Bearer {key}"}
        sessions = httpx.get(f"{url}/v1/sessions", headers=auth, timeout=10).json()["sessions"]
        inspector = httpx.get(f"{url}/ui", timeout=10)
        main = max(sessions, key=lambda s: s["turns"], default={"id": "none", "turns": 0, "epoch": 0})
        detail = httpx.get(f"{url}/v1/sessions/{main['id']}", headers=auth, timeout=10)
    requests = api.requests
    report = (
        f"up {up_seconds:.0f} s, Codex {run_seconds:.0f} s, {len(requests)} upstream requests, reads {driver.reads},"
        f" failures {api.failures[:3]}, stderr {done.stderr[-1500:]!r}"
    )
    text = [json.dumps(r.body.get("input")) for r in requests]
    markers = {m: sum(f"[compactd: {m}" in t for t in text) for m in ("offloaded", "clipped")}
    markers["handoff"] = sum("[compactd handoff note]" in t for t in text)
    print(  # shown with -s, and on failure
        f"{report[:160]}; largest upstream request {max((r.tokens for r in requests), default=0)} tokens;"
        f" requests showing {markers}; reasoning kept {sum(r.reasoning_kept for r in requests)},"
        f" dropped {api.dropped}; sessions {sessions}"
    )
    assert done.returncode == 0, report
    messages = [e["item"].get("text", "") for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert any(f"All {ROUNDS} rounds passed." in m for m in messages), report
    # every upstream request was valid and within the window (context_length_exceeded never sent)
    assert api.failures == [], report
    assert max(r.tokens for r in requests) <= WINDOW
    # preserved reasoning: no item ever reached the model on a changed prefix, and the newest one
    # rides along in every request of an epoch (a new epoch starts without the reasoning it cut)
    assert api.dropped == 0
    carried = [b.reasoning_kept > 0 for b in requests[1:]]
    assert sum(carried) >= 0.9 * len(carried), (sum(carried), len(carried))
    # one upstream request per model call, plus one per compactd tool round
    assert len(requests) == ROUNDS + 1 + len(driver.reads)
    assert driver.compaction_requests == 0, "Codex sent a compaction of its own"
    # compactd offloaded, clipped and summarized on the way
    assert markers["offloaded"] and markers["handoff"], markers
    # the stand-in followed an offload pointer with compactd's read_file and got the lines it asked for
    assert driver.reads and all(r.ok for r in driver.reads), report
    # the client only ever ran its own tool; compactd's were offered upstream, never to Codex
    completed = [e["item"] for e in events if e.get("type") == "item.completed"]
    commands = [i for i in completed if i.get("type") == "command_execution"]
    assert len(commands) == ROUNDS and all(c.get("exit_code") == 0 for c in commands), commands[-1:]
    offered = {t.get("name") for r in requests for t in r.body.get("tools") or []}
    assert offered >= COMPACTD_TOOLS
    # every request kept compactd's key out and the provider key in
    assert all(r.headers.get("authorization") == f"Bearer {PROVIDER_KEY}" for r in requests)
    # the conversation is one session the inspector lists, with its window
    assert inspector.status_code == 200
    assert len(sessions) == 1 and main["turns"] >= 2 * ROUNDS and main["epoch"] >= 2, sessions
    assert detail.status_code == 200 and detail.json()["profile"]["context_window"] == WINDOW, detail.text


def test_codex_compacting_on_its_own_gets_compactds_summary_at_once(tmp_path: Path) -> None:
    """Codex set to compact its own history early (model_auto_compact_token_limit) asks for a summary
    through the same endpoint: compactd answers each from its compacted history with no upstream call,
    and Codex goes on from it to the end of the task (exit 0, every round run, no request refused)."""
    command = codex()
    assert command
    work, home = tmp_path / "work", tmp_path / "home" / ".codex"
    work.mkdir()
    home.mkdir(parents=True)
    rounds = 10
    api, driver = codex_upstream(WINDOW, rounds=rounds, read_after=100)
    with api, compactd_up(tmp_path, api.base_url) as (url, key):
        done, events = run_codex(work, home, url, key, extra="model_auto_compact_token_limit = 15000")
        log = (tmp_path / "up.err").read_text(errors="replace")  # the processes log to stderr
    report = f"failures {api.failures[:3]}, stderr {done.stderr[-1500:]!r}"
    assert done.returncode == 0, report
    answered = log.count("proxy.client_compaction_answered")
    compacted = sum(
        1
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "context_compaction"
    )
    print(
        f"{answered} compactions answered by compactd; {len(api.requests)} upstream requests; events {compacted}"
    )
    assert answered >= 2, report
    # no summary request ever reached the model: one upstream request per model call of the task
    assert driver.compaction_requests == 0 and len(api.requests) == rounds + 1, len(api.requests)
    assert api.failures == [] and api.dropped == 0, report
    messages = [e["item"].get("text", "") for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert any(f"All {rounds} rounds passed." in m for m in messages), report
