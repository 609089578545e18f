"""The compaction job's plan, table-tested without Redis or SQL: rows and snapshots are plain objects."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from worker.compaction.assemble import prefix_tokens, turn_policy
from worker.compaction.codec import transcript_to_json
from worker.compaction.epochs import Decision
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.quiet import is_quiet, why_not_quiet
from worker.compaction.thinking import has_thinking
from worker.compaction.tokens import count_message, count_text
from worker.flows.compact import JobInput, plan_job
from worker.store.snapshots import Loaded

# a small window so a few kilobytes of tool output cross the structural trigger
POLICY = Policy(context_window=20_000, output_reserve=1_000)


def turn(seq: int, role: str, *blocks: dict[str, Any]) -> Turn:
    content = tuple(blocks)
    return Turn(seq=seq, role=role, content=content, tokens=count_message(content))  # type: ignore[arg-type]


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def tool_use(i: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"cmd": "ls"}}


def tool_result(i: int, body: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"t{i}", "content": body}


def chat(n: int, *, big: bool = False, in_flight: bool = False) -> list[Turn]:
    """n tool rounds after a first user message; `big` outputs cross the structural trigger."""
    body = " ".join(f"line{j} of output with some words in it" for j in range(900 if big else 3))
    turns = [turn(1, "user", text("fix the build"))]
    for i in range(n):
        turns.append(turn(len(turns) + 1, "assistant", text("running"), tool_use(i)))
        turns.append(turn(len(turns) + 1, "user", tool_result(i, body)))
    if in_flight:
        turns.append(turn(len(turns) + 1, "assistant", tool_use(n)))
    return turns


def job(
    tail: list[Turn],
    *,
    snapshot_state: Transcript | None = None,
    epoch: int = 0,
    system: str = "you are helpful",
    activity: str = "idle",
    memory: str = "",
    memory_version: int = 0,
    pinned_version: int = 0,
    request: Any = None,
    model: str = "claude-opus-5-5",
    served_from: int | None = 0,
    policy: Policy = POLICY,
) -> JobInput:
    row = SimpleNamespace(
        tenant_id=1,
        version=tail[-1].seq if tail else 0,
        memory_version=memory_version,
        activity=activity,
        system=system,
        context_window=None,
        output_reserve=None,
        model=model,
    )
    snap = None
    if snapshot_state is not None:
        snap = SimpleNamespace(
            through_seq=snapshot_state.turns[-1].seq if snapshot_state.turns else 0,
            epoch=epoch,
            memory_version=pinned_version,
            pinned_memory_version=pinned_version,
            report=None,
            state=orjson.dumps(transcript_to_json(snapshot_state)),
        )
    loaded = Loaded(session=row, snapshot=snap, tail=tail, memory=memory)
    return JobInput(
        loaded=loaded, state=loaded.state(), policy=policy, request=request, served_from=served_from
    )


QUIET_CASES = [
    # (turns, busy, waiting for)
    ([], False, ""),
    (chat(1), False, ""),
    (chat(1), True, "busy"),
    (chat(1, in_flight=True), False, "tool call"),
    (chat(1, in_flight=True), True, "tool call"),  # the tool call is named first
    ([turn(1, "assistant", text("done"))], False, ""),
]


@pytest.mark.parametrize(("turns", "busy", "waiting"), QUIET_CASES)
def test_the_quiet_point_rule(turns: list[Turn], busy: bool, waiting: str) -> None:
    """A quiet point is no tool call in flight and a client not busy; the reason names which."""
    t = Transcript(system="", turns=tuple(turns))
    reason = why_not_quiet(t, busy=busy)
    assert (waiting in reason) if waiting else reason == ""
    assert is_quiet(t, busy=busy) is (not waiting)


PLAN_CASES = [
    # (name, job, decision, epoch, waiting)
    ("a small first publish extends epoch 0", job(chat(2)), Decision.EXTEND, 0, ""),
    ("big tool outputs are clipped into a new epoch", job(chat(4, big=True)), Decision.NEW_EPOCH, 1, ""),
    ("a busy client is no quiet point", job(chat(2), activity="busy"), Decision.EXTEND, 0, "busy"),
    (
        "a tool call in flight is no quiet point",
        job(chat(2, in_flight=True)),
        Decision.EXTEND,
        0,
        "tool call",
    ),
    (
        "a new system prompt starts a new epoch",
        job(chat(2)[2:], snapshot_state=Transcript(system="old", turns=tuple(chat(2)[:2])), epoch=3),
        None,
        4,
        "",
    ),
]


@pytest.mark.parametrize(
    ("name", "given", "decision", "epoch", "waiting"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES]
)
def test_plan(name: str, given: JobInput, decision: Decision | None, epoch: int, waiting: str) -> None:
    """The plan's decision, epoch and quiet point follow from what was loaded alone."""
    plan = plan_job(given)
    if decision is not None:
        assert plan.step.verdict.decision is decision
    assert plan.epoch == epoch
    assert (waiting in plan.waiting) if waiting else plan.waiting == ""
    assert plan.through_seq == given.loaded.tail[-1].seq
    assert plan.tokens <= plan.tokens_before or plan.step.verdict.decision is not Decision.NEW_EPOCH
    assert plan.drop_pending and plan.keep_pending is None  # no summarizer: nothing prepared
    assert plan.report["decision"] == str(plan.step.verdict.decision)


