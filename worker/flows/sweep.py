"""The beat sweep: sessions the database shows need a compaction get one, whatever Redis lost."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import structlog

from worker.cache.claims import JOB_CLAIM_SECONDS
from worker.resources import Resources
from worker.store import snapshots
from worker.store.tables import utcnow

log = structlog.get_logger("compactd.jobs")


def sweep_sessions(res: Resources, enqueue: Callable[[int, int, int], object]) -> int:
    """Enqueue compaction for sessions the database shows need it, whatever Redis lost: idle
    sessions whose snapshot misses turns or memory (a lost message); busy ones too, unless a job is
    pending for them (their appends send jobs, but a lost one waits for its claim to expire); idle
    sessions whose summary failed transiently and has not been prepared since; sessions whose
    provider cache just expired (idle past its lifetime: a pending rewrite costs no cache write
    now, the job's `cold` rule)."""
    now = utcnow()
    idle_before = now - timedelta(seconds=res.settings.idle_seconds)
    idle = snapshots.behind(res.engine, idle_before)
    seen = {pk for _, pk, _ in idle}
    busy = [
        (tenant_id, pk, version)
        for tenant_id, pk, version in snapshots.behind(res.engine, now)
        if pk not in seen and res.cache.claims.claim_job(pk, JOB_CLAIM_SECONDS)
    ]
    retry = [
        (tenant_id, pk, version)
        for tenant_id, pk, version in snapshots.summary_retry_due(res.engine, idle_before)
        if pk not in seen and not res.cache.pending.exists(pk)
    ]
    seen |= {pk for _, pk, _ in [*busy, *retry]}
    # the sweep's interval and a half: each expiry falls in one sweep's window, or two at most
    window = 1.5 * res.settings.sweep_seconds
    cold = [
        c
        for c in snapshots.cooled(res.engine, now, res.settings.cache_ttl_seconds, window)
        if c[1] not in seen
    ]
    for tenant_id, pk, version in [*idle, *busy, *retry, *cold]:
        enqueue(tenant_id, pk, version)
    sent = len(idle) + len(busy) + len(retry) + len(cold)
    if sent:
        log.info(
            "sweep.enqueued",
            sessions=sent,
            idle=len(idle),
            busy=len(busy),
            summary_retry=len(retry),
            cache_cold=len(cold),
        )
    return sent
