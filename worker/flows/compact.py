"""Jobs: load -> compact -> save with a version guard. Plain functions; Celery lives in tasks.py."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import orjson
import structlog

from worker.compaction import epochs
from worker.compaction.assemble import (
    MEMORY_NOTE_TOKENS,
    FileInfo,
    assemble,
    prefix_tokens,
    served_tokens,
    turn_policy,
)
from worker.compaction.codec import transcript_from_json, transcript_to_json
from worker.compaction.epochs import Decision, Switch, common_prefix_bytes
from worker.compaction.model import Transcript
from worker.compaction.ports import SummaryResult
from worker.compaction.tokens import count_text
from worker.compaction.validate import pending_tool_use_ids
from worker.errors import SessionLocked
from worker.memory import prune
from worker.memory.model import Item, MemoryOpError, clip_note
from worker.observing import observe_memory
from worker.resources import Resources
from worker.stats import snapshot_kind
from worker.stats_counters import epoch_cause, record_job, record_publish, record_usage
from worker.store import memory, snapshots
from worker.store.cache import Entry
from worker.store.compact_requests import CompactRequest
from worker.store.db import read_tx
from worker.store.files import file_infos, save_files
from worker.store.prompts import entry_from_prompt, refresh_status_files, request_prefix
from worker.store.runs import Runs
from worker.store.tables import utcnow
from worker.summarizers import Backoff, Watched, cost_usd

log = structlog.get_logger("compactd.jobs")
# A summary that failed transiently (the API down through the summarizer's own retries) is tried
# again by the job itself: 1 s, 2 s, 4 s... capped at 2 min, 8 times (~4 min); then the beat sweep
# tries it at its own pace while the session stays idle. A permanent failure (HTTP 400, a broken
# response) waits for the next append.
SUMMARY_RETRY = Backoff(base_seconds=1.0, max_seconds=120.0)
SUMMARY_RETRY_ATTEMPTS = 8
# the sweep's claim on a busy session it sends a job for, like an append's (api.app.JOB_CLAIM_SECONDS)
SWEEP_CLAIM_SECONDS = 30.0
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
    token = res.cache.acquire(session_pk, res.settings.lock_seconds)
    if token is None:
        raise SessionLocked(session_pk)
    started, outcome = time.monotonic(), "error"
    try:
        # from here on an append sends a new job: this one may load before its turn lands
        res.cache.release_job_claim(session_pk)
        watched = Watched(res.summarizer) if res.summarizer is not None else None
        outcome = _compact(tenant_id, session_pk, res, watched)
    finally:
        res.cache.release(session_pk, token)
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


def _compact(tenant_id: int, session_pk: int, res: Resources, summarizer: Watched | None) -> str:
    loaded = snapshots.load(res.engine, session_pk, res.settings.memory_budget_tokens)
    if loaded is None or loaded.session.tenant_id != tenant_id:
        return "gone"
    row, snap = loaded.session, loaded.snapshot
    through = snap.through_seq if snap else 0
    request = res.cache.compact_requests.pending(session_pk)  # a user-driven /compact, if any
    forced = request is not None
    if (
        not forced
        and snap is not None
        and through >= row.version
        and snap.memory_version >= row.memory_version
        and not res.cache.has_pending(session_pk)  # a prepared summary may be due at this quiet point
        and summary_failed(snap.report) != "transient"  # its summary is to be tried again
    ):
        return "current"
    state = loaded.state()
    # working memory observed from the new turns, off the request path; this publish shows it
    if observe_memory(res, session_pk, loaded.current(state).turns, row.memory_observed_through):
        loaded = snapshots.with_fresh_memory(res.engine, loaded, res.settings.memory_budget_tokens)
        row = loaded.session
    # the pinned memory block is the prompt's prefix: it stays as rendered at the epoch, and changes
    # since go to the status note, until this job starts a new epoch anyway (or the system changed)
    system_changed = snap is not None and state.system != row.system
    pinned, pinned_version = (loaded.memory, row.memory_version) if system_changed else loaded.pinned(state)
    current = loaded.current(state, memory=pinned)
    policy = res.policy_for(row.context_window, row.output_reserve)
    # budget for the larger of the two blocks: a new epoch renders the memory as it is now
    engine_policy = turn_policy(
        policy, max(current, replace(current, memory=loaded.memory), key=prefix_tokens)
    )
    pending_tool = pending_tool_use_ids([t.as_message() for t in current.turns[-1:]])
    # a quiet point: no tool call in flight and the client has not said it is busy
    quiet = row.activity != "busy" and not pending_tool
    s = epochs.step(
        current,
        engine_policy,
        pending=_pending(res, session_pk),
        quiet=quiet,
        # a user's /compact runs at the next quiet point (never mid tool call, never per busy append)
        force=forced and quiet,
        focus=(request.focus if request else None) or None,
        summarizer=summarizer,
    )
    verdict, publish = s.verdict, s.publish
    epoch = snap.epoch if snap else 0
    if s.files:
        save_files(res.engine, tenant_id, session_pk, s.files)
    new_epoch = verdict.decision is Decision.NEW_EPOCH
    if new_epoch or system_changed:
        epoch += 1
    note = ""  # unclipped: whether it still fits decides a refresh below
    if pinned_version < row.memory_version:  # else nothing changed since the pinned block
        with read_tx(res.engine) as conn:
            note = memory.changes_since(conn, session_pk, pinned_version, 1 << 30)
    # The pinned block is refreshed when the prefix is rewritten from the top anyway (a new system
    # prompt, a summary switched in), or at a new epoch once the changes outgrow the note. A
    # structural epoch rewrites only from its first changed turn: refreshing the block there would
    # make the provider cache the whole prompt again.
    summarized = publish.handoff != current.handoff
    if system_changed or (new_epoch and (summarized or count_text(note) > MEMORY_NOTE_TOKENS)):
        publish, pinned_version, note = replace(publish, memory=loaded.memory), row.memory_version, ""
    memory_note = clip_note(note, MEMORY_NOTE_TOKENS)
    new_through = loaded.tail[-1].seq if loaded.tail else through
    prompt = assemble(publish)
    tokens = served_tokens(publish)
    reports = [r.as_dict() for r in s.reports]
    won = snapshots.publish(
        res.engine,
        session_pk,
        epoch=epoch,
        through_seq=new_through,
        tokens=tokens,
        memory_version=row.memory_version,
        pinned_memory_version=pinned_version,
        state=transcript_to_json(publish),
        prompt=prompt,
        report={
            "decision": str(verdict.decision),
            "switch": str(s.switch),
            "stages": reports,
            "error": s.error,
            "summary_failed": _failure(s.error, summarizer),
        },
        kind=snapshot_kind("new_epoch" if new_epoch or system_changed else "", str(s.switch), summarized),
        last_turn_hash=loaded.last_turn_hash,
    )
    with read_tx(res.engine) as conn:
        files = file_infos(conn, session_pk)
    if not won and _rewritten(res, session_pk, new_through, loaded.last_turn_hash):
        # an append redacted the turn this job read last (a secret cut across two appends): what
        # this job prepared holds the old text
        res.cache.drop_pending(session_pk)
    else:  # a summary prepared here is kept even if the snapshot itself was already current
        _keep_pending(res, session_pk, s, epoch, row.memory_version, files, loaded.memory)
    if not won:
        if request is not None and s.switch is not Switch.FORCED:
            # nothing new to publish (the snapshot was current): the /compact is still answered
            _answer_request(res, session_pk, request, s, epoch, why_not_quiet(row.activity, pending_tool))
        log.info("snapshot.stale", epoch=epoch, through_seq=new_through)
        return "stale"
    entry = entry_from_prompt(
        prompt,
        epoch=epoch,
        through=new_through,
        memver=row.memory_version,
        tokens=tokens,
        files=files,
        memory_note=memory_note,
    )
    _account(res, session_pk, entry, s)
    if request is not None:
        _answer_request(res, session_pk, request, s, epoch, why_not_quiet(row.activity, pending_tool))
    try:
        res.cache.put(session_pk, entry)
        # a file read logged while this ran is missing from `files`: bring the list up to date
        refresh_status_files(res.engine, res.cache, session_pk)
    except Exception as exc:  # the DB has it; fetches fall back to the DB until the next publish
        log.warning("cache.publish_failed", error=type(exc).__name__)
    res.cache.count(f"compactions_{verdict.decision}")
    if s.switch is not Switch.NONE:
        res.cache.count(f"switches_{s.switch}")
        res.cache.count_switch(session_pk, str(s.switch))
        log.info("epoch.switched", reason=str(s.switch), epoch=epoch, through_seq=new_through)
    if verdict.decision is Decision.NEW_EPOCH:
        res.cache.count("tokens_saved", max(0, verdict.saved_tokens))
    tokens_before = verdict.tokens_before + prefix_tokens(current)
    record_publish(
        res,
        session_pk,
        first_new_seq=loaded.tail[0].seq if loaded.tail else None,
        cause=epoch_cause(new_epoch, summarized, system_changed),
        tokens_before=tokens_before,
        tokens_after=tokens,
    )
    log.info(
        "session.compacted",
        decision=str(verdict.decision),
        switch=str(s.switch),
        prepared=s.prepared,
        epoch=epoch,
        through_seq=new_through,
        quiet=quiet,
        tokens_before=tokens_before,
        tokens_after=tokens,
        budget_tokens=policy.budget_tokens,
        stages=reports,
        summarizer_error=s.error,
    )
    return "published"


def _failure(error: str | None, summarizer: Watched | None) -> str | None:
    """The report's "summary_failed": None (no failure), "transient" (to retry) or "permanent"."""
    if error is None:
        return None
    return "transient" if summarizer is not None and summarizer.failed_transiently else "permanent"