def test_a_new_system_prompt_refreshes_the_pinned_memory() -> None:
    """When the system prompt changed, the published block is the memory as rendered now, and the
    next memory note starts from it."""
    state = Transcript(system="old", turns=tuple(chat(1)), memory="## memory v1")
    plan = plan_job(
        job(chat(2)[3:], snapshot_state=state, memory="## memory v2", memory_version=2, pinned_version=1)
    )
    assert plan.system_changed and plan.new_epoch
    assert plan.publish.memory == "## memory v2" and plan.pinned_version == 2 and plan.noted_version == 2


def test_without_a_rewrite_from_the_top_the_pinned_block_stays() -> None:
    """Without a new epoch the pinned block stays: the changes since it ride in the user turns'
    memory notes (the append's), and what the prompt shows is not reset."""
    state = Transcript(system="you are helpful", turns=tuple(chat(1)), memory="## memory v1")
    plan = plan_job(
        job(chat(2)[3:], snapshot_state=state, memory="## memory v2", memory_version=2, pinned_version=1)
    )
    assert not plan.new_epoch
    assert plan.publish.memory == "## memory v1" and plan.pinned_version == 1 and plan.noted_version is None


def test_a_compact_request_waits_for_a_quiet_point() -> None:
    """A user's /compact is not forced mid tool call: the plan says what it waits for."""
    request = SimpleNamespace(focus="")
    plan = plan_job(job(chat(2, in_flight=True), request=request))
    assert "tool call" in plan.waiting
    assert plan.step.switch.value != "forced"


def test_a_structural_epoch_keeps_the_pinned_block() -> None:
    """A new epoch from clipping (no summary) leaves the pinned block, and the cached prefix it
    starts, alone however much memory changed: the changes are in the turns' memory notes."""
    rounds = chat(4, big=True)
    state = Transcript(system="you are helpful", turns=tuple(rounds[:1]), memory="## memory v1")
    plan = plan_job(
        job(
            rounds[1:],
            snapshot_state=state,
            memory="## memory v2",
            memory_version=9,
            pinned_version=1,
            model="claude-sonnet-4-5",  # binds no thinking: past the trigger a clip is published as is
        )
    )
    assert plan.new_epoch and not plan.summarized
    assert plan.publish.memory == "## memory v1" and plan.pinned_version == 1 and plan.noted_version is None


def test_the_turns_budget_keeps_room_for_the_system_prompt_and_memory_block() -> None:
    """turn_policy takes the system prompt and the memory block from the turns' budget, nothing
    more: a fetch adds no note of its own."""
    t = Transcript(system="you are helpful", turns=tuple(chat(2)), memory="## memory")
    assert POLICY.budget_tokens - turn_policy(POLICY, t).budget_tokens == prefix_tokens(t)


def thinking(text_: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text_, "signature": f"sig-{text_}"}


def thoughtful(n: int, *, first_seq: int = 2, big: bool = False) -> list[Turn]:
    """n tool rounds whose assistant turns start with thinking."""
    body = " ".join(f"line{j} of output with some words in it" for j in range(900 if big else 3))
    turns: list[Turn] = []
    for i in range(n):
        seq = first_seq + 2 * i
        turns.append(turn(seq, "assistant", thinking(f"step {i}"), text("running"), tool_use(i)))
        turns.append(turn(seq + 1, "user", tool_result(i, body)))
    return turns


@pytest.mark.parametrize(
    ("served_from", "kept"),
    [(0, [2, 4, 6]), (3, [4, 6]), (7, []), (None, [])],
)
def test_an_extend_keeps_the_thinking_produced_since_the_epoch_was_first_served(
    served_from: int | None, kept: list[int]
) -> None:
    """The snapshot takes the tail as the epoch serves it: thinking only in the turns after the
    version it was first served at (None: not known, none)."""
    task = turn(1, "user", text("fix the build"))
    state = Transcript(system="you are helpful", turns=(task,))
    plan = plan_job(job(thoughtful(3), snapshot_state=state, epoch=2, served_from=served_from))
    assert plan.step.verdict.decision is not Decision.NEW_EPOCH
    assert [t.seq for t in plan.publish.turns if has_thinking(t)] == kept


