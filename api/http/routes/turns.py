"""POST /v1/sessions/{sid}/turns: validated, redacted, counted, persisted in one transaction
(worker/flows/append.py, shared with the `compactd.append` task and `compactd import`)."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Header, Request, Response
from starlette.background import BackgroundTask

from api.http.deps import TenantDep, authorize
from api.http.errors import InvalidAppend
from api.http.jobs import settle
from api.http.middleware.fast_paths import SESSION, FastPath
from api.http.routes.paths import SessionId
from api.http.schemas import AppendResponse
from api.http.threads import in_thread
from worker.compaction.profiles import known_profile
from worker.contracts import Activity, AppendRequest
from worker.flows.append import BrokenConversation, Outcome, append_messages
from worker.flows.held_jobs import HeldJobs
from worker.limits import check_turn_sizes
from worker.resources import Resources
from worker.store.sessions import Appended, Profile

router = APIRouter(tags=["turns"])
APPEND = "/v1/sessions/{sid}/turns"
IDEMPOTENCY_KEY_MAX = 200
ACTIVITIES = frozenset(a.value for a in Activity)
log = structlog.get_logger("compactd.api")


@router.post(APPEND, response_model=AppendResponse)
async def append(
    sid: SessionId,
    body: AppendRequest,
    request: Request,
    tenant: TenantDep,
    idempotency_key: Annotated[str | None, Header(max_length=IDEMPOTENCY_KEY_MAX)] = None,
    x_compactd_activity: Annotated[Activity | None, Header()] = None,
) -> Response:
    """Append messages; the session is created on first append. Retries with the same Idempotency-Key are safe."""
    activity = x_compactd_activity.value if x_compactd_activity else None
    return await appended(request, tenant, sid, body, idempotency_key, activity)


async def append_fast(sid: str, request: Request, raw: bytes) -> Response | None:
    """The route without FastAPI (api/http/middleware/fast_paths.py); None when the request is not
    valid as it stands: the route then answers it, with its own errors."""
    headers = request.headers
    key, activity = headers.get("idempotency-key"), headers.get("x-compactd-activity")
    if (key is not None and len(key) > IDEMPOTENCY_KEY_MAX) or (
        activity is not None and activity not in ACTIVITIES
    ):
        return None
    # the route reads a body as JSON by the first Content-Type header (JsonOnly lets a +json
    # subtype, or a later header, through): anything but plain application/json is the route's
    if headers.get("content-type", "").partition(";")[0].strip().lower() != "application/json":
        return None
    try:
        body = AppendRequest.model_validate_json(raw)
    except ValueError:
        return None
    tenant, _ = await authorize(request)
    return await appended(request, tenant, sid, body, key, activity)


async def appended(
    request: Request, tenant: int, sid: str, body: AppendRequest, key: str | None, activity: str | None
) -> Response:
    """The append's answer, on either path: stored, its version noted, its job sent after the answer."""
    res: Resources = request.app.state.resources
    # the compaction job is claimed with the note, and sent after the response (now and then a
    # broker publish): the turns are committed first, and a job never sent is the beat sweep's
    jobs = HeldJobs(request.app.state.enqueue)
    # stored and noted whole even if the request is cancelled meanwhile (a shutdown's timeout): an
    # append committed is an append noted (the lifespan waits for these before it closes anything)
    stored = asyncio.ensure_future(_store_and_settle(request, res, tenant, sid, body, key, activity, jobs))
    in_flight: set[asyncio.Future[Any]] = request.app.state.appending
    in_flight.add(stored)
    stored.add_done_callback(partial(_landed, in_flight))
    outcome, after = await asyncio.shield(stored)
    done = outcome.appended
    if not done.replayed:
        request.app.state.metrics.record_append(outcome.turns, outcome.redactions)
    answer = _answer(sid, tenant, body, outcome.profile, done, res.settings.context_window)
    # already validated: sent as is, not validated and encoded again by FastAPI (another thread hop)
    return Response(answer.model_dump_json(), media_type="application/json", background=after)


def fast_path() -> FastPath:
    """An append without FastAPI's routing (api/http/middleware/fast_paths.py)."""
    route = next(r for r in router.routes if getattr(r, "path", None) == APPEND)
    return FastPath("POST", re.compile(f"/v1/sessions/{SESSION}/turns"), route, append_fast, body=True)


def _landed(in_flight: set[asyncio.Future[Any]], stored: asyncio.Future[Any]) -> None:
    in_flight.discard(stored)
    if not stored.cancelled():
        stored.exception()  # retrieved: a request cancelled meanwhile no longer awaits it


async def _store_and_settle(
    request: Request,
    res: Resources,
    tenant: int,
    sid: str,
    body: AppendRequest,
    key: str | None,
    activity: str | None,
    jobs: HeldJobs,
) -> tuple[Outcome, BackgroundTask | None]:
    # one thread hop for the whole append (the database and Redis block); the answer is built here
    outcome = await in_thread(_store, res, tenant, sid, body, key, activity, jobs)
    return outcome, await settle(request, outcome.appended, jobs)


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
            res,
            tenant,
            sid,
            body,
            idempotency_key=idempotency_key,
            activity=activity,
            enqueue=jobs,
            note=False,
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
