"""Epochs and serving: the publish decision, byte-stable prefixes, and replays of generated sessions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import conversations, text_of
from worker.compaction.assemble import assemble
from worker.compaction.epochs import (
    Decision,
    Switch,
    decide,
    extend,
    request_bytes,
    served_request,
    shared_prefix_share,
    step,
)
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.pipeline import compact
from worker.compaction.tokens import count_message
from worker.compaction.validate import request_problems
from worker.flows.simulate import Pace, replay


def turns_of(*bodies: str) -> tuple[Turn, ...]:
    out = [Turn(1, "user", ({"type": "text", "text": "task"},), 5)]
    for n, body in enumerate(bodies):
        use = ({"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": "ls"}},)
        res = ({"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": body},)
        out += [
            Turn(len(out) + 1, "assistant", use, count_message(use)),
            Turn(len(out) + 2, "user", res, count_message(res)),
        ]
    return tuple(out)


def test_unchanged_compaction_extends_the_snapshot() -> None:
    """When the stages rewrite nothing, the snapshot just grows: no new epoch."""
    t = Transcript("s", turns_of("a", "b"))
    assert decide(t, t, Policy()).decision is Decision.EXTEND


def test_small_savings_are_skipped_and_big_ones_published() -> None:
    """A rewrite must save worth_it tokens and share, else the cached prefix is kept."""
    policy = Policy(context_window=20_000, output_reserve=1_000, worth_it_tokens=500, worth_it_share=0.05)
    t = Transcript("s", turns_of(text_of(1, 900), *["x"] * 6))
    out = compact(t, policy, summarize=False).transcript
    assert decide(t, out, policy).decision is Decision.NEW_EPOCH
    stingy = Policy(context_window=20_000, output_reserve=1_000, worth_it_tokens=10**9)
    assert decide(t, out, stingy).decision is Decision.SKIP


def test_over_the_trigger_any_saving_is_published() -> None:
    """Past the summarization trigger the prompt must shrink, whatever the cache costs."""
    policy = Policy(context_window=4_000, output_reserve=500, worth_it_tokens=10**9)
    t = Transcript("s", turns_of(*[text_of(n, 60) for n in range(8)]))
    out = compact(t, policy, summarize=True).transcript
    assert t.tokens() > policy.summarize_trigger_tokens
    assert decide(t, out, policy).decision is Decision.NEW_EPOCH


@pytest.mark.parametrize(
    ("shrink_min_tokens", "past_deadline", "expected"),
    [
        (0, False, Decision.NEW_EPOCH),  # any saving, as before
        (10**9, False, Decision.SKIP),  # too small a saving waits for the summary
        (10**9, True, Decision.NEW_EPOCH),  # past the deadline any saving is taken
        (1, False, Decision.NEW_EPOCH),  # a saving over the minimum is taken
    ],
)
def test_past_the_trigger_a_rewrite_must_save_the_minimum_or_be_past_the_deadline(
    shrink_min_tokens: int, past_deadline: bool, expected: Decision
) -> None:
    """Past the summarize trigger, a structural rewrite that saves less than `shrink_min_tokens`
    is skipped (the next quiet point's summary does the shrinking), unless the prompt is past the
    deadline, where it must shrink now."""
    t = Transcript("s", turns_of(*[text_of(n, 60) for n in range(8)]))
    out = compact(t, Policy(context_window=4_000, output_reserve=500), summarize=True).transcript
    tokens = t.tokens()
    # a window whose trigger lies under the prompt and whose deadline lies under or over it
    window = int(tokens / 0.9) if past_deadline else int(tokens * 1.4)
    policy = Policy(
        context_window=window, output_reserve=0, worth_it_tokens=10**9, shrink_min_tokens=shrink_min_tokens
    )
    assert tokens > policy.summarize_trigger_tokens
    assert (tokens > policy.deadline_tokens) is past_deadline
    assert decide(t, out, policy).decision is expected


def test_between_epochs_the_served_prefix_is_byte_identical() -> None:
    """Appending to the tail keeps every byte before the previous status note."""
    snap = Transcript("s", turns_of("a", "b"))
    first = request_bytes(served_request(snap, [], "note 1"))
    second = request_bytes(served_request(snap, turns_of("a", "b", "c")[5:], "note 2"))
    shared = shared_prefix_share(first, second)
    assert second[: int(shared * len(second))] == first[: int(shared * len(second))]
    assert first.rindex(b',{"text":"note 1"') <= shared * len(second)


def test_shared_prefix_share_counts_bytes() -> None:
    """The share is the common prefix over the current prompt's size."""
    assert shared_prefix_share(b"abcdef", b"abcxyz") == 0.5
    assert shared_prefix_share(b"", b"abc") == 0.0
    assert shared_prefix_share(b"abc", b"abc") == 1.0


def test_extend_appends_the_tail() -> None:
    """The snapshot plus its tail is the same transcript as one with all turns."""
    all_turns = turns_of("a", "b")
    assert extend(Transcript("s", all_turns[:3]), all_turns[3:]).turns == all_turns


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    conversations(max_units=40),
    st.sampled_from([8_000, 16_000, 32_000]),
    st.sampled_from([0.0, 0.05, 1.0]),
    st.sampled_from([0.0, 0.2, 3.0]),
)
def test_a_replayed_session_always_fits_at_any_pace(
    messages: list[dict[str, Any]], window: int, pace: float, job_seconds: float
) -> None:
    """At any append pace and job duration (a worker that keeps up or one far behind), every
    fetch is a valid request within the budget, carrying at most 4 cache breakpoints."""
    policy = Policy(context_window=window, output_reserve=window // 8)
    report = replay("system", messages, policy, pace=Pace(seconds=pace), job_seconds=job_seconds)
    assert all(f.valid for f in report.fetches)
    assert report.over_budget == 0
    assert all(f.request_tokens <= f.budget_tokens for f in report.fetches)


def _session_of(tokens: int) -> Transcript:
    """A task plus tool units of ~500 tokens each, about `tokens` in all."""
    return Transcript("s", turns_of(*[text_of(n, 45) for n in range(max(1, tokens // 500))]))


@pytest.mark.parametrize(
    ("share_of_trigger", "quiet", "prepared", "switch"),
    [
        (0.5, True, False, Switch.NONE),  # under the pre-trigger: nothing to prepare
        (0.9, True, True, Switch.NONE),  # pre-trigger < tokens < trigger: prepared, kept pending
        (1.1, True, True, Switch.QUIET),  # past the trigger at a quiet point: switched in
        (1.1, False, True, Switch.NONE),  # past the trigger, busy: pending until a quiet point
        (1.95, False, True, Switch.DEADLINE),  # past the deadline, busy: switched in at once
    ],
)
def test_a_summary_is_prepared_ahead_and_switched_by_the_rules(
    share_of_trigger: float, quiet: bool, prepared: bool, switch: Switch
) -> None:
    """Pre-trigger prepares, a quiet point past the trigger switches, the deadline switches anyway."""
    policy = Policy(
        context_window=200_000, output_reserve=8_000, summarize_trigger=0.5, structural_trigger=0.2
    )
    assert policy.pretrigger_tokens < policy.summarize_trigger_tokens < policy.deadline_tokens
    t = _session_of(int(policy.summarize_trigger_tokens * share_of_trigger))
    s = step(t, policy, quiet=quiet)
    assert (s.prepared, s.switch) == (prepared, switch)
    if switch is Switch.NONE:
        assert s.publish.handoff is None and (s.pending is not None) == prepared
    else:
        assert s.publish.handoff is not None and s.pending is None
        assert request_problems(assemble(s.publish), allow_pending_tool_use=True) == []


def test_a_pending_summary_catches_up_with_the_turns_appended_since() -> None:
    """A summary prepared earlier is switched in with every turn appended after it, verbatim."""
    policy = Policy(
        context_window=200_000, output_reserve=8_000, summarize_trigger=0.5, structural_trigger=0.2
    )
    early = _session_of(int(policy.summarize_trigger_tokens * 0.9))
    pending = step(early, policy, quiet=False).pending
    assert pending is not None
    later = Transcript("s", turns_of(*[text_of(n, 45) for n in range(len(early.turns) // 2 + 20)]))
    s = step(later, policy, pending=pending, quiet=True)
    assert s.switch is Switch.QUIET and s.publish.handoff == pending.handoff
    assert [t.seq for t in s.publish.turns][-40:] == [t.seq for t in later.turns][-40:]
    assert request_problems(assemble(s.publish), allow_pending_tool_use=True) == []
