"""End to end: the real `compactd up` (embedded Redis, SQLite) driven over HTTP, then stopped with SIGINT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.integration.conftest import free_port, wait_for
from tests.integration.realdata import claude_code_files, load_messages
from worker.compaction.validate import request_problems

pytestmark = pytest.mark.slow


def descendants(pid: int) -> set[int]:
    """Every live process below pid, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def messages() -> list[dict]:
    files = [p for p in claude_code_files() if 60_000 < p.stat().st_size < 400_000]
    if files:
        return load_messages(files[-1])
    out: list[dict] = []
    for i in range(40):
        out.append({"role": "user", "content": f"step {i}: please run the tests\n" + "log line\n" * 400})
        out.append({"role": "assistant", "content": f"ran step {i}"})
    return out


def test_compactd_up_serves_compacts_and_stops_cleanly(tmp_path: Path) -> None:
    """`compactd up` prints a key, accepts appends, publishes a new epoch, and leaves no process behind on Ctrl-C."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    env.update(
        {
            "COMPACTD_PORT": str(port),
            "COMPACTD_IDLE_SECONDS": "0.5",
            "COMPACTD_WORKER_CONCURRENCY": "1",
            "PYTHONPATH": str(REPO),
        }
    )
    err = (tmp_path / "up.err").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli.command", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    lines: list[str] = []

    def started() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"compactd up exited: {(tmp_path / 'up.err').read_text()[-3000:]}")
        return next(
            (m.group(1) for line in lines if (m := re.search(r"\(shown once, stored hashed\): (\S+)", line))),
            None,
        )

    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        key = wait_for(started, 90)
        assert f"http://127.0.0.1:{port}" in "".join(lines)
        auth = {"Authorization": f"Bearer {key}"}
        # the summary's suggested curl works on a fresh install, and the inspector link is there
        # (the block comes line by line after the key: wait for its last line, `stop:`)
        text = wait_for(lambda: "".join(lines) if "stop:" in "".join(lines) else None, 30)
        assert f"http://127.0.0.1:{port}/ui" in text
        tried = re.search(r"try: +curl -H 'Authorization: Bearer (\S+)' (\S+)", text)
        assert tried is not None and tried.group(1) == key
        assert httpx.get(tried.group(2), headers=auth, timeout=10).status_code == 200
        sent = messages()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=10) as http:
            for m in sent:
                assert (
                    http.post(
                        "/v1/sessions/e2e/turns", json={"messages": [m], "context_window": 10_000}
                    ).status_code
                    == 200
                )
            first = http.get("/v1/sessions/e2e/prompt").json()
            assert first["version"] == len(sent)
            wait_for(lambda: http.get("/v1/sessions/e2e").json()["epoch"] >= 1, 60)
            prompt = http.get("/v1/sessions/e2e/prompt").json()
            assert http.get("/readyz").status_code == 200
        assert prompt["epoch"] >= 1 and prompt["version"] == len(sent)
        assert request_problems({"system": prompt["system"], "messages": prompt["messages"]}) == []
        assert (tmp_path / "var" / "compactd.db").exists() and (
            tmp_path / "var" / "redaction.key"
        ).stat().st_mode & 0o077 == 0
        # the CLI beside a running `compactd up` finds its embedded Redis (no COMPACTD_REDIS_URL)
        pruned = subprocess.run(
            [sys.executable, "-m", "api.cli.command", "prune", "--dry-run"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert pruned.returncode == 0, pruned.stderr[-2000:]
        family = descendants(proc.pid)
        assert len(family) >= 4  # api, worker (+ its pool), beat, redis
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            proc.stdout.close()  # type: ignore[union-attr]
            err.close()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in family if alive(p)] == []
    assert proc.returncode == 0
