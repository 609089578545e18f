"""The compaction job: load -> plan (pure) -> commit -> record. Plain functions; Celery is in tasks.py.

load     the session, its snapshot and tail, a /compact request, the prepared summary, the
         version the epoch was first served at (observing memory from the new turns first)
plan     pure: the pinned memory block, the prompt as served (thinking kept where its prefix is
         the one it was produced on), the quiet point, epochs.step (structural layers, the summary
         switch), the snapshot to publish (a rewrite drops the thinking after its first change)
         and the summary to keep pending
commit   virtual files, the snapshot (version-guarded), the pending summary, the cached prompt
record   counters, summarizer usage, the /compact request's answer, the log line
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson
import structlog

from worker.cache.compact_requests import CompactRequest
from worker.cache.prompts import Entry
from worker.compaction import epochs
from worker.compaction.assemble import assemble, prefix_tokens, served_tokens, turn_policy
from worker.compaction.codec import transcript_from_json, transcript_to_json
from worker.compaction.epochs import (
    Decision,
    Switch,
    common_prefix_bytes,
    covered_through,
    extend,
    rewrites_top,
)
from worker.compaction.model import Policy, Transcript
from worker.compaction.ports import SummaryResult
from worker.compaction.quiet import why_not_quiet
from worker.compaction.thinking import binds_thinking, kept_after_rewrite, strip_all, strip_through
from worker.errors import SessionLocked
from worker.flows.observe import observe_memory
from worker.flows.serve import entry_from_prompt, request_prefix
from worker.metrics import epoch_cause, record_job, record_publish, record_usage
from worker.resources import Resources
from worker.session_stats import snapshot_kind
from worker.store import snapshots
from worker.store.db import read_tx
from worker.store.files import save_files
from worker.store.tables import utcnow
from worker.summarizers import Backoff, Watched, cost_usd

log = structlog.get_logger("compactd.jobs")
# A summary that failed transiently (the API down through the summarizer's own retries) is tried
# again by the job itself: 1 s, 2 s, 4 s... capped at 2 min, 8 times (~4 min); then the beat sweep
# tries it at its own pace while the session stays idle. A permanent failure (HTTP 400, a broken
# response) waits for the next append.
SUMMARY_RETRY = Backoff(base_seconds=1.0, max_seconds=120.0)
SUMMARY_RETRY_ATTEMPTS = 8
NOTHING_TO_SUMMARIZE = (
    "nothing to summarize: no settled turns between the first user message and the newest ones"
    " that a handoff note would shrink"
)


def compact(
    tenant_id: int,
    session_pk: int,
    seen_version: int,
    res: Resources,
    on_summary_failed: Callable[[], object] | None = None,
) -> str:
    """Compact the session's latest version and publish a snapshot unless a newer one won.

    Coalesced, not debounced: the job runs as soon as a worker is free and never gives up because
    newer turns arrived (the next append sends the next job). Idempotent per (session,
    through_seq): a duplicate delivery finds the snapshot current. `seen_version` is the version
    that sent the job (logged only). Returns what happened: gone, current, published or stale.
    When the summarizer failed transiently the structural result is published all the same and
    `on_summary_failed` is called (the task schedules a retry: no append may ever come).
    """
    token = res.cache.claims.lock(session_pk, res.settings.lock_seconds)
    if token is None:
        raise SessionLocked(session_pk)
    started, outcome = time.monotonic(), "error"
    try:
        # from here on an append sends a new job: this one may load before its turn lands
        res.cache.claims.release_job_claim(session_pk)
        watched = Watched(res.summarizer) if res.summarizer is not None else None
        outcome = run_job(tenant_id, session_pk, res, watched)
    finally:
        res.cache.claims.unlock(session_pk, token)
        record_job(res.cache, outcome, time.monotonic() - started)
    if watched is not None and watched.failed_transiently and on_summary_failed is not None:
        on_summary_failed()
    return outcome


def summary_retry_delay(attempt: int, jitter: float) -> float | None:
    """Seconds before retry number `attempt` (0-based) of a failed summary, None once given up;
    `jitter` is uniform in [0, 1)."""
    if attempt >= SUMMARY_RETRY_ATTEMPTS:
        return None
    return SUMMARY_RETRY.delay_seconds(attempt, None, jitter)


def summary_failed(report: str | None) -> str | None:
    """How the summary of a snapshot's job failed ("transient", "permanent"), from its report."""
    if not report:
        return None
    value = orjson.loads(report).get("summary_failed")
    return value if isinstance(value, str) else None


