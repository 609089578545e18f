"""Retention: sessions past COMPACTD_RETENTION_DAYS go, with their cached prompts."""

from __future__ import annotations

from datetime import timedelta

import structlog

from worker.resources import Resources
from worker.store import snapshots
from worker.store.tables import utcnow

log = structlog.get_logger("compactd.jobs")


def expire_sessions(res: Resources) -> int:
    """Delete the sessions idle past the retention period and drop their cached prompts; returns how many."""
    pks = snapshots.expire(res.engine, utcnow() - timedelta(days=res.settings.retention_days))
    for pk in pks:
        res.cache.drop(pk)
    if pks:
        log.info("sessions.expired", sessions=len(pks))
    return len(pks)
