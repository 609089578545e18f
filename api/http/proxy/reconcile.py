"""The edge's side of reconcile: the request's history stored in its session and the upstream
request built from the ready prompt, served ahead of its commit in the usual case
(worker/flows/proxy.py holds the use case itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from sqlalchemy.exc import SQLAlchemyError

from api.http.errors import ApiError, NotFound
from api.http.guard import Guard
from api.http.jobs import note_command
from api.http.proxy.call import Call
from api.http.proxy.errors import ProxyError
from api.http.proxy.formats import compactd_tools
from api.http.replies import ReplyGrace
from api.http.routes.prompt import count_served, serve_prompt
from api.http.threads import in_thread
from worker.compaction.errors import InvalidTranscript
from worker.flows.append import BrokenConversation
from worker.flows.held_jobs import HeldJobs
from worker.flows.proxy import (
    Ahead,
    Prefetched,
    Proxied,
    Reconciled,
    Unreconciled,
    reconcile,
    reconcile_ahead,
    settle,
)
from worker.proxy import fingerprints
from worker.proxy.known_prefix import BodyRead, KnownPrefixes
from worker.store.sessions import Appended

log = structlog.get_logger("compactd.proxy")


async def reconcile_and_build(call: Call, jobs: HeldJobs, prefetched: Prefetched | None) -> None:
    """Reconcile the history with its session, store what it adds, and build the upstream request
    from the ready prompt.

    The usual request (it extends the branch this process remembers, and only this process wrote
    its session since) is served ahead: one worker thread renders its prompt with its new turns
    (_served_ahead), the upstream call opens, and its commit runs beside it (_settle_soon); a commit
    that cannot be made then is followed by the ordinary reconcile, never by a second call. Any
    other request is reconciled and stored the ordinary way before the call opens, which answers
    what stops it (400 for a broken history, 503 for a conversation that keeps changing ...)."""
    assert call.conversation is not None  # identified by the edge
    body = call.use_case_body
    call.proxied = Proxied(
        call.res,
        call.tenant,
        call.conversation,
        body,
        [*(_client_tools(call.body)), *compactd_tools()],
        call.context_window,
        jobs,
        call.request.app.state.proxy_records,
        prefetched,
    )
    chains: list[str] = []
    known = call.chains
    chained = (
        partial(_chained, call.request.app.state, call.read) if known is None else (lambda _: list(known))
    )
    build = partial(call.fmt.upstream, call.body)
    # one thread hop: the hashing, the ingest, the render and the upstream body
    ahead = await in_thread(_served_ahead, call.proxied, chained, chains, build)
    if ahead is not None:
        done, (call.upstream_raw, call.hidden) = ahead
        call.session_id = done.plan.session_id
        count_served(call.request, call.tenant, done.plan.session_id, done.served)
        _settle_soon(call, done, chains)
        return
    await _reconcile_in_order(call, chains)


def _client_tools(body: dict[str, Any]) -> list[Any]:
    given = body.get("tools")
    return given if isinstance(given, list) else []


async def _reconcile_in_order(call: Call, chains: list[str]) -> None:
    """Reconcile and store the history, then fetch the ready prompt and build the upstream request."""
    res, proxied = call.res, call.proxied
    assert proxied is not None  # set by reconcile_and_build
    memo: fingerprints.ChainMemo = call.request.app.state.proxy_chains
    served = None
    for missing in (False, True):
        try:
            # one thread hop for the hashing and the append
            reconciled = await in_thread(_reconciled, proxied, memo, chains, missing)
            call.reconciled = reconciled
            _stored(call)
        except (InvalidTranscript, BrokenConversation) as exc:
            problems = getattr(exc, "problems", [])
            detail = "; ".join(problems[:3]) if problems else str(exc)
            raise ProxyError(400, res.redactor.redact_text(f"messages: {detail}")[:500]) from None
        except Unreconciled:
            raise ProxyError(503, "the conversation changed under this request; retry") from None
        try:
            served = await serve_prompt(call.request, call.tenant, reconciled.plan.session_id)
            break
        except NotFound:
            continue  # the session was deleted after the record was made: start it anew
        except ApiError as exc:
            raise ProxyError(exc.status, exc.detail or exc.title) from None
    if served is None:
        raise ProxyError(503, "the conversation's session could not be served; retry")
    call.session_id = reconciled.plan.session_id
    call.upstream_raw, call.hidden = call.fmt.upstream(call.body, served.body, compactd_tools())


def _settle_soon(call: Call, ahead: Ahead, chains: list[str]) -> None:
    """Store the request served ahead beside the upstream call (settle, in a worker thread: its
    commit, else the ordinary reconcile), then note its version; not waited for before the call
    opens, waited for before the client's first byte (_settled)."""

    async def settling() -> bool:
        try:
            reconciled, stopped = await in_thread(settle, ahead, chains)
        except Exception as exc:
            # the client still gets its answer; its next request carries this history and stores it
            # (the ordinary way: settle forgot what this process last wrote); an error of no known
            # kind is a bug
            expected = isinstance(
                exc, InvalidTranscript | BrokenConversation | Unreconciled | SQLAlchemyError
            )
            log.warning(
                "proxy.request_unrecorded",
                tenant_id=call.tenant,
                session_id=ahead.plan.session_id,
                error=type(exc).__name__,
                exc_info=not expected,
            )
            return True
        if stopped is not None:
            log.info("proxy.ahead_failed", session_id=ahead.plan.session_id, error=type(stopped).__name__)
        call.reconciled = reconciled
        _stored(call)
        return await _noted(call, reconciled.unnoted)

    call.settling = asyncio.ensure_future(settling())


