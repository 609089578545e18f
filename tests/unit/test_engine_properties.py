"""Invariants of the compaction engine on generated conversations (DESIGN §4)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import PLANTED_SECRETS, conversations, planted_conversations
from worker.compaction.assemble import assemble, served_tokens, turn_policy
from worker.compaction.epochs import fit_fallback
from worker.compaction.fit import fit
from worker.compaction.model import Handoff, Policy, Transcript, canonical_json
from worker.compaction.pipeline import compact
from worker.compaction.ports import SummarizerError, SummaryRequest, SummaryResult
from worker.compaction.tokens import BLOCK_OVERHEAD_TOKENS, count_request, count_text, head_text
from worker.compaction.validate import request_problems
from worker.compaction.zones import keep_start
from worker.ingest import ingest
from worker.redaction import Redactor

REDACTOR = Redactor(b"test-key")
WINDOWS = st.sampled_from([4_000, 8_000, 16_000, 64_000])
FAST = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def transcript(messages: list[dict[str, Any]], policy: Policy) -> Transcript:
    ingested = ingest(messages, first_seq=1, redactor=REDACTOR, policy=policy)
    return Transcript(system="You are a careful coding agent.", turns=ingested.turns, files=ingested.files)


def policy_for(window: int) -> Policy:
    return Policy(context_window=window, output_reserve=window // 8)


@FAST
@given(conversations(), WINDOWS, st.booleans())
def test_compacted_prompt_is_a_valid_request(
    messages: list[dict[str, Any]], window: int, quiet: bool
) -> None:
    """Whatever the stages do, the assembled prompt passes the Messages API's pairing rules."""
    policy = policy_for(window)
    out = compact(transcript(messages, policy), policy, summarize=quiet)
    assert request_problems(assemble(out.transcript), allow_pending_tool_use=True) == []


@FAST
@given(conversations(), WINDOWS)
def test_every_seq_is_accounted_for(messages: list[dict[str, Any]], window: int) -> None:
    """Each appended seq is still a turn or lies in a range the handoff note archives."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True).transcript
    kept = {turn.seq for turn in out.turns}
    for turn in t.turns:
        assert turn.seq in kept or (out.handoff is not None and out.handoff.covers(turn.seq))
    archived = [f for f in out.files if f.kind == "archive"]
    archived_seqs = {orjson.loads(line)["seq"] for f in archived for line in f.content.splitlines()}
    assert archived_seqs == {turn.seq for turn in t.turns} - kept


@FAST
@given(conversations(), WINDOWS, st.booleans())
def test_deterministic_idempotent_and_never_grows(
    messages: list[dict[str, Any]], window: int, quiet: bool
) -> None:
    """Same input gives the same bytes; compacting the output changes nothing; tokens never grow."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    first = compact(t, policy, summarize=quiet)
    again = compact(t, policy, summarize=quiet)
    assert canonical_json(assemble(first.transcript)) == canonical_json(assemble(again.transcript))
    twice = compact(first.transcript, policy, summarize=quiet)
    assert canonical_json(assemble(twice.transcript)) == canonical_json(assemble(first.transcript))
    assert first.tokens <= t.tokens()


@FAST
@given(conversations(), WINDOWS)
def test_keep_window_and_thinking_stay_verbatim(messages: list[dict[str, Any]], window: int) -> None:
    """Turns in the keep window, the first task and every surviving thinking block are untouched."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True).transcript
    by_seq = {turn.seq: turn for turn in out.turns}
    for turn in t.turns[keep_start(t.turns, policy.keep_tokens) :]:
        assert by_seq[turn.seq] == turn
    assert by_seq[t.turns[0].seq] == t.turns[0]
    before = {
        (turn.seq, i): b for turn in t.turns for i, b in enumerate(turn.content) if b["type"] == "thinking"
    }
    for turn in out.turns:
        for i, b in enumerate(turn.content):
            if b["type"] == "thinking":
                assert before[(turn.seq, i)] == b


@FAST
@given(conversations(max_units=8))
def test_below_the_structural_trigger_nothing_changes(messages: list[dict[str, Any]]) -> None:
    """Under the structural trigger the output equals the ingested input."""
    policy = policy_for(2_000_000)
    t = transcript(messages, policy)
    assert compact(t, policy, summarize=True).transcript == t


@FAST
@given(conversations(), WINDOWS)
def test_no_planted_secret_survives_anywhere(messages: list[dict[str, Any]], window: int) -> None:
    """Secrets planted in tool outputs appear neither in the prompt nor in any file written."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True).transcript
    blobs = [canonical_json(assemble(out)).decode(), *(f.content for f in out.files)]
    for secret in PLANTED_SECRETS:
        assert not any(secret in blob for blob in blobs)


