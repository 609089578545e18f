"""`compactd replay --http` (api/cli/drive.py) against a running API and worker: what it reports per
fetch is what the service served, including whether a fetch kept the previous prompt's cached
prefix (`pricing.keeps_prefix`, the issue-27 measure the offline replay prints too)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from api.cli.drive import replay_http
from tests.integration.conftest import Service, wait_for
from worker.flows.simulate import parse_pace

pytestmark = [pytest.mark.services]


def _turns(n: int) -> list[dict[str, Any]]:
    """n user/assistant exchanges about a made-up parser, each a few hundred tokens."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix the date parser in src/dates.py."}]
    for i in range(n):
        out.append({"role": "assistant", "content": f"Step {i}: reading the parser. " + "detail " * 120})
        out.append({"role": "user", "content": f"Result {i}: " + f"line {i} of the output " * 60})
    out.append({"role": "assistant", "content": "Done."})
    return out


def _compact_now(client: httpx.Client, sid: str) -> None:
    """POST /compact and wait until its summary is switched in (a new epoch)."""
    before = client.get(f"/v1/sessions/{sid}").json()["epoch"]
    assert client.post(f"/v1/sessions/{sid}/compact").status_code == 202
    wait_for(lambda: client.get(f"/v1/sessions/{sid}").json()["epoch"] > before, timeout=60)


def _replay(
    service: Service, messages: list[dict[str, Any]], compact_after: int | None = None, **kw: Any
) -> Any:
    """replay_http at once (pace 0), a /compact after message `compact_after` (when given). No
    fetch waits for the worker's first job: the working-memory block is rendered only at a rewrite
    from the top (docs/memory.md), so a job before the first summary leaves the prefix alone."""

    def after_append(client: httpx.Client, sid: str, i: int) -> None:
        if i == compact_after:
            _compact_now(client, sid)

    return replay_http(
        service.url,
        service.key,
        "You are a coding agent.",
        messages,
        pace=parse_pace("0"),
        after_append=after_append,
        **kw,
    )


def test_a_growing_prompt_keeps_every_prefix(service: Service) -> None:
    messages = _turns(6)
    report = _replay(service, messages)
    summary = report.summary()
    assert summary["all_valid"] and summary["over_budget"] == 0
    assert summary["fetches"] == sum(m["role"] == "assistant" for m in messages)
    assert not report.fetches[0].kept_prefix  # nothing before it
    assert all(f.kept_prefix for f in report.fetches[1:])
    assert summary["fetches_keeping_prefix"] == 1.0


def test_a_summary_switched_in_between_fetches_loses_the_prefix_once(service: Service) -> None:
    compact_after = 8  # a user turn: the next message is the model's, so a fetch follows
    # a 20k window: a forced round keeps at most a tenth of the prompt, so every turn but the
    # task and the last is archived and summarized
    report = _replay(service, _turns(6), compact_after, context_window=20_000)
    kept = {f.turn: f.kept_prefix for f in report.fetches}
    tokens = {f.turn: f.request_tokens for f in report.fetches}
    assert kept[compact_after + 1] is False  # the summary rewrote what the previous fetch cached
    assert tokens[compact_after + 1] < tokens[compact_after - 1]  # served instead of the turns
    assert all(k for turn, k in kept.items() if turn not in (1, compact_after + 1))
    assert report.summary()["fetches_keeping_prefix"] == round(1 - 1 / (len(kept) - 1), 3)
