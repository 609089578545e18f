"""The replay simulator serves what the service serves: the working-memory block a job observes and
pins at the top (refreshed by the job's own rule), the changes since in the status note, and the
virtual files listed there (BENCHMARKS "Replay vs service: the 64k cost gap")."""

from __future__ import annotations

from typing import Any

import pytest

from worker.compaction.assemble import MEMORY_NOTE_TOKENS
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


def _note(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"][-1]["text"])


def test_served_prompts_pin_the_observed_memory_and_note_files_and_changes() -> None:
    requests, report = served(60)
    assert report.epochs >= 3 and report.over_budget == 0
    blocks = [_memory(r) for r in requests]
    assert all(blocks[3:]), "every fetch after the first job carries the pinned memory block"
    assert "/src/pkg/mod" in blocks[-1] and "Important files" in blocks[-1]
    notes = [_note(r) for r in requests]
    assert any("Virtual files: " in n for n in notes), "clipped outputs are counted in the status note"
    assert any("Working memory changed since the block at the top" in n for n in notes)


def test_a_refreshed_memory_block_costs_the_cached_prefix() -> None:
    """When a new epoch renders the block afresh, nothing before it is read from the cache: the
    fetch writes the whole prompt again (what the service's bill showed and the simulator did not)."""
    requests, report = served(60)
    refreshed = [
        i
        for i in range(1, len(requests))
        if _memory(requests[i]) != _memory(requests[i - 1]) and _memory(requests[i - 1])
    ]
    assert refreshed
    assert all(report.fetches[i].billed.read_tokens == 0 for i in refreshed)


@pytest.mark.parametrize(
    ("new_epoch", "rewrote_top", "system_changed", "changes", "expected"),
    [
        (False, False, False, "x " * 2 * MEMORY_NOTE_TOKENS, False),  # no new epoch: the block stays
        (True, False, False, "goal: ship it", False),  # structural, small changes: the note carries them
        (True, False, False, "x " * 2 * MEMORY_NOTE_TOKENS, True),  # the changes outgrow the note
        (True, True, False, "", True),  # a summary that folds the notes rewrites from the top anyway
        (True, False, False, "", False),  # one stacked on the earlier notes keeps the top
        (False, False, True, "", True),  # a new system prompt too
    ],
)
def test_when_a_publish_refreshes_the_pinned_memory(
    new_epoch: bool, rewrote_top: bool, system_changed: bool, changes: str, expected: bool
) -> None:
    got = refreshes_memory(
        new_epoch=new_epoch, rewrote_top=rewrote_top, system_changed=system_changed, changes=changes
    )
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
