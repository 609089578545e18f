"""The README's demo with no provider: ops/demo_agent.py through a real compactd to the Messages
stand-in playing the model (tests/fakes/messages_api.py demo_reply): compaction happens, what goes
upstream stays small, and compactd's own grep finds what compaction moved out of the prompt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.fakes.messages_api import DEMO_PORT, FakeMessagesAPI, demo_reply
from tests.integration.conftest import running_service, settings_env
from tests.integration.test_docs_snippets import snippet

pytestmark = [pytest.mark.services]


def test_the_demo_agent_watches_compaction_happen(tmp_path: Path, redis_url: str) -> None:
    """21 rounds at a 24k window: the model's answer names every failed build (7, 14 and 21, the
    early ones found with compactd's grep in its files), the session has summary epochs, and each
    request upstream stayed within the window while the agent's history grew past 200k tokens."""
    with (
        FakeMessagesAPI(respond=demo_reply) as upstream,
        running_service(
            tmp_path,
            f"sqlite:///{tmp_path / 'c.db'}",
            redis_url,
            upstream_url=upstream.base_url,
            idle_seconds=0.2,
        ) as service,
    ):
        env = settings_env(service.settings) | {"COMPACTD_URL": service.url, "COMPACTD_KEY": service.key}
        done = subprocess.run(
            [sys.executable, "-m", "ops.demo_agent", "--rounds", "21", "--pause", "0.3", "--session", "demo"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "Failed: build-7, build-14, build-21." in done.stdout, done.stdout[-1500:]
        sent = [int(n.replace(",", "")) for n in re.findall(r"compactd sent ~([\d,]+) upstream", done.stdout)]
        held = [int(n.replace(",", "")) for n in re.findall(r"whole history, ~([\d,]+) tokens", done.stdout)]
        assert held[-1] > 200_000 and max(sent) < 24_000, (held[-1], max(sent))
        stats = httpx.get(
            f"{service.url}/v1/sessions/demo/stats", headers={"Authorization": f"Bearer {service.key}"}
        ).json()
        assert any(e["kind"] == "summary" for e in stats["epochs"]) and stats["compaction_ratio"] > 5
        greps = [
            b
            for r in upstream.requests
            for m in r.body["messages"]
            for b in m["content"]
            if isinstance(b, dict) and b.get("name") == "grep"
        ]
        assert greps  # the stand-in searched compactd's files with compactd's own tool


def test_the_readme_demo_block_names_what_this_test_runs() -> None:
    """README's demo block starts the stand-in on its fixed port, compactd in front of it, the agent."""
    block = snippet(REPO / "README.md", "demo")
    assert "python -m tests.fakes.messages_api" in block and "python -m ops.demo_agent" in block
    assert f"COMPACTD_UPSTREAM_URL=http://127.0.0.1:{DEMO_PORT} make up" in block