def _pending(res: Resources, session_pk: int) -> Transcript | None:
    """The summary an earlier job prepared for this session, if any."""
    raw = res.cache.pending_state(session_pk)
    return transcript_from_json(orjson.loads(raw)) if raw else None


def _rewritten(res: Resources, session_pk: int, seq: int, loaded_hash: str) -> bool:
    with read_tx(res.engine) as conn:
        return snapshots.turn_hash(conn, session_pk, seq) != loaded_hash


def _keep_pending(
    res: Resources,
    session_pk: int,
    s: epochs.Step,
    epoch: int,
    memver: int,
    files: Sequence[FileInfo],
    memory_block: str,
) -> None:
    """Store a summary prepared by this job (its files are saved), or drop one that was used or is
    stale. It is the next epoch's prompt: it carries the memory block as rendered now."""
    if s.pending is None:
        res.cache.drop_pending(session_pk)
        return
    if not s.prepared:
        return
    pending = replace(s.pending, memory=memory_block)
    through = pending.turns[-1].seq if pending.turns else 0
    entry = entry_from_prompt(
        assemble(pending),
        epoch=epoch + 1,
        through=through,
        memver=memver,
        tokens=served_tokens(pending),
        files=files,
    )
    res.cache.put_pending(session_pk, orjson.dumps(transcript_to_json(pending)), entry)