def run_job(tenant_id: int, session_pk: int, res: Resources, summarizer: Watched | None) -> str:
    """One job, under the session's lock: load -> plan -> commit -> record; returns the outcome."""
    loaded = snapshots.load(res.engine, session_pk, res.settings.memory_budget_tokens)
    if loaded is None or loaded.session.tenant_id != tenant_id:
        return "gone"
    request = res.cache.compact_requests.pending(session_pk)  # a user-driven /compact, if any
    cold = is_cold(loaded.session, res.settings.cache_ttl_seconds, utcnow())
    # a prepared summary may be due at this quiet point; a rewrite may be free with the cache cold
    if (
        is_current(loaded, forced=request is not None)
        and not cold
        and not res.cache.pending.exists(session_pk)
    ):
        return "current"
    job = replace(load(res, session_pk, loaded, request), cold=cold)
    plan = plan_job(job, summarizer)
    published = commit(res, tenant_id, session_pk, job, plan)
    if published is None:
        if request is not None and plan.step.switch is not Switch.FORCED:
            # nothing new to publish (the snapshot was current): the /compact is still answered
            _answer_request(res, session_pk, request, plan)
        log.info("snapshot.stale", epoch=plan.epoch, through_seq=plan.through_seq)
        return "stale"
    record(res, session_pk, job, plan, published)
    return "published"


# -- load ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobInput:
    """Everything a job's plan is a function of."""

    loaded: snapshots.Loaded  # the session row, its latest snapshot, the tail, memory rendered now
    state: Transcript  # the published snapshot's state (loaded.state(), decoded once)
    policy: Policy  # the session's policy (its window and output reserve)
    request: CompactRequest | None = None  # a user-driven /compact, if any
    pending: Transcript | None = None  # the summary an earlier job prepared, if any
    # the version the published epoch was first served at (prompts.served_from; None: not served
    # yet, or not known): its tail turns up to it answer an earlier prompt
    served_from: int | None = None
    cold: bool = False  # idle past the provider's cache lifetime: a rewrite costs no write (is_cold)


def is_cold(session: Any, default_ttl_seconds: float, now: Any) -> bool:
    """Whether the provider's prompt cache has expired for the session: no append (so no model
    call) for longer than its lifetime (the client's `ttl`, else the default)."""
    ttl = session.cache_ttl_seconds or default_ttl_seconds
    return bool((now - session.last_append_at).total_seconds() > ttl)


def is_current(loaded: snapshots.Loaded, *, forced: bool) -> bool:
    """Whether the published snapshot already covers every turn and memory change (and its summary
    is not to be tried again): nothing to do unless a prepared summary waits in the cache."""
    row, snap = loaded.session, loaded.snapshot
    return (
        not forced
        and snap is not None
        and snap.through_seq >= row.version
        and snap.memory_version >= row.memory_version
        and summary_failed(snap.report) != "transient"  # its summary is to be tried again
    )


def load(
    res: Resources, session_pk: int, loaded: snapshots.Loaded, request: CompactRequest | None
) -> JobInput:
    """What the plan needs, with working memory first observed from the new turns (off the request
    path; the next user turn's memory note shows it)."""
    state = loaded.state()
    if observe_memory(res, session_pk, loaded.current(state).turns, loaded.session.memory_observed_through):
        loaded = snapshots.with_fresh_memory(res.engine, loaded, res.settings.memory_budget_tokens)
    row = loaded.session
    raw = res.cache.pending.state(session_pk)
    epoch = loaded.snapshot.epoch if loaded.snapshot is not None else 0
    return JobInput(
        loaded=loaded,
        state=state,
        policy=res.policy_for(row.context_window, row.output_reserve),
        request=request,
        pending=transcript_from_json(orjson.loads(raw)) if raw else None,
        served_from=0 if epoch == 0 else res.cache.prompts.served_from(session_pk, epoch),
    )


