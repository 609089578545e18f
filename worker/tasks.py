"""Celery tasks: thin wrappers with explicit names; the work is in worker/jobs.py."""

from __future__ import annotations

import random
from typing import Any

import structlog
from celery import Task
from structlog.contextvars import bound_contextvars

from worker import jobs
from worker.celery_app import app, resources
from worker.errors import SessionLocked, TransientError

# A job that finds its session locked waits for the running one: briefly, it has newer turns to add.
LOCKED_RETRY_SECONDS = 0.25
LOCKED_MAX_SECONDS = 2.0
LOCKED_MAX_RETRIES = 200  # past lock_seconds (120 s) at 2 s a try: the lock has expired by then

log = structlog.get_logger("compactd.tasks")


@app.task(
    name="compactd.compact",
    bind=True,
    acks_late=True,
    autoretry_for=(TransientError,),
    dont_autoretry_for=(SessionLocked,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=8,
)
def compact(self: Task, tenant_id: int, session_id: int, seen_version: int, summary_attempt: int = 0) -> str:
    def retry_summary() -> None:
        # a new message, not self.retry: the structural result is published and this one is done
        delay = jobs.summary_retry_delay(summary_attempt, random.random())
        if delay is None:
            log.warning("summary.retries_exhausted", attempts=summary_attempt)
            return
        log.info("summary.retry_scheduled", attempt=summary_attempt + 1, countdown=round(delay, 2))
        compact.apply_async(
            (tenant_id, session_id, seen_version), {"summary_attempt": summary_attempt + 1}, countdown=delay
        )

    with bound_contextvars(task_id=self.request.id, tenant_id=tenant_id, session_id=session_id):
        try:
            return jobs.compact(tenant_id, session_id, seen_version, resources(), retry_summary)
        except SessionLocked as exc:
            # SessionLocked is transient but not autoretried (dont_autoretry_for): it waits here,
            # briefly at first, then backing off to 2 s (the running job may be an LLM summary)
            countdown = min(LOCKED_MAX_SECONDS, LOCKED_RETRY_SECONDS * 2**self.request.retries)
            raise self.retry(exc=exc, countdown=countdown, max_retries=LOCKED_MAX_RETRIES) from exc


@app.task(name="compactd.sweep", bind=True)
def sweep(self: Task) -> int:
    with bound_contextvars(task_id=self.request.id):
        return jobs.sweep(resources(), lambda t, s, v: compact.apply_async((t, s, v)))


@app.task(name="compactd.prune_memory", bind=True)
def prune_memory(self: Task) -> dict[str, Any] | None:
    # beat sends one message per period; a second beat's message finds the period claimed
    with bound_contextvars(task_id=self.request.id):
        # a pruned session's prompt is republished with its new memory, like after an API change
        return jobs.prune_memory(resources(), lambda t, s, v: compact.apply_async((t, s, v)))


@app.task(name="compactd.expire", bind=True)
def expire(self: Task) -> int:
    with bound_contextvars(task_id=self.request.id):
        return jobs.expire(resources())