async def _noted(call: Call, appended: Appended | None) -> bool:
    """note_version on the key check's connection: a Redis round trip the event loop drives (no
    thread hop). Best effort, as note_version: False when Redis did not take it."""
    if appended is None:
        return True
    guard: Guard = call.request.app.state.guard
    return await guard.send([note_command(call.res, appended)])


def _stored(call: Call) -> None:
    """The request's history is stored: the previous reply, if still waiting out its grace, is in
    it (or the client left it out): it is not recorded on its own."""
    grace: ReplyGrace = call.request.app.state.proxy_replies
    grace.supersede((call.tenant, call.conversation.key))  # type: ignore[union-attr]


def _reconciled(
    proxied: Proxied, memo: fingerprints.ChainMemo, chains: list[str], missing: bool
) -> Reconciled:
    """reconcile, the history's chain computed first (once: kept in `chains` for a second try;
    only the messages past the conversation's last request's unchanged prefix are hashed)."""
    if not chains:
        memo_key = (proxied.tenant_id, proxied.conversation.key)
        chains.extend(memo.chains(memo_key, proxied.body["messages"]))
    return reconcile(proxied, chains, missing)


def _chained(state: Any, read: BodyRead | None, proxied: Proxied) -> list[str]:
    """The history's chains: the known part's and its new messages' (KnownPrefixes), else the
    ChainMemo's computation; the history is then kept for the next request."""
    if read is not None and read.chains is not None:
        chains = read.chains
    else:
        memo: fingerprints.ChainMemo = state.proxy_chains
        chains = memo.chains((proxied.tenant_id, proxied.conversation.key), proxied.body["messages"])
    if read is not None:
        known: KnownPrefixes = state.known_prefixes
        known.learn(read, chains)
    return chains


def _served_ahead(
    proxied: Proxied,
    chained: Callable[[Proxied], list[str]],
    chains: list[str],
    build: Callable[[bytes, list[dict[str, Any]]], tuple[bytes, frozenset[str]]],
) -> tuple[Ahead, tuple[bytes, frozenset[str]]] | None:
    """In a worker thread: reconcile_ahead (the history's chain computed first, kept in `chains` for
    the ordinary path and for settle), the prompt rendered with the new turns, and the upstream
    body built from it. None: nothing served ahead."""
    try:
        chains.extend(chained(proxied))
        ahead = reconcile_ahead(proxied, chains)
    except Exception as exc:
        # whatever stops it (an unreadable message, the database): the ordinary path meets it
        # again and answers it as it does
        log.debug("proxy.ahead_skipped", error=type(exc).__name__)
        return None
    if ahead is None:
        return None
    return ahead, build(ahead.served.body, compactd_tools())
