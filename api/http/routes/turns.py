"""POST /v1/sessions/{sid}/turns: validated, redacted, counted, persisted in one transaction
(worker/flows/append.py, shared with the `compactd.append` task and `compactd import`)."""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, BackgroundTasks, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from api.http.deps import ResourcesDep, SenderDep, TenantDep
from api.http.errors import InvalidAppend
from api.http.routes.paths import SessionId
from api.http.schemas import AppendResponse
from worker.compaction.profiles import known_profile
from worker.contracts import Activity, AppendRequest
from worker.flows.append import BrokenConversation, Outcome, append_messages
from worker.flows.held_jobs import HeldJobs
from worker.limits import check_turn_sizes
from worker.resources import Resources
from worker.store.sessions import Appended, Profile

router = APIRouter(tags=["turns"])
log = structlog.get_logger("compactd.api")


@router.post("/v1/sessions/{sid}/turns", response_model=AppendResponse)
async def append(
    sid: SessionId,
    body: AppendRequest,
    request: Request,
    background: BackgroundTasks,
    res: ResourcesDep,
    tenant: TenantDep,
    enqueue: SenderDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    x_compactd_activity: Annotated[Activity | None, Header()] = None,
) -> Response:
    """Append messages; the session is created on first append. Retries with the same Idempotency-Key are safe."""
    # the compaction job goes out after the response (a Redis claim, now and then a broker publish):
    # the turns are committed first, and a job never sent is the beat sweep's (worker/flows/sweep.py)
    jobs = HeldJobs(enqueue)
    activity = x_compactd_activity.value if x_compactd_activity else None
    # one thread hop for the whole append (the database and Redis block); the answer is built here
    outcome = await run_in_threadpool(_store, res, tenant, sid, body, idempotency_key, activity, jobs)
    done = outcome.appended
    if jobs.holding:
        background.add_task(jobs.release)
    if not done.replayed:
        request.app.state.metrics.record_append(outcome.turns, outcome.redactions)
    answer = _answer(sid, tenant, body, outcome.profile, done, res.settings.context_window)
    # already validated: sent as is, not validated and encoded again by FastAPI (another thread hop)
    return Response(answer.model_dump_json(), media_type="application/json")


def _store(
    res: Resources,
    tenant: int,
    sid: str,
    body: AppendRequest,
    idempotency_key: str | None,
    activity: str | None,
    jobs: HeldJobs,
) -> Outcome:
    """The append itself, in a worker thread: size checks, then the flow (BrokenConversation as a 422)."""
    check_turn_sizes(body.messages, res.settings.max_turn_bytes)
    try:
        return append_messages(
            res, tenant, sid, body, idempotency_key=idempotency_key, activity=activity, enqueue=jobs
        )
    except BrokenConversation as exc:
        raise InvalidAppend(str(exc), problems=exc.problems) from None


def _answer(
    sid: str, tenant: int, body: AppendRequest, profile: Profile, done: Appended, default_window: int
) -> AppendResponse:
    """The append's response: where the turns landed and which window the session uses (warned when
    an unknown model name left it to the default)."""
    window = done.context_window or default_window
    assumed = bool(body.model) and known_profile(body.model) is None and done.context_window is None
    if assumed:
        log.warning(
            "session.window_assumed",
            session_id=sid,
            tenant_id=tenant,
            model=profile.model,
            context_window=window,
        )
    return AppendResponse(
        session_id=sid,
        first_seq=done.first_seq,
        last_seq=done.last_seq,
        version=done.version,
        context_window=window,
        window_assumed=assumed,
        warnings=[_assumed_warning(profile.model, window)] if assumed else [],
    )


def _assumed_warning(model: str | None, window: int) -> str:
    return (
        f"unknown model {model!r}: assumed a {window:,}-token context window;"
        " send context_window (and output_reserve) to set the session's own"
    )
