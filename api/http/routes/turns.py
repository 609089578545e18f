"""POST /v1/sessions/{sid}/turns: validated, redacted, counted, persisted in one transaction
(worker/flows/append.py, shared with the `compactd.append` task and `compactd import`)."""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Header, Request

from api.http.deps import ResourcesDep, SenderDep, TenantDep
from api.http.errors import InvalidAppend
from api.http.routes.paths import SessionId
from api.http.schemas import AppendResponse
from worker.compaction.profiles import known_profile
from worker.contracts import Activity, AppendRequest
from worker.flows.append import BrokenConversation, append_messages
from worker.limits import check_turn_sizes
from worker.store.sessions import Appended, Profile

router = APIRouter(tags=["turns"])
log = structlog.get_logger("compactd.api")


@router.post("/v1/sessions/{sid}/turns", response_model=AppendResponse)
def append(
    sid: SessionId,
    body: AppendRequest,
    request: Request,
    res: ResourcesDep,
    tenant: TenantDep,
    enqueue: SenderDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    x_compactd_activity: Annotated[Activity | None, Header()] = None,
) -> AppendResponse:
    """Append messages; the session is created on first append. Retries with the same Idempotency-Key are safe."""
    check_turn_sizes(body.messages, res.settings.max_turn_bytes)
    try:
        outcome = append_messages(
            res,
            tenant,
            sid,
            body,
            idempotency_key=idempotency_key,
            activity=x_compactd_activity.value if x_compactd_activity else None,
            enqueue=enqueue,
        )
    except BrokenConversation as exc:
        raise InvalidAppend(str(exc), problems=exc.problems) from None
    done, profile = outcome.appended, outcome.profile
    if not done.replayed:
        request.app.state.metrics.record_append(outcome.turns, outcome.redactions)
    return _answer(sid, tenant, body, profile, done, res.settings.context_window)


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