def _account(res: Resources, session_pk: int, entry: Entry, s: epochs.Step) -> None:
    """Side records of a publish: the cache-reuse base and summarizer usage."""
    old = res.cache.get(session_pk)
    if old is not None and old.epoch != entry.epoch:
        shared = common_prefix_bytes(request_prefix(old), request_prefix(entry))
        res.cache.record_shared_prefix(session_pk, entry.epoch, shared)
    handoff = s.pending.handoff if s.pending is not None else s.publish.handoff
    if s.prepared and handoff is not None and handoff.input_tokens:
        usage = SummaryResult(handoff.text, handoff.input_tokens, handoff.output_tokens, handoff.summarizer)
        cost = cost_usd(usage)
        res.cache.add_usage(session_pk, handoff.input_tokens, handoff.output_tokens, cost)
        record_usage(res.cache, handoff.input_tokens, handoff.output_tokens, cost)


def why_not_quiet(activity: str, pending_tool: Sequence[str]) -> str:
    """Why this is not a quiet point ("" when it is)."""
    if pending_tool:
        return "waiting for a quiet point: a tool call is waiting for its result"
    return "waiting for a quiet point: the client declared itself busy" if activity == "busy" else ""


def _answer_request(
    res: Resources, session_pk: int, request: CompactRequest, s: epochs.Step, epoch: int, waiting: str
) -> None:
    """Record a /compact request's outcome: still pending (and why), done at `epoch`, or skipped."""
    requests = res.cache.compact_requests
    if waiting:
        requests.wait(session_pk, waiting)
    elif s.switch is Switch.FORCED:
        requests.finish(session_pk, request, "done", epoch, "a handoff note was switched in")
    else:
        reason = f"the summarizer failed: {s.error}" if s.error else NOTHING_TO_SUMMARIZE
        requests.finish(session_pk, request, "skipped", epoch, reason)
        log.info("compact_request.skipped", epoch=epoch, reason=reason)


