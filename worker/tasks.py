"""Celery tasks: thin wrappers with explicit names; the work is in worker/flows/."""

from __future__ import annotations

import random
from typing import Any

import structlog
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.worker.request import Request
from celery.worker.state import task_ready
from kombu.exceptions import DecodeError
from structlog.contextvars import bound_contextvars

from worker.celery_app import app, resources
from worker.enqueue import enqueue_compaction, shares_broker
from worker.errors import SessionLocked, TransientError
from worker.flows import append as appending
from worker.flows import compact as compaction
from worker.flows.expire import expire_sessions
from worker.flows.prune import prune_memory as prune_scheduled
from worker.flows.sweep import sweep_sessions

# A job that finds its session locked waits for the running one: briefly, it has newer turns to add.
LOCKED_RETRY_SECONDS = 0.25
LOCKED_MAX_SECONDS = 2.0
LOCKED_MAX_RETRIES = 200  # past lock_seconds (120 s) at 2 s a try: the lock has expired by then
# An enqueued append waits out a database outage this long (backoff to 60 s a try), then is recorded
# as rejected rather than retried forever.
APPEND_MAX_RETRIES = 30
# An append cut off by the soft time limit rolled back; it is tried this many more times (a loaded
# machine, a cold process), then recorded as rejected: too slow for the limit, not lost.
SLOW_APPEND_MAX_RETRIES = 3
SOFT_LIMIT_CUTS = "compactd_soft_limit_cuts"  # a message header: the cuts so far, kept across retries

log = structlog.get_logger("compactd.tasks")


class AppendRequest(Request):  # type: ignore[misc]
    """An append's message, requeued when the soft time limit cuts the pool process off while it
    decodes the message, before the task runs (kombu's `DecodeError(SoftTimeLimitExceeded())`):
    the task's own handler cannot see that cut, and Celery would ack the message and lose it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        exc = getattr(exc_info.exception, "exc", exc_info.exception)  # ExceptionWithTraceback
        if isinstance(exc, DecodeError) and any(isinstance(a, SoftTimeLimitExceeded) for a in exc.args):
            task_ready(self)
            log.warning("append.cut_while_decoding", task_id=self.id)
            self.reject(requeue=True)
            return
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)


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
        delay = compaction.summary_retry_delay(summary_attempt, random.random())
        if delay is None:
            log.warning("summary.retries_exhausted", attempts=summary_attempt)
            return
        log.info("summary.retry_scheduled", attempt=summary_attempt + 1, countdown=round(delay, 2))
        compact.apply_async(
            (tenant_id, session_id, seen_version), {"summary_attempt": summary_attempt + 1}, countdown=delay
        )

    with bound_contextvars(task_id=self.request.id, tenant_id=tenant_id, session_id=session_id):
        try:
            return compaction.compact(tenant_id, session_id, seen_version, resources(), retry_summary)
        except SessionLocked as exc:
            # SessionLocked is transient but not autoretried (dont_autoretry_for): it waits here,
            # briefly at first, then backing off to 2 s (the running job may be an LLM summary)
            countdown = min(LOCKED_MAX_SECONDS, LOCKED_RETRY_SECONDS * 2**self.request.retries)
            raise self.retry(exc=exc, countdown=countdown, max_retries=LOCKED_MAX_RETRIES) from exc


@app.task(name="compactd.sweep", bind=True)
def sweep(self: Task) -> int:
    with bound_contextvars(task_id=self.request.id):
        return sweep_sessions(resources(), lambda t, s, v: compact.apply_async((t, s, v)))


@app.task(name="compactd.prune_memory", bind=True)
def prune_memory(self: Task) -> dict[str, Any] | None:
    # beat sends one message per period; a second beat's message finds the period claimed
    with bound_contextvars(task_id=self.request.id):
        # a pruned session's prompt is republished with its new memory, like after an API change
        return prune_scheduled(resources(), lambda t, s, v: compact.apply_async((t, s, v)))


@app.task(name="compactd.expire", bind=True)
def expire(self: Task) -> int:
    with bound_contextvars(task_id=self.request.id):
        return expire_sessions(resources())


@app.task(
    name="compactd.append",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    Request=AppendRequest,
)
def append(self: Task, *args: Any, **message: Any) -> dict[str, Any]:
    """Append turns sent by another service (kwargs: api_key, session_id, body, idempotency_key?,
    activity?), with the HTTP append's validation, redaction and idempotency (worker/flows/append.py).

    Acked only when done, and requeued if its worker dies or the soft time limit cuts it off while
    its message is decoded (AppendRequest): a message is stored once or recorded as rejected. A
    database outage and a cut by the soft time limit are retried, each kind with its own budget
    (Celery's default of 3 retries is off: max_retries=None); the task id is the idempotency key,
    so a retry of an append that was stored is a replay.
    """
    task_id = str(self.request.id)
    session_id = str(message.get("session_id", ""))[:200]
    cuts = int(getattr(self.request, SOFT_LIMIT_CUTS, 0) or 0)
    with bound_contextvars(task_id=task_id, session_id=session_id):
        res = resources()
        try:
            if args:
                return appending.reject(res, task_id, None, session_id, "send keyword arguments only")
            try:
                return appending.append_enqueued(res, message, task_id=task_id, enqueue=_enqueue_compaction)
            except TransientError as exc:
                outages = self.request.retries - cuts
                if outages >= APPEND_MAX_RETRIES:
                    reason = f"gave up after {APPEND_MAX_RETRIES} retries: {exc}"
                    return appending.reject(res, task_id, None, session_id, reason)
                countdown = min(60, 2**outages)
                raise self.retry(exc=exc, countdown=countdown, headers={SOFT_LIMIT_CUTS: cuts}) from exc
        except SoftTimeLimitExceeded as exc:  # anywhere above, the outage handler included
            soft = res.settings.task_time_limit_seconds
            if cuts >= SLOW_APPEND_MAX_RETRIES:
                reason = f"cut off by the soft time limit {cuts + 1} times (TASK_TIME_LIMIT_SECONDS={soft})"
                return appending.reject(res, task_id, None, session_id, reason)
            log.warning("append.soft_time_limit", cuts=cuts + 1)
            raise self.retry(exc=exc, countdown=1 + cuts, headers={SOFT_LIMIT_CUTS: cuts + 1}) from exc


def _enqueue_compaction(tenant_id: int, session_pk: int, version: int) -> None:
    """Make sure one compaction job is pending for the session, as the API does after an append."""
    res = resources()
    enqueue_compaction(
        res.cache,
        session_pk,
        lambda: compact.apply_async((tenant_id, session_pk, version)),
        shared_broker=shares_broker(res.settings),
    )