# -- plan (pure) --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What one job publishes and keeps, decided from a JobInput alone."""

    step: epochs.Step  # the engine's decision (structural layers, the summary switch)
    publish: Transcript  # the snapshot state to publish (its memory block refreshed or kept)
    epoch: int
    new_epoch: bool  # a new epoch, or the system prompt changed (the prefix is rewritten)
    summarized: bool  # a handoff note was switched in
    system_changed: bool
    pinned_version: int  # the memory version the published block renders
    # the memory version its prompt shows after a publish that summarized or rendered the block
    # (the notes it archived are gone: the next one says everything since the block); None: as is
    noted_version: int | None
    through_seq: int
    waiting: str  # why this is not a quiet point ("" when it is)
    tokens_before: int
    report: dict[str, Any]
    keep_pending: Transcript | None  # a summary prepared here, to store as the next epoch's prompt
    drop_pending: bool  # the prepared summary was used, or is stale
    prompt: dict[str, Any]  # `publish` assembled, as the snapshot stores it
    tokens: int  # what `publish` serves

    @property
    def kind(self) -> str:
        return snapshot_kind("new_epoch" if self.new_epoch else "", str(self.step.switch), self.summarized)


def refreshes_memory(*, new_epoch: bool, rewrote_top: bool, system_changed: bool) -> bool:
    """Whether a publish renders the pinned memory block afresh: only when the prefix is rewritten
    from the top anyway (a new system prompt, a summary that folded or began the notes:
    `rewrote_top`). A structural epoch, or a summary stacked on the earlier notes
    (`epochs.stacks_notes`), rewrites only after them: refreshing the block there would make the
    provider cache the whole prompt again, and drop every thinking block. The changes since the
    block ride in the user turns' memory notes. One rule for the job and the replay simulator."""
    return system_changed or (new_epoch and rewrote_top)


def job_policy(policy: Policy, current: Transcript, fresh_memory: str) -> Policy:
    """The policy a job compacts the turns with: room for the larger of the pinned and the fresh
    memory block (a new epoch may render the memory as it is now). One rule for the job and the
    replay simulator (worker/flows/simulate.py)."""
    return turn_policy(policy, max(current, replace(current, memory=fresh_memory), key=prefix_tokens))


def served_state(
    state: Transcript, loaded: snapshots.Loaded, pinned: str, served_from: int | None
) -> Transcript:
    """What the published epoch serves now, as a transcript: its snapshot, the tail, the session's
    system prompt and the pinned block; to a model that binds thinking, the tail's thinking only
    from the version the epoch was first served at (the prompt the job's rewrite is measured from)."""
    row = loaded.session
    tail = strip_through(loaded.tail, served_from) if binds_thinking(row.model) else loaded.tail
    return replace(extend(state, tail), system=row.system, memory=pinned)


def plan_job(job: JobInput, summarizer: Watched | None = None) -> Plan:
    """The job's decision, a function of what was loaded (and the summarizer's answer)."""
    loaded, request = job.loaded, job.request
    row, snap, state = loaded.session, loaded.snapshot, job.state
    system_changed = snap is not None and state.system != row.system
    pinned, pinned_version = loaded.pinned(state)
    current = served_state(state, loaded, pinned, job.served_from)
    binds = binds_thinking(row.model)
    engine_policy = replace(job_policy(job.policy, current, loaded.memory), binds_thinking=binds)
    waiting = why_not_quiet(current, busy=row.activity == "busy")
    s = epochs.step(
        current,
        engine_policy,
        pending=job.pending,
        quiet=not waiting,
        # a user's /compact runs at the next quiet point (never mid tool call, never per busy append)
        force=request is not None and not waiting,
        focus=(request.focus if request else None) or None,
        summarizer=summarizer,
        cold=job.cold,
    )
    new_epoch = s.verdict.decision is Decision.NEW_EPOCH
    epoch = (snap.epoch if snap else 0) + (1 if new_epoch or system_changed else 0)
    summarized = s.publish.handoff != current.handoff
    publish, refreshed = shaped(current, s, loaded, system_changed=system_changed, binds=binds)
    pinned_version = row.memory_version if refreshed else pinned_version
    return Plan(
        step=s,
        publish=publish,
        epoch=epoch,
        new_epoch=new_epoch or system_changed,
        summarized=summarized,
        system_changed=system_changed,
        pinned_version=pinned_version,
        noted_version=pinned_version if summarized or refreshed else None,
        through_seq=loaded.tail[-1].seq if loaded.tail else (snap.through_seq if snap else 0),
        waiting=waiting,
        tokens_before=s.verdict.tokens_before + prefix_tokens(current),
        report={
            "decision": str(s.verdict.decision),
            "switch": str(s.switch),
            "stages": [r.as_dict() for r in s.reports],
            "error": s.error,
            "summary_failed": _failure(s.error, summarizer),
        },
        # a prepared summary is the next epoch's prompt: it carries the memory block as rendered now
        # (and, a rewrite from near the top, no thinking, to a model that binds it)
        keep_pending=_pending_prompt(replace(s.pending, memory=loaded.memory), binds)
        if s.pending is not None and s.prepared
        else None,
        drop_pending=s.pending is None,
        prompt=assemble(publish),
        tokens=served_tokens(publish),
    )