def sweep(res: Resources, enqueue: Callable[[int, int, int], object]) -> int:
    """Enqueue compaction for sessions the database shows need it, whatever Redis lost: idle
    sessions whose snapshot misses turns or memory (a lost message); busy ones too, unless a job is
    pending for them (their appends send jobs, but a lost one waits for its claim to expire); idle
    sessions whose summary failed transiently and has not been prepared since."""
    now = utcnow()
    idle_before = now - timedelta(seconds=res.settings.idle_seconds)
    idle = snapshots.behind(res.engine, idle_before)
    seen = {pk for _, pk, _ in idle}
    busy = [
        (tenant_id, pk, version)
        for tenant_id, pk, version in snapshots.behind(res.engine, now)
        if pk not in seen and res.cache.claim_job(pk, SWEEP_CLAIM_SECONDS)
    ]
    retry = [
        (tenant_id, pk, version)
        for tenant_id, pk, version in snapshots.summary_retry_due(res.engine, idle_before)
        if pk not in seen and not res.cache.has_pending(pk)
    ]
    for tenant_id, pk, version in [*idle, *busy, *retry]:
        enqueue(tenant_id, pk, version)
    sent = len(idle) + len(busy) + len(retry)
    if sent:
        log.info("sweep.enqueued", sessions=sent, idle=len(idle), busy=len(busy), summary_retry=len(retry))
    return sent


@dataclass(frozen=True, slots=True)
class SessionPrune:
    """What pruning does to one session's memory: its steps, each with its reason, and the items
    they were planned from (each removal applies only while what it depends on is still so)."""

    session_pk: int
    tenant_id: int
    client_id: str
    steps: tuple[prune.Step, ...]
    items: tuple[Item, ...] = ()

    def depends_on(self, steps: Sequence[prune.Step]) -> list[Item]:
        """The items `steps` were planned from: each removed item and what a merge keeps."""
        named = {(s.section, s.key) for s in steps} | {
            (s.section, s.into) for s in steps if isinstance(s, prune.Merge)
        }
        return [i for i in self.items if (i.section, i.key) in named]


def prune_plans(res: Resources, now: datetime | None = None) -> list[SessionPrune]:
    """What pruning would do to every session with working memory; writes nothing (--dry-run)."""
    now = now or utcnow()
    s = res.settings
    out = []
    for pk, tenant_id, client_id in memory.sessions_with_memory(res.engine):
        try:
            items = memory.load(res.engine, pk)
        except LookupError:
            continue  # deleted since it was listed
        steps = prune.plan(
            items,
            now=now,
            budget_tokens=s.memory_budget_tokens,
            retire_after_days=s.memory_retire_after_days,
        )
        if steps:
            out.append(SessionPrune(pk, tenant_id, client_id, tuple(steps), tuple(items)))
    return out


Enqueue = Callable[[int, int, int], object]


