"""Jobs: load -> compact -> save with a version guard. Plain functions; Celery lives in tasks.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import orjson
import structlog

from worker.compaction import pipeline
from worker.compaction.assemble import assemble
from worker.compaction.codec import transcript_from_json, transcript_to_json
from worker.compaction.epochs import Decision, common_prefix_bytes, decide, extend
from worker.compaction.model import Transcript
from worker.compaction.ports import SummaryResult
from worker.compaction.validate import pending_tool_use_ids
from worker.errors import SessionLocked
from worker.resources import Resources
from worker.store import memory, snapshots
from worker.store.cache import Entry
from worker.store.db import read_tx
from worker.store.files import file_infos, save_files
from worker.store.prompts import entry_from_prompt, refresh_status_files, request_prefix
from worker.store.tables import utcnow
from worker.summarizers import cost_usd

log = structlog.get_logger("compactd.jobs")


def compact(tenant_id: int, session_pk: int, seen_version: int, res: Resources) -> str:
    """Compact one session if it is still at seen_version; publish a snapshot unless a newer one won.

    Idempotent per (session, through_seq): a duplicate delivery finds the snapshot current.
    Returns what happened: gone, superseded, current, published or stale.
    """
    token = res.cache.acquire(session_pk, res.settings.lock_seconds)
    if token is None:
        raise SessionLocked(session_pk)
    try:
        return _compact(tenant_id, session_pk, seen_version, res)
    finally:
        res.cache.release(session_pk, token)


def _compact(tenant_id: int, session_pk: int, seen_version: int, res: Resources) -> str:
    loaded = snapshots.load(res.engine, session_pk)
    if loaded is None or loaded.session.tenant_id != tenant_id:
        return "gone"
    row, snap = loaded.session, loaded.snapshot
    if row.version > seen_version:
        return "superseded"  # a newer append queued its own job
    through = snap.through_seq if snap else 0
    focus = res.cache.compaction_request(session_pk)  # a user-driven /compact, if one is pending
    forced = focus is not None
    if (
        not forced
        and snap is not None
        and through >= row.version
        and snap.memory_version >= row.memory_version
    ):
        return "current"
    policy = res.policy_for(row.context_window, row.output_reserve)
    state = (
        transcript_from_json(orjson.loads(snap.state)) if snap else Transcript(system=row.system, turns=())
    )
    current = replace(extend(state, loaded.tail), system=row.system, memory=loaded.memory)
    idle = (utcnow() - row.last_append_at).total_seconds() >= res.settings.idle_seconds
    pending = pending_tool_use_ids([t.as_message() for t in current.turns[-1:]])
    # a user's /compact needs no debounce, but never interrupts a tool call or a busy client
    quiet = (idle or forced) and row.activity != "busy" and not pending
    result = pipeline.compact(
        current, policy, quiet=quiet, force=forced and quiet, focus=focus or None, summarizer=res.summarizer
    )
    verdict = decide(current, result.transcript, policy)
    if forced and quiet and verdict.decision is Decision.SKIP:
        verdict = replace(verdict, decision=Decision.NEW_EPOCH)  # the user asked: publish even a small saving
    epoch = snap.epoch if snap else 0
    if verdict.decision is Decision.NEW_EPOCH:
        new, epoch = replace(result.transcript, files=()), epoch + 1
        save_files(res.engine, tenant_id, session_pk, result.transcript.files)
    else:
        new = current
        if snap is not None and (state.memory != loaded.memory or state.system != row.system):
            epoch += 1  # the system prompt and memory block are the prefix: it changed, so a new epoch
    new_through = loaded.tail[-1].seq if loaded.tail else through
    prompt = assemble(new)
    reports = [r.as_dict() for r in result.reports]
    won = snapshots.publish(
        res.engine,
        session_pk,
        epoch=epoch,
        through_seq=new_through,
        tokens=new.tokens(),
        memory_version=row.memory_version,
        state=transcript_to_json(new),
        prompt=prompt,
        report={"decision": str(verdict.decision), "stages": reports, "error": result.error},
    )
    if not won:
        log.info("snapshot.stale", epoch=epoch, through_seq=new_through)
        return "stale"
    with read_tx(res.engine) as conn:
        files = file_infos(conn, session_pk)
    entry = entry_from_prompt(
        prompt, epoch=epoch, through=new_through, memver=row.memory_version, tokens=new.tokens(), files=files
    )
    _account(res, session_pk, entry, result, forced and quiet)
    try:
        res.cache.put(session_pk, entry)
        # a file read logged while this ran is missing from `files`: bring the list up to date
        refresh_status_files(res.engine, res.cache, session_pk)
    except Exception as exc:  # the DB has it; fetches fall back to the DB until the next publish
        log.warning("cache.publish_failed", error=type(exc).__name__)
    res.cache.count(f"compactions_{verdict.decision}")
    if verdict.decision is Decision.NEW_EPOCH:
        res.cache.count("tokens_saved", max(0, verdict.saved_tokens))
    log.info(
        "session.compacted",
        decision=str(verdict.decision),
        epoch=epoch,
        through_seq=new_through,
        quiet=quiet,
        tokens_before=verdict.tokens_before,
        tokens_after=new.tokens(),
        stages=reports,
        summarizer_error=result.error,
    )
    return "published"


def _account(res: Resources, session_pk: int, entry: Entry, result: pipeline.Compacted, forced: bool) -> None:
    """Side records of a publish: the cache-reuse base, summarizer usage, a served /compact request."""
    old = res.cache.get(session_pk)
    if old is not None and old.epoch != entry.epoch:
        shared = common_prefix_bytes(request_prefix(old), request_prefix(entry))
        res.cache.record_shared_prefix(session_pk, entry.epoch, shared)
    handoff = result.transcript.handoff
    summarized = any(r.stage == "Summarize" and r.counts.get("turns_evicted") for r in result.reports)
    if summarized and handoff is not None and handoff.input_tokens:
        usage = SummaryResult(handoff.text, handoff.input_tokens, handoff.output_tokens, handoff.summarizer)
        res.cache.add_usage(session_pk, handoff.input_tokens, handoff.output_tokens, cost_usd(usage))
    if forced:
        res.cache.clear_compaction_request(session_pk)


def sweep(res: Resources, enqueue: Callable[[int, int, int], object]) -> int:
    """Enqueue compaction for idle sessions whose snapshot misses turns or memory (a lost message)."""
    idle_before = utcnow() - timedelta(seconds=res.settings.idle_seconds)
    behind = snapshots.behind(res.engine, idle_before)
    for tenant_id, pk, version in behind:
        enqueue(tenant_id, pk, version)
    if behind:
        log.info("sweep.enqueued", sessions=len(behind))
    return len(behind)


def prune_memory(res: Resources) -> int:
    dropped = memory.prune(res.engine, res.settings.memory_budget_tokens)
    log.info("memory.pruned", items=dropped)
    return dropped


def expire(res: Resources) -> int:
    pks = snapshots.expire(res.engine, utcnow() - timedelta(days=res.settings.retention_days))
    for pk in pks:
        res.cache.drop(pk)
    if pks:
        log.info("sessions.expired", sessions=len(pks))
    return len(pks)
