"""An unchanged LiteLLM-based agent through the Chat Completions drop-in: mini-swe-agent (from the
registry, its `mini` command) with only its model's config changed (api_base and key: compactd's;
the window of a local model compactd cannot know, in a header LiteLLM passes on), on a long shell
task against a Chat Completions stand-in that enforces tool pairing and a 32k window
(tests/fakes/agent_upstream.py on tests/fakes/openai_api.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.agent_upstream import chat_upstream
from tests.integration.proxy_service import Proxy, start_proxy

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROUNDS = 40  # 8-10 KB of output each (mini-swe-agent truncates at 10,000 characters): past 32k
WINDOW = 32_000
FINISH = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TASK = "Run the module checks round by round until every round has passed, then submit."


@pytest.fixture(scope="module")
def long_task(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[tuple[Proxy, object]]:
    api, driver = chat_upstream(WINDOW, rounds=ROUNDS, read_after=25, finish=FINISH)
    with api:
        tmp = tmp_path_factory.mktemp("mini-swe-agent")
        yield from (
            (p, driver)
            for p in start_proxy(tmp, redis_url, openai=api, offload_tokens=2000, preview_tokens=300)
        )


def test_mini_swe_agent_runs_a_long_task_through_compactd(
    long_task: tuple[Proxy, object], tmp_path: Path
) -> None:
    """mini-swe-agent's `mini`, configured with compactd's URL and key as its model's api_base and
    api_key, runs 40 large bash rounds and submits: every request it sent reached the stand-in
    valid and within the window though its history is far larger, compactd answered its own
    read_file inside the call, and the conversation is one session."""
    proxy, driver = long_task
    api = proxy.openai
    assert api is not None
    config = tmp_path / "model.yaml"
    config.write_text(
        json.dumps(
            {
                "model": {
                    "model_name": "openai/qwen3-coder",
                    "cost_tracking": "ignore_errors",
                    "model_kwargs": {
                        "api_base": f"{proxy.url}/v1",
                        "api_key": proxy.key,
                        "extra_headers": {"x-compactd-context-window": str(WINDOW)},
                    },
                }
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD_", "OPENAI_", "MSWEA_"))}
    env |= {
        "HOME": str(tmp_path),
        "MSWEA_CONFIGURED": "true",
        "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mswea"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    mini = Path(sys.executable).parent / "mini"
    args = [str(mini), "-t", TASK, "-y", "--exit-immediately", "-l", "0", "-o", str(tmp_path / "traj.json")]
    args += ["-c", "mini.yaml", "-c", str(config)]
    done = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    report = f"exit {done.returncode}; stdout {done.stdout[-2000:]!r}; stderr {done.stderr[-2000:]!r}"
    requests = api.requests
    print(
        f"{len(requests)} requests, largest {max((r.tokens for r in requests), default=0)} tokens, reads {driver.reads}"
    )  # type: ignore[attr-defined]
    assert done.returncode == 0, report
    trajectory = json.loads((tmp_path / "traj.json").read_text())
    assert trajectory["info"]["exit_status"] == "Submitted", trajectory["info"]
    assert api.failures == [], api.failures[:3]
    assert max(r.tokens for r in requests) <= WINDOW
    # without compactd the history would have passed the window: it holds more than that
    history = json.loads((tmp_path / "traj.json").read_text())["messages"]
    assert sum(len(str(m.get("content") or "")) for m in history) > 4 * WINDOW
    assert driver.reads and all(r.ok for r in driver.reads)  # type: ignore[attr-defined]
    # every request: the agent's bash tool and compactd's three, the agent's own key never upstream
    assert all(
        {t["function"]["name"] for t in r.body["tools"]}
        == {"bash", "read_file", "grep", "update_working_memory"}
        for r in requests
    )
    sessions = httpx.get(f"{proxy.url}/v1/sessions", headers={"Authorization": f"Bearer {proxy.key}"}).json()[
        "sessions"
    ]
    mains = [s for s in sessions if s["turns"] > 2 * ROUNDS]
    # one session, its served prompt in the window though what the agent produced is three times it
    assert len(mains) == 1 and mains[0]["served_tokens"] < WINDOW < 3 * WINDOW < mains[0]["raw_tokens"], (
        sessions
    )