@FAST
@given(planted_conversations(), WINDOWS)
def test_no_secret_planted_in_inputs_documents_or_search_results_survives(
    messages: list[dict[str, Any]], window: int
) -> None:
    """Secrets in tool-input keys, nested values and JSON strings, documents and search results
    appear neither in the prompt nor in any file written, and the prompt stays a valid request."""
    policy = policy_for(window)
    out = compact(transcript(messages, policy), policy, summarize=True).transcript
    prompt = assemble(out)
    blobs = [canonical_json(prompt).decode(), *(f.content for f in out.files)]
    for secret in PLANTED_SECRETS:
        assert not any(secret in blob for blob in blobs)
    assert request_problems(prompt, allow_pending_tool_use=True) == []


@FAST
@given(conversations(), WINDOWS)
def test_a_pending_tool_call_is_never_summarized_or_edited(
    messages: list[dict[str, Any]], window: int
) -> None:
    """Summarizing past a pending tool_use evicts only the settled span: the call stays verbatim."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True).transcript
    assert out.turns[-1] == t.turns[-1]
    if t.turns[-1].role == "assistant" and t.turns[-1].tool_use_ids():
        assert request_problems(assemble(out), allow_pending_tool_use=True) == []


@FAST
@given(conversations(), WINDOWS)
def test_exactly_one_handoff_note(messages: list[dict[str, Any]], window: int) -> None:
    """However many rounds ran, the prompt carries at most one handoff note."""
    policy = policy_for(window)
    out = compact(transcript(messages, policy), policy, summarize=True, force=True).transcript
    text = canonical_json(assemble(out)).decode()
    assert text.count("[compactd handoff note]") == (1 if out.handoff else 0)


class FailingSummarizer:
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise SummarizerError("the model is overloaded")


@FAST
@given(conversations(), WINDOWS)
def test_summarizer_failure_loses_nothing(messages: list[dict[str, Any]], window: int) -> None:
    """A failing summarizer leaves every turn in place (structurally compacted) and records the error."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True, force=True, summarizer=FailingSummarizer())
    assert [x.seq for x in out.transcript.turns] == [x.seq for x in t.turns]
    assert out.transcript.handoff is None
    assert out.error in (None, "the model is overloaded")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(conversations(max_units=40), st.sampled_from([4_000, 8_000]), st.integers(2, 6))
