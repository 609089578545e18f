"""POST /v1/sessions/{sid}/turns: validated, redacted, counted, persisted in one transaction."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Header, Request

from api.deps import ResourcesDep, SenderDep, TenantDep
from api.errors import InvalidAppend
from api.limits import check_turn_sizes
from api.routes.paths import SessionId
from api.schemas import Activity, AppendRequest, AppendResponse
from worker.compaction.assemble import merge_roles
from worker.compaction.pipeline import ingest
from worker.compaction.profiles import known_profile, profile_for
from worker.compaction.validate import request_problems
from worker.store.sessions import Appended, Profile, append_turns, request_hash

router = APIRouter(tags=["turns"])
log = structlog.get_logger("compactd.api")


def _check(window: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    problems = request_problems({"messages": merge_roles(window + new)}, allow_pending_tool_use=True)
    if problems:
        raise InvalidAppend(
            "the messages would make the session an invalid Anthropic conversation"
            " (indices count from the last stored assistant message, after a stand-in for earlier turns)",
            problems=problems[:10],
        )


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
    ingested = ingest(body.messages, first_seq=1, redactor=res.redactor, policy=res.settings.policy())
    profile = _profile(body, res)
    done = append_turns(
        res.engine,
        tenant,
        sid,
        ingested.turns,
        files=ingested.files,
        profile=profile,
        activity=x_compactd_activity.value if x_compactd_activity else None,
        # stored: redacted like content (the same key always maps to the same stored value)
        idempotency_key=res.redactor.redact_text(idempotency_key) if idempotency_key else idempotency_key,
        body_hash=request_hash(body.model_dump(mode="json")) if idempotency_key else "",
        validate=_check,
    )
    if not done.replayed:
        request.app.state.metrics.appends.inc()
        request.app.state.metrics.turns.inc(len(ingested.turns))
        enqueue(tenant, done.session_pk, done.version)
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


def _profile(body: AppendRequest, res: ResourcesDep) -> Profile:
    """The append's profile; a known model name fills in its window and reserve unless the client
    gives them (an unknown one leaves the session's window, or the deployment's default)."""
    known = (
        profile_for(body.model, body.context_window, body.output_reserve)
        if known_profile(body.model)
        else None
    )
    return Profile(
        # stored and shown back: a key pasted into the wrong field must not ride along
        model=res.redactor.redact_text(body.model) if body.model else body.model,
        context_window=body.context_window or (known.context_window if known else None),
        output_reserve=body.output_reserve
        if body.output_reserve is not None
        else (known.output_reserve if known else None),
        system=res.redactor.redact_text(body.system) if body.system is not None else None,
        parent_session_id=body.parent_session_id,
        parent_tool_use_id=body.parent_tool_use_id,
    )


def _assumed_warning(model: str | None, window: int) -> str:
    return (
        f"unknown model {model!r}: assumed a {window:,}-token context window;"
        " send context_window (and output_reserve) to set the session's own"
    )
