"""HeldJobs: compaction jobs an append asks for, sent once the edge's answer is on its way."""

from __future__ import annotations

import threading

import structlog

from worker.contracts import Enqueue

log = structlog.get_logger("compactd.api")


class HeldJobs:
    """An Enqueue that holds the compaction jobs a request's appends ask for until `release()`
    (the edge calls it once the answer is on its way: after POST /turns' response, after the first
    event a proxied call relays), then passes every later one through.

    The job compacts for the next request; this one is answered from what is stored, so its
    enqueue (a Redis claim, a broker publish) and the worker it wakes need not come before the
    answer. Nothing is lost: the turns are committed before, and a job not sent (release never
    reached, Redis down) is the beat sweep's.
    """

    def __init__(self, enqueue: Enqueue) -> None:
        self._enqueue = enqueue
        self._held: list[tuple[int, int, int]] = []
        self._released = False
        self._lock = threading.Lock()

    def __call__(self, tenant_id: int, session_pk: int, version: int) -> None:
        with self._lock:
            if not self._released:
                self._held.append((tenant_id, session_pk, version))
                return
        self._enqueue(tenant_id, session_pk, version)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def take(self) -> list[tuple[int, int, int]]:
        """Stop holding: the held jobs (tenant, session pk, version), in order, for the caller to send."""
        with self._lock:
            self._released = True
            held, self._held = self._held, []
        return held

    def release(self) -> None:
        """Send the held jobs (in order) and stop holding; an enqueue that fails is logged, not raised."""
        for tenant_id, session_pk, version in self.take():
            try:
                self._enqueue(tenant_id, session_pk, version)
            except Exception as exc:
                log.warning(
                    "compaction.enqueue_failed",
                    tenant_id=tenant_id,
                    session_pk=session_pk,
                    error=type(exc).__name__,
                )
