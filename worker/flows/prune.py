"""Pruning working memory: plan every session's removals, apply each while its items are as
planned, expire the memory of sessions that are gone; once per period when scheduled."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from worker.cache.runs import Runs
from worker.contracts import Enqueue
from worker.memory.model import Item, MemoryOpError
from worker.memory.prune import Merge, Removal, Step, period, plan
from worker.resources import Resources
from worker.store import memory
from worker.store.tables import utcnow

log = structlog.get_logger("compactd.jobs")


@dataclass(frozen=True, slots=True)
class SessionPrune:
    """What pruning does to one session's memory: its steps, each with its reason, and the items
    they were planned from (each removal applies only while what it depends on is still so)."""

    session_pk: int
    tenant_id: int
    client_id: str
    steps: tuple[Step, ...]
    items: tuple[Item, ...] = ()

    def depends_on(self, steps: Sequence[Step]) -> list[Item]:
        """The items `steps` were planned from: each removed item and what a merge keeps."""
        named = {(s.section, s.key) for s in steps} | {
            (s.section, s.into) for s in steps if isinstance(s, Merge)
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
        steps = plan(
            items,
            now=now,
            budget_tokens=s.memory_budget_tokens,
            retire_after_days=s.memory_retire_after_days,
        )
        if steps:
            out.append(SessionPrune(pk, tenant_id, client_id, tuple(steps), tuple(items)))
    return out


def prune_now(res: Resources, now: datetime | None = None, enqueue: Enqueue | None = None) -> dict[str, int]:
    """Prune every session's memory once, now: each removal recorded in its history with its reason
    (origin "prune"), then the memory of deleted or expired sessions goes (not recorded: the session
    is gone). A removal applies only while its items are as planned (checked in its transaction);
    one changed meanwhile (reopened, edited, referenced) stays until the next run. A pruned session's
    prompt keeps its pinned block (its next user turn notes the change) and, with `enqueue`, a
    compaction is sent to catch its snapshot up."""
    now = now or utcnow()
    removed = merged = sessions = 0
    for planned in prune_plans(res, now):
        done = _prune_session(res, planned, now)
        if not done:
            continue
        sessions += 1
        merged += sum(isinstance(step, Merge) for step in done)
        removed += sum(isinstance(step, Removal) for step in done)
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


def _prune_session(res: Resources, planned: SessionPrune, now: datetime) -> list[Step]:
    """Apply a session's plan, one transaction per reason; a reason whose items changed since the
    plan falls back to one step at a time, skipping (and logging) each step whose items changed."""
    by_reason: dict[str, list[Step]] = {}
    for step in planned.steps:
        by_reason.setdefault(step.reason, []).append(step)
    done: list[Step] = []
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
    start, length = period(
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
