"""The cache bound (ops/bench/bound.py): the fewest epochs any policy needs, and the best share of
fetches that keep the previous prefix, are bounds the replay of a real policy never beats."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops.bench.bound import bound, fewest_epochs, new_tokens
from tests.strategies import conversations
from worker.compaction.model import Policy, Turn
from worker.flows.simulate import Pace, replay
from worker.ingest import ingest
from worker.redaction import Redactor


def _turn(seq: int, role: str, tokens: int) -> Turn:
    return Turn(seq, role, ({"type": "text", "text": "x"},), tokens)  # type: ignore[arg-type]


def test_new_tokens_are_the_turns_each_fetch_sends_first() -> None:
    """A fetch comes before every assistant turn and is the first to send the turns since the last one."""
    roles = ["user", "assistant", "user", "assistant", "user", "user", "assistant"]
    turns = [_turn(i + 1, r, 10 * (i + 1)) for i, r in enumerate(roles)]
    assert new_tokens(turns) == [10, 20 + 30, 40 + 50 + 60]


@pytest.mark.parametrize(
    ("new", "budget", "floor", "expected"),
    [
        ([5, 5, 5], 20, 0, 0),  # fits without a rewrite
        ([5, 5, 5, 5, 5], 20, 0, 1),  # the fifth passes 20: one rewrite, then 5
        ([5, 5, 5, 5, 5], 20, 12, 1),  # 12 + 5 = 17 still fits
        ([5] * 9, 20, 12, 5),  # 20, then 17, and every later fetch (22 > 20) again
        ([5, 30], 20, 0, None),  # one fetch alone passes the budget
        ([5, 5, 5, 5, 5], 20, 16, None),  # the floor plus the new turns passes it
    ],
)
def test_fewest_epochs_rewrites_as_late_as_possible(
    new: list[int], budget: int, floor: int, expected: int | None
) -> None:
    """Greedy: grow until the next fetch would pass the budget, then rewrite down to the floor."""
    assert fewest_epochs(new, budget, floor) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 50), max_size=40), st.integers(50, 200), st.integers(0, 40), st.data())
def test_no_rewrite_schedule_needs_fewer_epochs(
    new: list[int], budget: int, floor: int, data: st.DataObject
) -> None:
    """Any schedule of rewrites (at floor or above) that keeps every fetch within the budget
    rewrites at least as often as the greedy bound."""
    least = fewest_epochs(new, budget, floor)
    prompt, epochs = 0, 0
    for n in new:
        if prompt + n > budget or data.draw(st.booleans()):
            epochs += 1
            prompt = floor + data.draw(st.integers(0, 10))
        prompt += n
        if prompt > budget:
            return  # this schedule does not fit: it bounds nothing
    assert least is not None and least <= epochs


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(max_units=25))
def test_a_replay_never_keeps_the_prefix_more_often_than_the_bound(messages: list[dict[str, object]]) -> None:
    """Today's policy, replayed at a small window, keeps the previous prefix on no more fetches than
    the bound for any policy allows."""
    policy = Policy(context_window=6_000, output_reserve=1_000)
    turns = ingest(messages, first_seq=1, redactor=Redactor(b"replay"), policy=policy).turns
    report = replay("", messages, policy, pace=Pace(1.0), job_seconds=0.05)
    best = bound(turns, 0, policy)["prefix_any"]
    kept = report.summary()["fetches_keeping_prefix"]
    if best != "no" and len(report.fetches) > 1:
        assert kept <= best
