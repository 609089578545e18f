"""The replay simulator serves what the service serves: the working-memory block a job observes and
pins at the top (refreshed by the job's own rule), the changes since in the user turns' memory
notes, and, to a model that binds thinking, each block only on its own prefix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.preserved_thinking import THINKING, Binder
from worker.compaction.model import Policy
from worker.flows.compact import refreshes_memory
from worker.flows.simulate import Pace, replay

POLICY = Policy(context_window=24_000, output_reserve=2_000)


def edits(n: int) -> list[dict[str, Any]]:
    """A coding session: the task, then n rounds of an Edit on one of five files and a long result."""
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix the importer and keep the tests green."}]
    for k in range(n):
        use = {
            "type": "tool_use",
            "id": f"toolu_{k:04d}",
            "name": "Edit",
            "input": {
                "file_path": f"/src/pkg/mod{k % 5}.py",
                "old_string": f"x = {k}",
                "new_string": f"x = {k + 1}",
            },
        }
        body = "\n".join(f"test_{k}_{j} ... ok in {j}.{k} ms" for j in range(120))
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"Editing mod{k % 5}."}, use]})
        out.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": body}]}
        )
    return out


def served(n: int) -> tuple[list[dict[str, Any]], Any]:
    requests: list[dict[str, Any]] = []

    def keep(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request)
        return request

    report = replay("", edits(n), POLICY, pace=Pace(1.0), job_seconds=0.05, upstream=keep)
    return requests, report


def _memory(request: dict[str, Any]) -> str:
    return next((b["text"] for b in request["system"] if b["text"].startswith("<working_memory>")), "")


def _notes(request: dict[str, Any]) -> list[str]:
    return [
        b["text"]
        for m in request["messages"]
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("<compactd-memory>")
    ]


def test_served_prompts_note_the_observed_memory_in_turns_and_pin_it_at_a_summary() -> None:
    """Before its first summary a session's prompt has no memory block: the changes the jobs observe
    ride in the user turns they were appended with, and stay there; a summary renders the block."""
    requests, report = served(60)
    assert report.epochs >= 3 and report.over_budget == 0
    blocks = [_memory(r) for r in requests]
    assert not blocks[0] and blocks[-1] and "/src/pkg/mod" in blocks[-1]
    noted = [_notes(r) for r in requests]
    assert any("Working memory changed since it was last shown" in n for ns in noted for n in ns)
    first = next(i for i, ns in enumerate(noted) if ns)
    assert all(
        noted[first][0] in noted[i]
        for i in range(first, len(noted))
        if requests[i]["system"] == requests[first]["system"]
        and report.fetches[i].epoch == report.fetches[first].epoch
    )


def test_a_refreshed_memory_block_costs_the_cached_prefix() -> None:
    """When a new epoch renders the block afresh, nothing before it is read from the cache: the
    fetch writes the whole prompt again (what the service's bill showed and the simulator did not)."""
    requests, report = served(60)
    refreshed = [i for i in range(1, len(requests)) if _memory(requests[i]) != _memory(requests[i - 1])]
    assert refreshed
    assert all(report.fetches[i].billed.read_tokens == 0 for i in refreshed)


@pytest.mark.parametrize(
    ("new_epoch", "rewrote_top", "system_changed", "expected"),
    [
        (False, False, False, False),  # no new epoch: the block stays
        (True, False, False, False),  # a structural one, or a summary stacked on the earlier notes
        (True, True, False, True),  # a summary that folds the notes rewrites from the top anyway
        (False, False, True, True),  # a new system prompt too
    ],
)
def test_when_a_publish_refreshes_the_pinned_memory(
    new_epoch: bool, rewrote_top: bool, system_changed: bool, expected: bool
) -> None:
    """The block is rendered afresh only where the prompt is rewritten from the top anyway."""
    got = refreshes_memory(new_epoch=new_epoch, rewrote_top=rewrote_top, system_changed=system_changed)
    assert got is expected


def test_a_replay_budgets_a_session_window_as_the_service_does() -> None:
    """The output reserve is capped at a quarter of the window in one place, for the service, the
    CLI replay and the benches (a 32k replay budgeted 23,808 tokens where the service budgets 24,000)."""
    from worker.resources import policy_for
    from worker.settings import Settings

    for window in (8_000, 32_000, 64_000, 200_000):
        assert Policy().for_window(window) == policy_for(Settings(), window, None)
    assert Policy().for_window(32_000).budget_tokens == 24_000
    assert Policy().for_window(32_000, 4_000).budget_tokens == 28_000


def test_a_fetch_keeps_the_previous_prefix_within_an_epoch_and_not_across_one() -> None:
    """Between epochs a fetch's prompt only grows after the previous one's last breakpoint (the
    prefix is kept); a new epoch rewrites a turn the previous fetch had cached, so it is not; the
    summary's share counts exactly those fetches. (The first publish pins the memory block at the
    top: the second fetch is not compared.)"""
    _, report = served(60)
    pairs = list(zip(report.fetches, report.fetches[1:], strict=False))
    assert report.epochs >= 3
    for a, b in pairs[1:]:
        if b.fallback is None and a.fallback is None:
            assert b.kept_prefix is (a.epoch == b.epoch), (a.turn, b.turn, a.epoch, b.epoch)
    share = report.summary()["fetches_keeping_prefix"]
    assert share == round(sum(b.kept_prefix for _, b in pairs) / len(pairs), 3) < 1.0


class Signing:
    """A model with preserved thinking, for the simulator: a signed block on every answer."""

    def __init__(self) -> None:
        self.binder, self.produced = Binder(), {}

    def answer(self, request: dict[str, Any], message: dict[str, Any], epoch: str) -> dict[str, Any]:
        block = self.binder.block(request, "thinking it over")
        self.produced[block["signature"]] = epoch
        return {**message, "content": [block, *message["content"]]}

    def observe(self, request: dict[str, Any], epoch: str) -> tuple[bool, int, int]:
        checked = self.binder.check(request)
        due = {s for s, e in self.produced.items() if e == epoch}
        served = {
            b["signature"] for m in request["messages"] for b in m["content"] if b.get("type") in THINKING
        }
        return checked.valid, len(due), len(due & served) if checked.valid else 0


def test_every_fetch_passes_the_prefix_check_and_keeps_its_epochs_thinking() -> None:
    """With a model that binds its thinking, no fetch carries a block on a changed prefix, and
    within each epoch every block produced in it is served on its own prefix."""
    model = Signing()
    report = replay("", edits(60), POLICY, pace=Pace(1.0), job_seconds=0.05, thinking=model)
    summary = report.summary()
    assert report.epochs >= 3 and report.over_budget == 0
    assert summary["thinking_valid_fetches"] == 1.0 and summary["thinking_own_prefix"] == 1.0
    assert summary["rewrites"] <= report.epochs + sum(f.fallback is not None for f in report.fetches)


def test_a_session_idle_past_its_cache_lifetime_is_rewritten_before_it_comes_back() -> None:
    """A pause longer than the provider cache's lifetime gets a cold job (the sweep's): the prompt
    waiting to be rewritten is rewritten in the pause, so the first fetch after it (a cache write
    of the whole prompt anyway) comes in the new epoch; a pause within the lifetime changes nothing."""
    messages = edits(40)
    pause_at = 62  # a user turn: the agent comes back after it
    assert messages[pause_at]["role"] == "user"

    def run(pause: float) -> Any:
        times = [float(i) + (pause if i >= pause_at else 0.0) for i in range(len(messages))]
        policy = Policy(context_window=48_000, output_reserve=2_000)
        return replay("", messages, policy, pace=Pace(recorded=True), timestamps=times, job_seconds=0.05)

    def around(report: Any) -> tuple[int, int]:
        before = next(f for f in reversed(report.fetches) if f.turn <= pause_at)
        after = next(f for f in report.fetches if f.turn > pause_at)
        return before.epoch, after.epoch

    idle, busy = run(400.0), run(100.0)
    assert idle.switches.get("cold", 0) + (around(idle)[1] - around(idle)[0]) >= 1
    assert around(busy)[0] == around(busy)[1]
