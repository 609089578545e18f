"""Epochs: when a compaction result is worth publishing, and what the agent is served between them.

Between epochs the served prompt only grows at the end (the same prefix bytes, so a provider's
prompt cache keeps hitting). A new epoch rewrites the middle, so it must save enough to pay for
the cache it throws away: at least `worth_it_tokens`, and `worth_it_share` of the tokens it makes the
provider write to its cache again (from the first changed turn on), or the
prompt must be over the summarization trigger (it has to shrink, whatever the cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from worker.compaction.assemble import assemble, finish, prefix_tokens, turn_policy
from worker.compaction.fit import fit
from worker.compaction.model import FileWrite, Policy, StageReport, Transcript, Turn, canonical_json
from worker.compaction.pipeline import compact, summarized
from worker.compaction.ports import Summarizer
from worker.compaction.pricing import LOOKBACK_BLOCKS, READ_RATE, WRITE_RATE
from worker.compaction.thinking import THINKING, changed_from
from worker.compaction.zones import keep_start


class Decision(StrEnum):
    NEW_EPOCH = "new_epoch"  # publish the compacted transcript: the prefix changes
    EXTEND = "extend"  # nothing was rewritten: the snapshot just covers the new turns
    SKIP = "skip"  # a rewrite that saves too little; keep serving the old prefix plus the tail


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    tokens_before: int
    tokens_after: int

    @property
    def saved_tokens(self) -> int:
        return self.tokens_before - self.tokens_after


def decide(current: Transcript, compacted: Transcript, policy: Policy, *, cold: bool = False) -> Verdict:
    """Compare the served state (snapshot + tail, as a transcript) with a compaction of it. With
    `cold` the provider's cache has expired (the session idle past its lifetime): the next request
    writes the whole prompt anyway, so a rewrite costs no cache write of its own."""
    before, after = current.tokens(), compacted.tokens()
    if compacted.turns == current.turns and compacted.handoff == current.handoff:
        return Verdict(Decision.EXTEND, before, after)
    saved = before - after
    # past the trigger a rewrite must shrink the prompt, but one that saves less than
    # `shrink_min_tokens` waits for the summary the next quiet point switches in, unless past
    # the deadline (each rewrite loses the previous fetch's cached prefix); `step` sets the
    # minimum to 0 when no summary is pending
    # (at most a tenth of the budget: at small windows 5,000 tokens is much of the room)
    least = min(policy.shrink_min_tokens, policy.budget_tokens // 10)
    gain = saved >= least or before > policy.deadline_tokens
    must_shrink = before > policy.summarize_trigger_tokens and saved > 0 and gain
    rewritten = 0 if cold else rewritten_tokens(current, compacted)
    price = rewritten + invalidated_reasoning(current, compacted, policy)
    worth_it = (
        saved >= policy.worth_it_tokens
        and saved >= policy.worth_it_share * price
        and (not policy.binds_thinking or pays_back(current, compacted, policy, rewritten))
    )
    return Verdict(Decision.NEW_EPOCH if (must_shrink or worth_it) else Decision.SKIP, before, after)


def pays_back(current: Transcript, compacted: Transcript, policy: Policy, rewritten: int) -> bool:
    """Whether a rewrite below the summarize trigger pays for itself before the trigger's own
    rewrite comes, with a model that binds thinking: its saving, read from the cache at every
    request it has until then (the room left, at the session's recent pace), against the cache
    write of everything after its first change and the reasoning it cuts. A long runway (a large
    window) pays for an early clip; a short one (the trigger a few requests away) does not, and
    the trigger's rewrite, made deep (`deepens`), does the work once. `rewritten`: the tokens it
    makes the provider write again (0 when the cache has expired)."""
    saved = current.tokens() - compacted.tokens()
    requests = (policy.summarize_trigger_tokens - compacted.tokens()) / max(1, growth_per_request(current))
    benefit = saved * READ_RATE * max(1.0, requests)
    cost = rewritten * (WRITE_RATE - READ_RATE) + invalidated_reasoning(current, compacted, policy)
    return benefit >= cost


def growth_per_request(t: Transcript, recent: int = 20) -> float:
    """Tokens the prompt grows by per model call, at the pace of its newest turns (two a call)."""
    turns = t.turns[-recent:]
    return 2 * sum(turn.tokens for turn in turns) / len(turns) if turns else 1.0


def first_changed(current: Transcript, compacted: Transcript) -> int:
    """Index in current.turns of the first turn the compaction changed or removed (1 after a new
    handoff note: only the task before it stays; len(current.turns) when none changed)."""
    if compacted.handoff != current.handoff:
        return min(1, len(current.turns))
    new = {t.seq: t for t in compacted.turns}
    return next((i for i, t in enumerate(current.turns) if new.get(t.seq) != t), len(current.turns))


def fetch_boundaries(turns: Sequence[Turn], end: int) -> list[int]:
    """Indexes before `end` of user turns an assistant turn follows, newest first: a fetch ended
    with each (the agent fetches before every model call) and cached the prefix through it."""
    return [
        i
        for i in range(min(end, len(turns) - 1) - 1, -1, -1)
        if turns[i].role == "user" and turns[i + 1].role == "assistant"
    ]


def cache_mark(current: Transcript, compacted: Transcript) -> int:
    """Where a new epoch's first fetch reads the previous prompt: the last prefix before the first
    turn the compaction changed that the provider holds with this content. That is the newest of
    the fetch boundaries since the current epoch began and the current snapshot's own marks
    (written by every fetch since); 0: none."""
    turns, first = current.turns, first_changed(current, compacted)
    marks = {current.cache_mark, current.standing_mark} - {0}
    return next(
        (
            turns[i].seq
            for i in fetch_boundaries(turns, first)
            if turns[i].seq >= current.epoch_from or turns[i].seq in marks
        ),
        0,
    )


def standing_mark(compacted: Transcript, keep_tokens: int, after: int) -> int:
    """The breakpoint a snapshot keeps for the next epoch: the last fetch boundary before its keep
    window (the turns the next structural round leaves alone), if it comes after `after`; 0: none."""
    turns = compacted.turns
    seq = next((turns[i].seq for i in fetch_boundaries(turns, keep_start(turns, keep_tokens))), 0)
    return seq if seq > after else 0


def new_epoch(current: Transcript, compacted: Transcript, policy: Policy) -> Transcript:
    """The compacted transcript as a new epoch's snapshot: its breakpoints and where it began.

    With a handoff, the end of the notes is marked (the prefix the next summary round, stacked
    after them, reads) unless both other marks are needed: a read mark past the notes that the
    standing mark cannot look back to. A new summary round reads through the notes mark itself:
    the provider finds the earlier notes' prefix one block before it."""
    last = compacted.turns[-1].seq if compacted.turns else 0
    notes = compacted.handoff is not None
    task = compacted.turns[0].seq if compacted.turns else 0
    read = 0 if compacted.handoff != current.handoff else cache_mark(current, compacted)
    if notes and read == task:
        read = 0  # the notes end is a longer prefix than the task's
    keep = standing_mark(compacted, policy.keep_tokens, read) if policy.standing_breakpoint else 0
    if notes and keep == task:
        keep = 0  # likewise
    if notes and read and keep:
        if blocks_between(compacted.turns, read, keep) <= LOOKBACK_BLOCKS - 2:
            read = 0  # the standing mark finds it
        else:
            notes = False
    return replace(
        compacted, files=(), cache_mark=read, standing_mark=keep, epoch_from=last, notes_mark=notes
    )


def stacks_notes(current: Transcript, publish: Transcript) -> bool:
    """Whether a summary round kept the current notes byte for byte and stacked its own after them:
    the prompt through them (system, memory block, task, earlier notes) stays as the provider
    cached it, so a new epoch need not rewrite it from the top."""
    old, new = current.handoff, publish.handoff
    return old is not None and new is not None and new != old and new.notes[: len(old.notes)] == old.notes


def fit_fallback(current: Transcript, fresh_memory: str, policy: Policy) -> Transcript:
    """A fetch's `fit` (the worker has not kept up) under the job's memory rule: `current` holds the
    pinned block, which stays unless the fit's summary rewrites the prompt from the top (a first
    note or a fold-up): there the block is rendered afresh, as the worker's next epoch will do, so
    its prompt starts as this one did. Room is kept for the larger of the two blocks. One rule for
    the service (worker/flows/serve.py) and the replay simulator."""
    larger = max(current, replace(current, memory=fresh_memory), key=prefix_tokens)
    fitted = fit(current, turn_policy(policy, larger)).transcript
    return replace(fitted, memory=fresh_memory) if top_rewritten(current, fitted) else fitted


def rewrites_top(current: Transcript, s: Step) -> bool:
    """Whether a step's publish rewrites the prompt from its top (`top_rewritten`; a user's
    /compact is forced). The job and the replay simulator refresh the memory block by this rule."""
    return top_rewritten(current, s.publish, forced=s.switch is Switch.FORCED)


def top_rewritten(current: Transcript, publish: Transcript, *, forced: bool = False) -> bool:
    """Whether `publish` rewrites the prompt from its top: a new summary that does not stack on
    the current notes, or a forced one (a clean slate, stacked or not)."""
    summarized = publish.handoff != current.handoff
    return summarized and (forced or not stacks_notes(current, publish))


def blocks_between(turns: Sequence[Turn], after: int, through: int) -> int:
    """Content blocks of the turns with after < seq <= through (a provider looks back by blocks)."""
    return sum(len(t.content) for t in turns if after < t.seq <= through)


def invalidated_reasoning(current: Transcript, compacted: Transcript, policy: Policy) -> int:
    """What a rewrite costs in reasoning, with a model that binds thinking to its prefix and a
    session that thinks: the chain of thought is cut (every block from the first change on goes,
    and so does the one the model is producing on the prompt served now), and the model may think
    again what it lost: `reasoning_rewrite_tokens`, whatever the number of blocks (the recent ones
    are what a model builds on). 0 with a model that does not bind thinking, or no thinking."""
    if not policy.binds_thinking or changed_from(current, compacted) is None:
        return 0
    thinks = any(b.get("type") in THINKING for t in current.turns for b in t.content)
    return policy.reasoning_rewrite_tokens if thinks else 0


def rewritten_tokens(current: Transcript, compacted: Transcript) -> int:
    """Tokens of the current prompt from its first changed turn on: what the provider must write
    to its cache again (at 1.25x, instead of reading at 0.1x) if the compaction is published."""
    if compacted.handoff != current.handoff:
        return current.tokens()
    new = {t.seq: t for t in compacted.turns}
    for i, turn in enumerate(current.turns):
        if new.get(turn.seq) != turn:
            return sum(t.tokens for t in current.turns[i:])
    return 0


class Switch(StrEnum):
    """Why a prepared summary was switched in (or that it was not)."""

    NONE = ""
    QUIET = "quiet"  # past the summarize trigger, at a quiet point
    DEADLINE = "deadline"  # past the deadline: the next turns could overflow the budget
    FORCED = "forced"  # a user's /compact, at a quiet point
    COLD = "cold"  # the provider's cache expired while the session was idle: a rewrite costs no write


@dataclass(frozen=True, slots=True)
class Step:
    """What one compaction job publishes, and the next epoch it keeps prepared for later."""

    publish: Transcript  # the snapshot state to publish now
    verdict: Verdict
    pending: Transcript | None  # a summarized next epoch, prepared ahead, not switched in yet
    prepared: bool  # this job computed `pending` (its archive must be stored)
    switch: Switch
    files: tuple[FileWrite, ...]  # virtual files this job produced, for the job to persist
    reports: tuple[StageReport, ...]
    error: str | None = None


def step(
    current: Transcript,
    policy: Policy,
    *,
    pending: Transcript | None = None,
    quiet: bool,
    force: bool = False,
    focus: str | None = None,
    summarizer: Summarizer | None = None,
    cold: bool = False,
) -> Step:
    """One job's decision: structural layers on every run; past the pre-trigger a summary of the
    settled span is prepared (or the one prepared earlier is reused) and switched in at a quiet
    point past the trigger, at once past the deadline, or kept pending for later.

    `current` is the served state (snapshot + tail); `pending` a summary an earlier job prepared;
    `cold`: the provider's cache has expired (the session idle past its lifetime): a rewrite then
    costs no cache write of its own, so a prepared summary goes in at a quiet point, and a
    structural rewrite that saves `worth_it_tokens` is published.

    Long on purpose (~75 lines): the summary switch's whole decision (reuse, prepare, switch at a
    quiet point, at the deadline or forced, keep pending) in one place, table-tested in
    tests/unit/test_epochs.py.
    """
    structural = compact(current, policy)
    tokens = structural.tokens
    if force or (pending is not None and not advances(pending, current)):
        pending = None  # a forced round summarizes afresh, with its focus
    elif pending is not None and catch_up(pending, current).tokens() > policy.pretrigger_tokens:
        pending = None  # so many turns came since that switching it in would leave too little room: again
    prepared_files: tuple[FileWrite, ...] = ()
    error, reports = None, structural.reports
    over_turns = policy.turn_trigger > 0 and len(current.turns) > policy.turn_trigger
    if pending is None and (force or over_turns or tokens > policy.pretrigger_tokens):
        result = compact(
            current,
            policy,
            summarize=True,
            force=force,
            focus=focus,
            summarizer=summarizer,
            trigger_tokens=policy.pretrigger_tokens,
        )
        error, reports = result.error, result.reports
        if summarized(result):
            pending, prepared_files = replace(result.transcript, files=()), result.transcript.files
    prepared = bool(prepared_files)
    switch = _switch(tokens, policy, quiet=quiet, force=force, over_turns=over_turns, cold=cold)
    if pending is not None and switch is not Switch.NONE:
        after = compact(catch_up(pending, current), policy)
        new = new_epoch(current, after.transcript, policy)
        verdict = Verdict(Decision.NEW_EPOCH, current.tokens(), new.tokens())
        files = (*prepared_files, *after.transcript.files)
        return Step(
            publish=new,
            verdict=verdict,
            pending=None,
            prepared=prepared,
            switch=switch,
            files=files,
            reports=reports + after.reports,
            error=error,
        )
    # a small saving waits only for a summary that is on its way (none when summarizing failed)
    waits = policy if pending is not None else replace(policy, shrink_min_tokens=0)
    verdict = decide(current, structural.transcript, waits, cold=cold)
    if force and quiet and verdict.decision is Decision.SKIP:
        verdict = replace(verdict, decision=Decision.NEW_EPOCH)  # the user asked: even a small saving
    chosen = structural
    # never a second summarizer call in a job whose first failed (its retry is scheduled)
    if verdict.decision is Decision.NEW_EPOCH and error is None and deepens(verdict, policy, force=force):
        deep = compact(current, policy, summarize=True, force=True, summarizer=summarizer)
        if summarized(deep):
            chosen, verdict = deep, Verdict(Decision.NEW_EPOCH, verdict.tokens_before, deep.tokens)
            error, reports = deep.error, reports + deep.reports
    if verdict.decision is Decision.NEW_EPOCH:
        publish, files = (
            new_epoch(current, chosen.transcript, policy),
            (*prepared_files, *chosen.transcript.files),
        )
    else:
        publish, files = current, prepared_files
    return Step(
        publish=publish,
        verdict=verdict,
        pending=pending,
        prepared=prepared,
        switch=Switch.NONE,
        files=files,
        reports=reports,
        error=error,
    )


def deepens(verdict: Verdict, policy: Policy, *, force: bool) -> bool:
    """Whether a structural rewrite past the summarize trigger is made a summary down to the keep
    window instead: with a model that binds thinking every rewrite drops the reasoning after it, so
    one that leaves the most room is worth more than a clip that buys a round or two."""
    return policy.binds_thinking and not force and verdict.tokens_before > policy.summarize_trigger_tokens


def _switch(
    tokens: int, policy: Policy, *, quiet: bool, force: bool, over_turns: bool, cold: bool = False
) -> Switch:
    if force and quiet:
        return Switch.FORCED
    if cold and quiet:
        return Switch.COLD
    if quiet and (tokens > policy.summarize_trigger_tokens or over_turns):
        return Switch.QUIET
    if tokens > policy.deadline_tokens:
        return Switch.DEADLINE
    return Switch.NONE


def archived_through(t: Transcript) -> int:
    """The last seq a transcript's handoff note covers (0: none)."""
    return max((b for _, b in t.handoff.archived_seqs), default=0) if t.handoff else 0


def advances(pending: Transcript, current: Transcript) -> bool:
    """A prepared summary is still worth switching in: it covers more than the current note and
    none of its turns is newer than the current state."""
    last = pending.turns[-1].seq if pending.turns else 0
    newest = current.turns[-1].seq if current.turns else 0
    return archived_through(pending) > archived_through(current) and last <= newest


def covered_through(t: Transcript) -> int:
    """The newest seq a compacted transcript stands for, kept or archived: the turns after it are
    the ones appended since (a summary that keeps no turn but the task covers its archive)."""
    return max(t.turns[-1].seq if t.turns else 0, archived_through(t))


def catch_up(pending: Transcript, current: Transcript) -> Transcript:
    """A summary prepared earlier, plus the turns appended since, with the current system and memory."""
    last = covered_through(pending)
    newer = tuple(t for t in current.turns if t.seq > last)
    return replace(
        pending, system=current.system, memory=current.memory, turns=pending.turns + newer, files=()
    )


def extend(snapshot: Transcript, tail: Sequence[Turn]) -> Transcript:
    """The snapshot state plus turns appended after it."""
    return replace(snapshot, turns=snapshot.turns + tuple(tail), files=())


def served_request(snapshot: Transcript, tail: Sequence[Turn]) -> dict[str, Any]:
    """What a fetch returns as {system, messages}: the snapshot, the tail merged on, with the
    fetch's breakpoints."""
    request = assemble(snapshot)
    head, last = request["messages"][:-1], request["messages"][-1:]
    messages = head + finish([*last, *(t.as_message() for t in tail)])
    return {"system": request["system"], "messages": messages}


def shared_prefix_share(previous: bytes, current: bytes) -> float:
    """Share of `current` that repeats `previous` byte for byte from the start (what a cache reuses)."""
    return common_prefix_bytes(previous, current) / len(current) if current else 1.0


def common_prefix_bytes(previous: bytes, current: bytes) -> int:
    """How many leading bytes two byte strings share."""
    n = min(len(previous), len(current))
    lo, hi = 0, n
    while lo < hi:  # binary search on the common prefix: bytes compare in C
        mid = (lo + hi + 1) // 2
        if previous[:mid] == current[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def request_bytes(request: dict[str, Any]) -> bytes:
    """The request as a provider reads it for caching: system first, then messages, in order."""
    return (
        b'{"system":'
        + canonical_json(request["system"])
        + b',"messages":'
        + canonical_json(request["messages"])
        + b"}"
    )