def test_a_rewrite_drops_the_thinking_from_its_first_change_on() -> None:
    """A structural epoch keeps the thinking before its first clipped output, as served (the
    snapshot's, and the tail's after the version the epoch was first served at), and drops every
    block from there on: no kept block is left after a dropped one."""
    task = turn(1, "user", text("fix the build"))
    small = thoughtful(2)  # turns 2-5, nothing to clip
    rounds = thoughtful(6, first_seq=6, big=True)
    state = Transcript(system="you are helpful", turns=(task, *small))
    # a large window: the clip is published below the summarize trigger, where it pays for itself
    wide = Policy(context_window=200_000, output_reserve=1_000)
    plan = plan_job(job(rounds, snapshot_state=state, epoch=1, served_from=7, policy=wide))
    assert plan.new_epoch and not plan.summarized
    given = {t.seq: t for t in rounds}
    # the first output the epoch clipped
    first = next(
        t.seq for t in plan.publish.turns if t.role == "user" and t.seq in given and t != given[t.seq]
    )
    served = [2, 4, *(t.seq for t in rounds if t.role == "assistant" and t.seq > 7)]
    assert [t.seq for t in plan.publish.turns if has_thinking(t)] == [s for s in served if s < first]


def test_a_model_that_does_not_bind_thinking_keeps_it_all() -> None:
    """An older model checks no prefix: nothing is dropped, before or after a rewrite."""
    task = turn(1, "user", text("fix the build"))
    rounds = thoughtful(6, big=True)
    state = Transcript(system="you are helpful", turns=(task,))
    plan = plan_job(job(rounds, snapshot_state=state, epoch=1, served_from=None, model="claude-sonnet-4-5"))
    assert plan.new_epoch
    assert [t.seq for t in plan.publish.turns if has_thinking(t)] == [
        t.seq for t in rounds if has_thinking(t)
    ]


def test_a_new_system_prompt_drops_every_thinking_block() -> None:
    """A changed system prompt changes every block's prefix."""
    state = Transcript(system="old", turns=(turn(1, "user", text("fix the build")), *thoughtful(2)))
    plan = plan_job(job(thoughtful(1, first_seq=6), snapshot_state=state, epoch=1, served_from=0))
    assert plan.system_changed and not any(has_thinking(t) for t in plan.publish.turns)


def _rounds_after(first_seq: int, n: int) -> list[Turn]:
    """n tool rounds of ~600-token outputs (under the clip size: only a summary shrinks them)."""
    turns: list[Turn] = []
    for i in range(n):
        body = " ".join(f"row{j} value {i}" for j in range(200))  # no two alike: dedup keeps them
        turns.append(turn(first_seq + 2 * i, "assistant", text("running"), tool_use(i)))
        turns.append(turn(first_seq + 2 * i + 1, "user", tool_result(i, body)))
    return turns


@pytest.mark.parametrize(("earlier_notes", "forced"), [(True, False), (False, False), (True, True)])
def test_a_summary_stacked_on_the_earlier_notes_keeps_the_pinned_block(
    earlier_notes: bool, forced: bool
) -> None:
    """A summary round that keeps the earlier notes byte for byte (stacked) leaves the pinned block,
    and the prompt through those notes that the provider cached, alone; the next memory note
    starts from that block (the notes it archived are gone). The first summary (no notes to keep)
    and a user's /compact render it afresh."""
    from worker.compaction.model import Handoff

    task = turn(1, "user", text("fix the build"))
    note = "[compactd handoff note] Turns 2-3 are archived.\n## Files read\n- /src/a.py"
    handoff = Handoff(note, ("archive-1",), ((2, 3),), count_text(note)) if earlier_notes else None
    state = Transcript(system="you are helpful", turns=(task,), memory="## memory v1", handoff=handoff)
    plan = plan_job(
        job(
            _rounds_after(4, 30),
            snapshot_state=state,
            memory="## memory v2",
            memory_version=2,
            pinned_version=1,
            request=SimpleNamespace(focus="") if forced else None,
        )
    )
    assert plan.new_epoch and plan.summarized
    assert plan.publish.handoff is not None
    if earlier_notes:
        assert plan.publish.handoff.earlier == (note,)  # stacked, forced or not
    if earlier_notes and not forced:
        assert plan.publish.memory == "## memory v1" and plan.pinned_version == 1 and plan.noted_version == 1
    else:
        assert plan.publish.memory == "## memory v2" and plan.pinned_version == 2 and plan.noted_version == 2
