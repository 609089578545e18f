"""Celery tasks: thin wrappers with explicit names; the work is in worker/jobs.py."""

from __future__ import annotations

from typing import Any

from celery import Task
from structlog.contextvars import bound_contextvars

from worker import jobs
from worker.celery_app import app, resources
from worker.errors import SessionLocked, TransientError

# A job that finds its session locked waits for the running one: briefly, it has newer turns to add.
LOCKED_RETRY_SECONDS = 0.25
LOCKED_MAX_SECONDS = 2.0
LOCKED_MAX_RETRIES = 200  # past lock_seconds (120 s) at 2 s a try: the lock has expired by then


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
def compact(self: Task, tenant_id: int, session_id: int, seen_version: int) -> str:
    with bound_contextvars(task_id=self.request.id, tenant_id=tenant_id, session_id=session_id):
        try:
            return jobs.compact(tenant_id, session_id, seen_version, resources())
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