def prune_now(res: Resources, now: datetime | None = None, enqueue: Enqueue | None = None) -> dict[str, int]:
    """Prune every session's memory once, now: each removal recorded in its history with its reason
    (origin "prune"), then the memory of deleted or expired sessions goes (not recorded: the session
    is gone). A removal applies only while its items are as planned (checked in its transaction);
    one changed meanwhile (reopened, edited, referenced) stays until the next run. A pruned session's
    cached prompt is dropped and, with `enqueue`, a compaction sent to republish it."""
    now = now or utcnow()
    removed = merged = sessions = 0
    for planned in prune_plans(res, now):
        done = _prune_session(res, planned, now)
        if not done:
            continue
        sessions += 1
        merged += sum(isinstance(step, prune.Merge) for step in done)
        removed += sum(isinstance(step, prune.Removal) for step in done)
        res.cache.invalidate(planned.session_pk)
        if enqueue is not None:
            try:
                version = memory.version_of(res.engine, planned.session_pk)
            except LookupError:
                continue  # deleted meanwhile
            enqueue(planned.tenant_id, planned.session_pk, version)
    # a deleted or expired session's memory goes with it; what a crash or an older version left is swept here
    gone = memory.expire_orphans(res.engine)
    if gone:
        log.info("memory.expired", sessions=sorted(gone), items=sum(gone.values()))
    report = {
        "sessions": sessions,
        "removed": removed,
        "merged": merged,
        "expired_sessions": len(gone),
        "expired_items": sum(gone.values()),
    }
    log.info("memory.pruned", **report)
    return report


def _prune_session(res: Resources, planned: SessionPrune, now: datetime) -> list[prune.Step]:
    """Apply a session's plan, one transaction per reason; a reason whose items changed since the
    plan falls back to one step at a time, skipping (and logging) each step whose items changed."""
    by_reason: dict[str, list[prune.Step]] = {}
    for step in planned.steps:
        by_reason.setdefault(step.reason, []).append(step)
    done: list[prune.Step] = []
    for steps in by_reason.values():
        batches = [steps]
        while batches:
            batch = batches.pop(0)
            try:
                memory.change(
                    res.engine,
                    planned.session_pk,
                    [step.change for step in batch],
                    origin="prune",
                    reason=batch[0].reason,
                    now=now,
                    expect=planned.depends_on(batch),
                )
            except memory.MemoryChanged as exc:
                if len(batch) > 1:
                    batches = [[step] for step in batch] + batches
                    continue
                log.info("memory.prune_skipped_changed", session_id=planned.session_pk, items=exc.moved)
                continue
            except (MemoryOpError, LookupError) as exc:
                # gone or not applicable any more: the next run sees the new state
                log.warning("memory.prune_conflict", session_id=planned.session_pk, error=str(exc))
                continue
            done.extend(batch)
    return done


def prune_memory(res: Resources, enqueue: Enqueue | None = None) -> dict[str, Any] | None:
    """The scheduled prune: the first message of a period claims it in Redis and runs; any other
    (a second beat started by mistake, a redelivery) returns None. Each run is recorded."""
    started = utcnow()
    start, length = prune.period(
        started, every_seconds=res.settings.memory_prune_every_seconds, at=res.settings.memory_prune_at
    )
    runs = Runs(res.cache.client, res.settings.redis_prefix, "prune")
    if not runs.claim(start, length):
        runs.skipped()
        log.info("memory.prune_skipped", period=start.isoformat())
        return None
    try:
        report = prune_now(res, started, enqueue)
    except Exception:
        runs.release(start)
        raise
    run: dict[str, Any] = {
        "period": start.isoformat(),
        "started_at": started.isoformat(),
        "finished_at": utcnow().isoformat(),
    }
    run |= {"pid": os.getpid(), "host": socket.gethostname(), **report}
    runs.record(run)
    return run


def expire(res: Resources) -> int:
    pks = snapshots.expire(res.engine, utcnow() - timedelta(days=res.settings.retention_days))
    for pk in pks:
        res.cache.drop(pk)
    if pks:
        log.info("sessions.expired", sessions=len(pks))
    return len(pks)
