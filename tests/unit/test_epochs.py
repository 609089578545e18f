"""Epochs and serving: the publish decision, byte-stable prefixes, and replays of generated sessions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import conversations, text_of
from worker.compaction.assemble import assemble
from worker.compaction.epochs import (
    Decision,
    Switch,
    catch_up,
    decide,
    extend,
    invalidated_reasoning,
    pays_back,
    rewritten_tokens,
    served_request,
    shared_prefix_share,
    step,
)
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.pipeline import compact
from worker.compaction.ports import Summarizer, SummarizerError, SummaryRequest, SummaryResult
from worker.compaction.prefixes import extends
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
    ("minimum", "past_deadline", "expected"),
    [
        (0, False, Decision.NEW_EPOCH),  # any saving, as before
        ("saved", False, Decision.NEW_EPOCH),  # a saving of exactly the minimum is taken
        ("saved+1", False, Decision.SKIP),  # one token short of it waits for the summary
        (10**9, False, Decision.SKIP),  # capped at a tenth of the budget, still above the saving
        (10**9, True, Decision.NEW_EPOCH),  # past the deadline any saving is taken
    ],
)
def test_past_the_trigger_a_rewrite_must_save_the_minimum_or_be_past_the_deadline(
    minimum: int | str, past_deadline: bool, expected: Decision
) -> None:
    """Past the summarize trigger, a structural rewrite (one old output clipped) that saves less
    than `shrink_min_tokens` is skipped (the next quiet point's summary does the shrinking),
    unless the prompt is past the deadline, where it must shrink now."""
    t = Transcript("s", turns_of(text_of(0, 300), *[text_of(n, 45) for n in range(1, 60)]))
    tokens = t.tokens()
    out = compact(t, Policy(context_window=tokens * 2, output_reserve=0, structural_trigger=0.01)).transcript
    saved = tokens - out.tokens()
    least = {"saved": saved, "saved+1": saved + 1}.get(minimum, minimum)  # type: ignore[call-overload]
    # the trigger under the prompt; the deadline over it, or under it in a window just under it
    window = int(tokens / 0.98) if past_deadline else tokens * 2
    policy = Policy(
        context_window=window, output_reserve=0, summarize_trigger=0.3, worth_it_tokens=10**9,
        shrink_min_tokens=least,
    )  # fmt: skip
    assert 0 < saved < policy.budget_tokens // 10 or past_deadline
    assert policy.summarize_trigger_tokens < tokens
    assert (tokens > policy.deadline_tokens) is past_deadline
    assert decide(t, out, policy).decision is expected


def test_at_a_small_window_the_minimum_is_a_tenth_of_the_budget() -> None:
    """The minimum gain is capped at a tenth of the budget (5,000 tokens is much of a 12k window's
    room): a saving above the cap is published even when the minimum is larger."""
    t = Transcript("s", turns_of(*[text_of(n, 60) for n in range(8)]))
    out = compact(t, Policy(context_window=4_000, output_reserve=500), summarize=True).transcript
    tokens = t.tokens()
    policy = Policy(
        context_window=int(tokens * 1.4), output_reserve=0, worth_it_tokens=10**9, shrink_min_tokens=10**9
    )
    assert policy.summarize_trigger_tokens < tokens < policy.deadline_tokens
    assert tokens - out.tokens() >= policy.budget_tokens // 10
    assert decide(t, out, policy).decision is Decision.NEW_EPOCH


def test_between_epochs_the_served_prompt_only_grows() -> None:
    """Appending to the tail keeps every message of the previous fetch, as the provider compares
    them (cache_control placement aside): a fetch adds nothing it takes back."""
    snap = Transcript("s", turns_of("a", "b"))
    first = served_request(snap, turns_of("a", "b", "c")[4:5])
    second = served_request(snap, turns_of("a", "b", "c")[4:])
    assert extends(first, second)
    assert not extends(second, first)


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


class _Failing:
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise SummarizerError("down")


@pytest.mark.parametrize(
    ("summarizer", "decision"), [(None, Decision.SKIP), (_Failing(), Decision.NEW_EPOCH)]
)
def test_a_small_saving_waits_only_for_a_summary_on_its_way(
    summarizer: Summarizer | None, decision: Decision
) -> None:
    """Past the trigger and short of the deadline, a structural saving under the minimum waits
    when a summary is pending; when summarizing failed none is coming, so the saving is taken."""
    policy = Policy(
        context_window=200_000, output_reserve=8_000, summarize_trigger=0.5, structural_trigger=0.2,
        worth_it_tokens=10**9, shrink_min_tokens=10**9,
    )  # fmt: skip
    small = _session_of(int(policy.summarize_trigger_tokens * 1.1))
    t = Transcript("s", turns_of(text_of(0, 300), *[text_of(n, 45) for n in range(1, len(small.turns) // 2)]))
    s = step(t, policy, quiet=False, summarizer=summarizer)  # only the first, large output clips
    assert s.verdict.saved_tokens > 0 and (s.pending is None) == (summarizer is not None)
    assert s.verdict.decision is decision


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


def _text_session(sizes: list[int]) -> Transcript:
    """The task, then text turns (no tool units) of about `sizes` lines each, roles alternating."""
    turns = [Turn(1, "user", ({"type": "text", "text": "Fix the date parser."},), 6)]
    for seq, lines in enumerate(sizes, start=2):
        block = ({"type": "text", "text": text_of(seq, lines)},)
        turns.append(Turn(seq, "assistant" if seq % 2 == 0 else "user", block, count_message(block)))
    return Transcript("s", tuple(turns))


def _served_once(t: Transcript, seqs: set[int]) -> None:
    """Every seq appended is served verbatim or covered by the note, never both; in order; the
    newest verbatim (what the model answers next)."""
    kept = [turn.seq for turn in t.turns]
    archived = {seq for seq in seqs if t.handoff is not None and t.handoff.covers(seq)}
    assert kept == sorted(set(kept)) and set(kept) <= seqs
    assert not archived & set(kept), sorted(archived & set(kept))
    assert seqs == archived | set(kept), sorted(seqs - archived - set(kept))
    assert kept[-1] == max(seqs)


def test_a_forced_summary_whose_keep_window_holds_no_whole_turn_keeps_the_newest() -> None:
    """A /compact whose keep window is smaller than the last turn archives every turn between the
    task and the newest, keeps the newest verbatim, and serves the note instead of the others."""
    policy = Policy(context_window=20_000, output_reserve=1_000)
    t = _text_session([60] * 9 + [300])
    s = step(t, policy, quiet=True, force=True)
    assert s.switch is Switch.FORCED and s.publish.handoff is not None
    _served_once(s.publish, {turn.seq for turn in t.turns})
    assert [turn.seq for turn in s.publish.turns] == [1, 11]
    assert s.publish.tokens() < t.tokens()
    assert request_problems(assemble(s.publish), allow_pending_tool_use=True) == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 400), min_size=4, max_size=50),
    window=st.sampled_from([8_000, 20_000, 64_000]),
    rounds=st.integers(1, 8),
    flags=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=8, max_size=8),
    stack=st.booleans(),
)
def test_jobs_over_text_turns_serve_every_turn_once(
    sizes: list[int], window: int, rounds: int, flags: list[tuple[bool, bool]], stack: bool
) -> None:
    """Jobs in rounds over a text-only session (no tool unit, so a keep window may hold only the
    newest turn), quiet or busy, forced or not, notes stacked or folded: what each publishes, and a
    summary kept pending once caught up, serves every turn once (`_served_once`)."""
    policy = Policy(context_window=window, output_reserve=window // 20, stack_notes=stack)
    turns = _text_session(sizes).turns
    size = max(1, len(turns) // rounds)
    state, pending, seen = Transcript("s", ()), None, set[int]()
    for k, start in enumerate(range(0, len(turns), size)):
        new = turns[start : start + size]
        seen |= {t.seq for t in new}
        current = extend(state, new)
        if pending is not None:
            _served_once(catch_up(pending, current), seen)
        quiet, force = flags[k % len(flags)]
        s = step(current, policy, pending=pending, quiet=quiet, force=force)
        _served_once(s.publish, seen)
        assert request_problems(assemble(s.publish), allow_pending_tool_use=True) == []
        state, pending = s.publish, s.pending


def thoughtful_turns(*bodies: str) -> tuple[Turn, ...]:
    """turns_of, each assistant turn starting with a thinking block."""
    block = {"type": "thinking", "thinking": "checking", "signature": "s1"}
    return tuple(
        replace(t, content=(block, *t.content), tokens=t.tokens + 10) if t.role == "assistant" else t
        for t in turns_of(*bodies)
    )


def test_with_a_model_that_binds_thinking_a_rewrite_pays_for_the_reasoning_it_cuts() -> None:
    """The same clip is worth it to a model without the prefix check, not to one with it when the
    reasoning it cuts costs more than the saving buys before the trigger; without thinking in the
    session nothing is cut."""
    t = Transcript("s", thoughtful_turns(text_of(1, 900), *["x"] * 6))
    # a large window (the clip pays back before the trigger) and a low structural trigger
    policy = Policy(
        context_window=400_000, output_reserve=0, structural_trigger=0.01, keep_share=0.001,
        worth_it_tokens=500, worth_it_share=0.05,
    )  # fmt: skip
    out = compact(t, policy, summarize=False).transcript
    assert decide(t, out, policy).decision is Decision.NEW_EPOCH
    binds = replace(policy, binds_thinking=True)
    assert invalidated_reasoning(t, out, binds) == binds.reasoning_rewrite_tokens
    assert decide(t, out, binds).decision is Decision.NEW_EPOCH
    assert decide(t, out, replace(binds, reasoning_rewrite_tokens=10**9)).decision is Decision.SKIP
    plain = Transcript("s", turns_of(text_of(1, 900), *["x"] * 6))
    assert invalidated_reasoning(plain, compact(plain, policy).transcript, binds) == 0


def test_a_long_runway_pays_back_a_clip_a_short_one_does_not() -> None:
    """Below the trigger a clip's saving is read from the cache at every request until the trigger:
    with a large window that pays for the rewrite, with the trigger a few requests away it does not."""
    t = Transcript("s", thoughtful_turns(text_of(1, 900), *[text_of(n, 40) for n in range(2, 12)]))
    wide = Policy(
        context_window=400_000,
        output_reserve=0,
        structural_trigger=0.01,
        keep_share=0.001,
        binds_thinking=True,
    )
    narrow = replace(wide, context_window=int(t.tokens() * 1.8))  # the trigger just above it
    for policy, pays in ((wide, True), (narrow, False)):
        out = compact(t, policy).transcript
        assert out.tokens() < t.tokens() < policy.summarize_trigger_tokens
        assert pays_back(t, out, policy, rewritten_tokens(t, out)) is pays


def test_past_the_trigger_a_model_that_binds_thinking_gets_a_deep_rewrite() -> None:
    """Past the summarize trigger, where a clip would buy a round or two, the rewrite is a summary
    down to the keep window instead (one rewrite, then room for many requests)."""
    t = Transcript("s", thoughtful_turns(*[text_of(n, 60) for n in range(12)]))
    policy = Policy(context_window=int(t.tokens() * 1.05), output_reserve=0, worth_it_tokens=10**9)
    s = step(t, policy, quiet=False)
    deep = step(t, replace(policy, binds_thinking=True), quiet=False)
    assert s.verdict.decision is Decision.NEW_EPOCH and s.publish.handoff is None
    assert deep.verdict.decision is Decision.NEW_EPOCH and deep.publish.handoff is not None
    assert deep.publish.tokens() < s.publish.tokens()


class _Counting(_Failing):
    calls = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        return super().summarize(request)


def test_a_summarizer_that_failed_is_not_called_again_in_the_same_job() -> None:
    """Past the trigger with a model that binds thinking, a job whose summary failed publishes the
    structural rewrite and reports the error: no second, deep summary call (its retry is scheduled)."""
    t = Transcript("s", thoughtful_turns(*[text_of(n, 60) for n in range(12)]))
    policy = Policy(context_window=int(t.tokens() * 1.05), output_reserve=0, worth_it_tokens=10**9)
    counting = _Counting()
    s = step(t, replace(policy, binds_thinking=True), quiet=False, summarizer=counting)
    assert counting.calls == 1 and s.error is not None
    assert s.verdict.decision is Decision.NEW_EPOCH and s.publish.handoff is None


def test_a_cold_cache_makes_a_rewrite_cost_no_write() -> None:
    """Idle past the cache's lifetime, the next request writes the whole prompt anyway: a saving
    the warm rule skips is published, and a prepared summary goes in at a quiet point."""
    t = Transcript("s", turns_of(text_of(1, 900), *["x"] * 6))
    policy = Policy(context_window=20_000, output_reserve=1_000, worth_it_tokens=500, worth_it_share=10.0)
    out = compact(t, policy, summarize=False).transcript
    assert decide(t, out, policy).decision is Decision.SKIP
    assert decide(t, out, policy, cold=True).decision is Decision.NEW_EPOCH
    long = _session_of(int(Policy(context_window=16_000, output_reserve=0).summarize_trigger_tokens * 0.9))
    small = Policy(context_window=16_000, output_reserve=0)
    prepared = step(long, small, quiet=True)
    assert prepared.pending is not None and prepared.switch is Switch.NONE
    switched = step(long, small, pending=prepared.pending, quiet=True, cold=True)
    assert switched.switch is Switch.COLD and switched.publish.handoff is not None
