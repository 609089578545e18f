"""An append's Redis work on the event loop's connection (api/http/guard.py), no thread hop: its
version noted before the answer and, in the same round trip, the compaction job it asks for
claimed; the job is sent after the answer, and only when claimed here (a broker publish, in a
thread). Measured on an append of a typical turn: the claim in a thread after the answer was a
quarter of the API's CPU (BENCHMARKS.md, session 11).

A claim taken here whose send never runs (the process ends between the answer and the send, or
Redis, broker too, stops answering after it took the claim) holds the session's job for
JOB_CLAIM_SECONDS; the beat sweep and the next append after it catch up, as for any job never
sent. Over TLS the guard's round trips block the event loop (guard.py): on an append, the key
check's and this one.
"""

from __future__ import annotations

from typing import Any

import redis
from fastapi import Request
from starlette.background import BackgroundTask

from api.http.guard import Guard
from api.http.threads import in_thread
from worker.enqueue import CeleryEnqueue
from worker.flows.held_jobs import HeldJobs
from worker.resources import Resources
from worker.store.sessions import Appended

# (tenant, session pk, version, claimed here: True, or None when Redis did not say)
Send = tuple[int, int, int, bool | None]


async def settle(request: Request, appended: Appended, jobs: HeldJobs) -> BackgroundTask | None:
    """The note and the claims before the answer; what runs after it (None: nothing). A sender
    that does not claim (a test's, an embedded one) gets the held jobs after the answer, as is."""
    res: Resources = request.app.state.resources
    sender = request.app.state.enqueue
    celery = sender if isinstance(sender, CeleryEnqueue) else None
    commands = [] if appended.replayed else [note_command(res, appended)]
    held: list[tuple[int, int, int]] = []
    if celery is not None:
        held = jobs.take()
        commands += [celery.claim_command(pk) for _, pk, _ in held]
    guard: Guard = request.app.state.guard
    replies = await guard.replies(commands) if commands else []
    if celery is None:
        return BackgroundTask(in_thread, jobs.release) if jobs.holding else None
    answers = (
        [None] * len(held) if replies is None else [_claimed(r) for r in replies[len(replies) - len(held) :]]
    )
    sends: list[Send] = [
        (*job, claimed) for job, claimed in zip(held, answers, strict=True) if claimed is not False
    ]
    return BackgroundTask(in_thread, _send, celery, sends) if sends else None


def note_command(res: Resources, appended: Appended) -> tuple[Any, ...]:
    """note_version as one command: what a fetch served without the database must cover."""
    return res.cache.prompts.note_version_command(
        appended.session_pk, appended.version, appended.context_window, appended.output_reserve
    )


def _claimed(reply: Any) -> bool | None:
    """SET NX's reply: OK, claimed here; nil, a job waits already; an error, not known."""
    return None if isinstance(reply, redis.ResponseError) else reply is not None


def _send(enqueue: CeleryEnqueue, sends: list[Send]) -> None:
    for tenant_id, session_pk, version, claimed in sends:
        enqueue.after_claim(tenant_id, session_pk, version, claimed)
