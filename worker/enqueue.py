"""Enqueue: make sure one compaction job is pending for a session (ids only). The one way the API,
the CLI and the tasks send a compaction, so a broker or Redis outage fails the same way for all.

Coalesced, not debounced: while a job waits (its claim in Redis, JOB_CLAIM_SECONDS), appends send
nothing more. A failed send releases the claim and is logged; the beat sweep catches up.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from worker.cache.cache import Cache
from worker.cache.claims import JOB_CLAIM_SECONDS
from worker.celery_app import sender
from worker.resources import Resources, broker_url, redis_url
from worker.settings import Settings

log = structlog.get_logger("compactd.api")


def shares_broker(settings: Settings) -> bool:
    """Whether the Celery broker is the cache's Redis (then a Redis outage is a broker outage too)."""
    return broker_url(settings) == redis_url(settings)


def enqueue_compaction(
    cache: Cache, session_pk: int, send: Callable[[], object], *, shared_broker: bool
) -> None:
    """Claim the session's pending job and `send()` it; nothing when a job is pending already."""
    claimed = cache.claims.claim_job(session_pk, JOB_CLAIM_SECONDS)
    send_if_claimed(cache, session_pk, claimed, send, shared_broker=shared_broker)


def send_if_claimed(
    cache: Cache, session_pk: int, claimed: bool | None, send: Callable[[], object], *, shared_broker: bool
) -> None:
    """enqueue_compaction once its claim is answered: True, claimed here (sent); False, a job is
    pending already (nothing); None, Redis did not answer (sent, unless Redis is the broker too)."""
    if claimed is None and shared_broker:
        # Redis is down and it is the broker too: sending would only wait out its timeouts.
        # The turns are committed; the beat sweep compacts the session once Redis is back.
        log.warning("compaction.enqueue_skipped", session_id=session_pk, reason="redis_unavailable")
        return
    if claimed is False:
        return
    try:
        send()
    except Exception as exc:
        cache.claims.release_job_claim(session_pk)
        log.warning("compaction.enqueue_failed", session_id=session_pk, error=type(exc).__name__)


class CeleryEnqueue:
    """Enqueue from a process that only sends tasks (the API, the CLI): its own Celery sender and
    connection pool. `close()` (or `with`) releases the broker connections."""

    def __init__(self, settings: Settings, res: Resources) -> None:
        self.settings, self.res = settings, res
        self.celery = sender(settings)
        # its own connections, not kombu's process-wide pool, so close() can release them
        self.pool = self.celery.connection_for_write().Pool(limit=self.celery.conf.broker_pool_limit)
        self.shared_broker = shares_broker(settings)

    def __call__(self, tenant_id: int, session_pk: int, version: int) -> None:
        send = partial(self._send, tenant_id, session_pk, version)
        enqueue_compaction(self.res.cache, session_pk, send, shared_broker=self.shared_broker)

    def claim_command(self, session_pk: int) -> tuple[Any, ...]:
        """The job's claim as one Redis command, for a caller that sends it itself (the API, on its
        event loop's connection); then `after_claim` with the answer."""
        return self.res.cache.claims.claim_job_command(session_pk, JOB_CLAIM_SECONDS)

    def after_claim(self, tenant_id: int, session_pk: int, version: int, claimed: bool | None) -> None:
        """What __call__ does once claim_command is answered (see send_if_claimed)."""
        send = partial(self._send, tenant_id, session_pk, version)
        send_if_claimed(self.res.cache, session_pk, claimed, send, shared_broker=self.shared_broker)

    def _send(self, tenant_id: int, session_pk: int, version: int) -> None:
        with self.pool.acquire(block=True) as connection:
            self.celery.send_task(
                "compactd.compact",
                args=[tenant_id, session_pk, version],
                queue=self.settings.queue,
                retry=False,
                connection=connection,
            )

    def close(self) -> None:
        self.pool.force_close_all()
        self.celery.close()

    def __enter__(self) -> CeleryEnqueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