def test_rounds_of_compaction_archive_append_only(
    messages: list[dict[str, Any]], window: int, rounds: int
) -> None:
    """Feeding a session in rounds: archives only grow, each seq is archived once, the note is folded."""
    policy = policy_for(window)
    full = transcript(messages, policy)
    state = Transcript(system=full.system, turns=())
    size = max(1, len(full.turns) // rounds)
    refs: tuple[str, ...] = ()
    archived: list[int] = []
    for start in range(0, len(full.turns), size):
        state = Transcript(
            system=state.system, turns=state.turns + full.turns[start : start + size], handoff=state.handoff
        )
        out = compact(state, policy, summarize=True).transcript
        new_refs = out.handoff.archive_refs if out.handoff else ()
        assert new_refs[: len(refs)] == refs
        archived += [
            orjson.loads(x)["seq"] for f in out.files if f.kind == "archive" for x in f.content.splitlines()
        ]
        refs, state = new_refs, out
        assert request_problems(assemble(out), allow_pending_tool_use=True) == []
    assert len(archived) == len(set(archived))
    kept = {x.seq for x in state.turns}
    assert kept | set(archived) == {x.seq for x in full.turns}


@pytest.mark.parametrize("window", [4_000, 16_000])
def test_a_summary_prepared_past_a_pending_tool_call_keeps_the_call(window: int) -> None:
    """The settled span before a tool call in flight is summarized; the call itself stays verbatim."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for n in range(30):
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": "ls"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"out {n} " * 400}
                ],
            },
        ]
    messages.append(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {"command": "make"}}],
        }
    )
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = compact(t, policy, summarize=True).transcript
    assert out.handoff is not None and out.turns[-1] == t.turns[-1]
    assert request_problems(assemble(out), allow_pending_tool_use=True) == []
    failed = compact(t.with_turns(t.turns[:-1]), policy, summarize=True, summarizer=FailingSummarizer())
    assert failed.error == "the model is overloaded" and failed.transcript.handoff is None


@FAST
@given(conversations(), st.sampled_from([2_000, 4_000, 8_000, 32_000]))
def test_fit_always_fits_and_stays_valid(messages: list[dict[str, Any]], window: int) -> None:
    """The fetch fallback's fit is within the budget whatever the session, and still a valid request."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    out = fit(t, turn_policy(policy, t)).transcript
    request = assemble(out)
    assert count_request(request) <= policy.budget_tokens
    assert request_problems(request, allow_pending_tool_use=True) == []


@FAST
@given(conversations(), st.sampled_from([4_000, 8_000, 32_000]))
def test_fit_fits_beside_notes_stacked_to_their_ceiling(messages: list[dict[str, Any]], window: int) -> None:
    """Notes stacked up to notes_stack_share of the budget (more than a fold-up writes) leave the
    fit room: what it serves is within the budget and a valid request."""
    policy = policy_for(window)
    t = transcript(messages, policy)
    share = int(policy.budget_tokens * policy.notes_stack_share) // 2 - BLOCK_OVERHEAD_TOKENS
    notes = [head_text(" ".join(f"note{n} item{i}" for i in range(share)), share) for n in range(2)]
    tokens = sum(count_text(x) + BLOCK_OVERHEAD_TOKENS for x in notes)
    assert tokens <= policy.budget_tokens * policy.notes_stack_share
    stacked = replace(t, handoff=Handoff(notes[1], ("h_0",), ((0, 0),), tokens, earlier=(notes[0],)))
    out = fit(stacked, turn_policy(policy, stacked)).transcript
    request = assemble(out)
    assert count_request(request) <= policy.budget_tokens
    assert request_problems(request, allow_pending_tool_use=True) == []


def test_fit_drops_old_thinking_and_clips_any_bulky_tool_input() -> None:
    """A session whose older assistant turn holds a huge thinking block and a huge command still
    fits a small window: the thinking goes whole, the command is clipped with a pointer."""
    big = "word " * 9_000
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": big, "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": big}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    policy = policy_for(8_000)
    t = transcript(messages, policy)
    out = fit(t, turn_policy(policy, t))
    request = assemble(out.transcript)
    assert count_request(request) <= policy.budget_tokens
    assert request_problems(request) == []
    assert not any(b.get("type") == "thinking" for m in request["messages"] for b in m["content"])
    assert any(f.content == big for f in out.transcript.files)  # the full command stays readable


def test_fit_clips_the_task_only_when_the_rest_clipped_is_not_enough() -> None:
    """The squeeze clips the keep window before the task (what the agent works on, and the start of
    the provider's cached prefix); a task too big for the window is clipped too."""

    def session(task: str) -> list[dict[str, Any]]:
        bulky = [{"type": "text", "text": f"log {n} " + "line of output " * 700} for n in range(3)]
        return [
            {"role": "user", "content": task},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}, *bulky],
            },
        ]

    policy = policy_for(8_000)
    task = "Fix the parser. " + "Keep every public name as it is. " * 90
    t = transcript(session(task), policy)
    out = fit(t, turn_policy(policy, t)).transcript
    assert count_request(assemble(out)) <= policy.budget_tokens
    assert out.turns[0] == t.turns[0] and out.turns[-1] != t.turns[-1]
    huge = transcript(session(task * 12), policy)
    clipped = fit(huge, turn_policy(policy, huge)).transcript
    assert count_request(assemble(clipped)) <= policy.budget_tokens
    assert clipped.turns[0] != huge.turns[0]
    # the newest turn only as clipped as the task's squeeze needed (400 tokens a block), not 20
    assert clipped.turns[-1].tokens >= 1_000


def test_a_fetch_fit_keeps_the_pinned_memory_block_unless_its_summary_rewrites_the_top() -> None:
    """fit_fallback follows the job's memory rule: a fit that only clips keeps the pinned block (the
    prompt's top stays); one whose summary writes the first note renders the block afresh. Either
    way the served prompt is within the budget with room for the larger block."""

    def unit(n: int, output: str) -> list[dict[str, Any]]:
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"make step{n}"}}
        done = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}
        return [{"role": "assistant", "content": [call]}, {"role": "user", "content": [done]}]

    policy = policy_for(8_000)
    pinned = "Task: fix the parser."
    fresh = "Task: fix the parser.\nDecisions:\n" + "\n".join(
        f"- keep rule {i} of the lexer stable" for i in range(60)
    )
    task = [{"role": "user", "content": "Fix the parser."}]
    log = "\n".join(f"line {i}: checked token stream offset {i * 7}" for i in range(620))
    clipped = replace(
        transcript([*task, *unit(0, log), *unit(1, "ok"), *unit(2, "ok")], policy), memory=pinned
    )
    assert served_tokens(clipped) > policy.budget_tokens
    kept = fit_fallback(clipped, fresh, policy)
    assert kept.memory == pinned and kept.handoff is None
    assert served_tokens(kept) <= policy.budget_tokens
    assert served_tokens(replace(kept, memory=fresh)) <= policy.budget_tokens  # room for either
    messages = list(task)
    for n in range(12):
        messages += unit(n, f"step {n} output " * 300)
    big = replace(transcript(messages, policy), memory=pinned)
    fitted = fit_fallback(big, fresh, policy)
    assert fitted.handoff is not None and fitted.memory == fresh
    assert served_tokens(fitted) <= policy.budget_tokens