def shaped(
    current: Transcript, s: epochs.Step, loaded: snapshots.Loaded, *, system_changed: bool, binds: bool
) -> tuple[Transcript, bool]:
    """The snapshot a step publishes: its memory block rendered afresh by the job's rule (and
    whether it was), its thinking as the rewrite serves it to a model that binds thinking (a new
    system prompt rewrote the top: no block is on its own prefix any more)."""
    publish = s.publish
    refreshed = refreshes_memory(
        new_epoch=s.verdict.decision is Decision.NEW_EPOCH,
        rewrote_top=rewrites_top(current, s),
        system_changed=system_changed,
    )
    if refreshed:
        publish = replace(publish, memory=loaded.memory)
    if binds:
        publish = strip_all(publish) if system_changed else kept_after_rewrite(current, publish)
    return publish, refreshed


def _pending_prompt(pending: Transcript, binds: bool) -> Transcript:
    return strip_all(pending) if binds else pending


def _failure(error: str | None, summarizer: Watched | None) -> str | None:
    """The report's "summary_failed": None (no failure), "transient" (to retry) or "permanent"."""
    if error is None:
        return None
    return "transient" if summarizer is not None and summarizer.failed_transiently else "permanent"


# -- commit -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    """A publish that won: the cached prompt entry and the one it replaced."""

    entry: Entry
    replaced: Entry | None


def commit(res: Resources, tenant_id: int, session_pk: int, job: JobInput, plan: Plan) -> Published | None:
    """Persist the plan: virtual files, the snapshot (None when a newer one won), the pending
    summary, then the cached prompt. The database is the truth; the cache is best effort."""
    loaded, row = job.loaded, job.loaded.session
    if plan.step.files:
        save_files(res.engine, tenant_id, session_pk, plan.step.files)
    prompt, tokens = plan.prompt, plan.tokens
    won = snapshots.publish(
        res.engine,
        session_pk,
        epoch=plan.epoch,
        through_seq=plan.through_seq,
        tokens=tokens,
        memory_version=row.memory_version,
        pinned_memory_version=plan.pinned_version,
        state=transcript_to_json(plan.publish),
        prompt=prompt,
        report=plan.report,
        kind=plan.kind,
        last_turn_hash=loaded.last_turn_hash,
        noted_memory_version=plan.noted_version,
    )
    if not won and _rewritten(res, session_pk, plan.through_seq, loaded.last_turn_hash):
        # an append redacted the turn this job read last (a secret cut across two appends): what
        # this job prepared holds the old text
        res.cache.pending.drop(session_pk)
    else:  # a summary prepared here is kept even if the snapshot itself was already current
        _keep_pending(res, session_pk, plan, row.memory_version)
    if not won:
        return None
    entry = entry_from_prompt(
        prompt, epoch=plan.epoch, through=plan.through_seq, memver=row.memory_version, tokens=tokens
    )
    published = Published(entry, res.cache.prompts.get(session_pk))
    try:
        res.cache.prompts.put(session_pk, entry)
    except Exception as exc:  # the DB has it; fetches fall back to the DB until the next publish
        log.warning("cache.publish_failed", error=type(exc).__name__)
    return published


def _rewritten(res: Resources, session_pk: int, seq: int, loaded_hash: str) -> bool:
    with read_tx(res.engine) as conn:
        return snapshots.turn_hash(conn, session_pk, seq) != loaded_hash


def _keep_pending(res: Resources, session_pk: int, plan: Plan, memver: int) -> None:
    """Store a summary prepared by this job (its files are saved), or drop one that was used or is
    stale."""
    if plan.drop_pending:
        res.cache.pending.drop(session_pk)
        return
    pending = plan.keep_pending
    if pending is None:
        return
    entry = entry_from_prompt(
        assemble(pending),
        epoch=plan.epoch + 1,
        through=covered_through(pending),
        memver=memver,
        tokens=served_tokens(pending),
    )
    res.cache.pending.put(session_pk, orjson.dumps(transcript_to_json(pending)), entry)


# -- record -------------------------------------------------------------------------------------


def record(res: Resources, session_pk: int, job: JobInput, plan: Plan, published: Published) -> None:
    """Side records of a publish: cache reuse, summarizer usage, the /compact answer, counters, log."""
    s, loaded = plan.step, job.loaded
    _account(res, session_pk, published, s)
    if job.request is not None:
        _answer_request(res, session_pk, job.request, plan)
    res.cache.counters.count(f"compactions_{s.verdict.decision}")
    if s.switch is not Switch.NONE:
        res.cache.counters.count(f"switches_{s.switch}")
        res.cache.counters.count_switch(session_pk, str(s.switch))
        log.info("epoch.switched", reason=str(s.switch), epoch=plan.epoch, through_seq=plan.through_seq)
    if s.verdict.decision is Decision.NEW_EPOCH:
        res.cache.counters.count("tokens_saved", max(0, s.verdict.saved_tokens))
    record_publish(
        res,
        session_pk,
        first_new_seq=loaded.tail[0].seq if loaded.tail else None,
        cause=epoch_cause(s.verdict.decision is Decision.NEW_EPOCH, plan.summarized, plan.system_changed),
        tokens_before=plan.tokens_before,
        tokens_after=plan.tokens,
    )
    log.info(
        "session.compacted",
        decision=str(s.verdict.decision),
        switch=str(s.switch),
        prepared=s.prepared,
        epoch=plan.epoch,
        through_seq=plan.through_seq,
        quiet=not plan.waiting,
        tokens_before=plan.tokens_before,
        tokens_after=plan.tokens,
        budget_tokens=job.policy.budget_tokens,
        stages=plan.report["stages"],
        summarizer_error=s.error,
    )


def _account(res: Resources, session_pk: int, published: Published, s: epochs.Step) -> None:
    """The cache-reuse base and summarizer usage."""
    old, entry = published.replaced, published.entry
    if old is not None and old.epoch != entry.epoch:
        shared = common_prefix_bytes(request_prefix(old), request_prefix(entry))
        res.cache.counters.record_shared_prefix(session_pk, entry.epoch, shared)
    handoff = s.pending.handoff if s.pending is not None else s.publish.handoff
    if s.prepared and handoff is not None and handoff.input_tokens:
        usage = SummaryResult(handoff.text, handoff.input_tokens, handoff.output_tokens, handoff.summarizer)
        cost = cost_usd(usage)
        res.cache.counters.add_usage(session_pk, handoff.input_tokens, handoff.output_tokens, cost)
        record_usage(res.cache, handoff.input_tokens, handoff.output_tokens, cost)


def _answer_request(res: Resources, session_pk: int, request: CompactRequest, plan: Plan) -> None:
    """Record a /compact request's outcome: still pending (and why), done at `epoch`, or skipped."""
    requests, s = res.cache.compact_requests, plan.step
    if plan.waiting:
        requests.wait(session_pk, plan.waiting)
    elif s.switch is Switch.FORCED:
        requests.finish(session_pk, request, "done", plan.epoch, "a handoff note was switched in")
    else:
        reason = f"the summarizer failed: {s.error}" if s.error else NOTHING_TO_SUMMARIZE
        requests.finish(session_pk, request, "skipped", plan.epoch, reason)
        log.info("compact_request.skipped", epoch=plan.epoch, reason=reason)
