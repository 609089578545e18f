"""Appending turns: the one core the HTTP route, the `compactd.append` task and `compactd import` share.

ingest (normalize, redact, offload, count) -> profile -> append_turns (validated against the stored
window, idempotent) -> make sure a compaction job is pending. Every way in calls `append_messages`,
so validation, redaction and idempotency cannot drift between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
import redis
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError

from worker.compaction import pointers
from worker.compaction.assemble import merge_roles
from worker.compaction.errors import InvalidTranscript
from worker.compaction.model import Block, Turn
from worker.compaction.profiles import known_profile, profile_for
from worker.compaction.validate import request_problems
from worker.contracts import Activity, AppendRequest, Enqueue, SessionId
from worker.errors import TransientError, TurnTooLarge
from worker.ingest import Ingested, ingest
from worker.limits import check_turn_sizes
from worker.metrics import CountingRedactor, record_append, recorder_for
from worker.redaction import Redactor
from worker.redaction.redact import SEAM_CHARS
from worker.redaction.seams import Message, Reseamed, edge_text, reseam, reseamed, with_edge_text
from worker.resources import Resources
from worker.store.files import read_file
from worker.store.sessions import (
    Appended,
    IdempotencyMismatch,
    Profile,
    Seam,
    Stored,
    append_turns,
    last_message,
    request_hash,
)
from worker.store.tenants import tenant_for_key

log = structlog.get_logger("compactd.append")

# where rejected `compactd.append` messages are recorded for operators (newest first, bounded)
REJECTED_KEY = "appends:rejected"
REJECTED_KEEP = 1000


class BrokenConversation(Exception):
    """Raised when an append would make the session an invalid Anthropic conversation."""

    def __init__(self, problems: list[str], counted: str = "indices are those of the messages sent") -> None:
        super().__init__(f"the messages would make the session an invalid Anthropic conversation ({counted})")
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one append did: where the turns landed, with the profile it applied."""

    appended: Appended
    profile: Profile
    turns: int  # messages ingested (0 new rows when appended.replayed)
    redactions: dict[str, int]  # secrets redacted in the messages, by kind (for /metrics)


def append_messages(
    res: Resources,
    tenant_id: int,
    session_id: str,
    body: AppendRequest,
    *,
    idempotency_key: str | None,
    activity: str | None,
    enqueue: Enqueue,
    locked: Callable[[Any, Any], None] | None = None,
    note: bool = True,
    memory_note: bool = True,
) -> Outcome:
    """Ingest, validate and store one append in one transaction, then make sure a job is pending.

    `locked(conn, session row)` runs inside that transaction with the session locked (the proxy's
    reconcile record moves there); whatever it raises aborts the append. `note`: False when the
    caller notes the version itself (the API, on its event loop's Redis connection: note_version).
    `memory_note`: False when the turns were already served as they are (append_turns).

    Raises InvalidTranscript (a message cannot be read), BrokenConversation (tool pairing would
    break) or IdempotencyMismatch (the key was used with another body); nothing is written then.
    """
    prepared = prepare_append(res, tenant_id, session_id, body, idempotency_key, activity)
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return store_prepared(
                res,
                prepared,
                enqueue,
                locked,
                last_try=attempt == READ_ATTEMPTS,
                note=note,
                memory_note=memory_note,
            )
        except StaleRead:
            log.info("append.reread", session_id=session_id, tenant_id=tenant_id, attempt=attempt)
            prepared = replace(prepared, read=_after_stored(res, tenant_id, session_id, body))
    raise AssertionError("unreachable: the last try reseams instead of raising StaleRead")


@dataclass(frozen=True, slots=True)
class AfterStored:
    """An append's messages ingested (normalized, redacted, offloaded, counted) after the session's
    last stored message, as read then."""

    stored: Stored | None  # the message the turns follow, as read
    rewritable: bool
    counting: CountingRedactor
    # its turns and files; `after`: the stored message with a secret cut at the seam redacted
    ingested: Ingested


@dataclass(frozen=True, slots=True)
class Prepared:
    """An append ingested against the session's last stored message, its transaction not yet run
    (store_prepared): the turns it will store, exactly."""

    tenant_id: int
    session_id: str
    body: AppendRequest
    profile: Profile
    activity: str | None
    stored_key: str | None
    body_hash: str
    read: AfterStored

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self.read.ingested.turns

    @property
    def rewrites_stored(self) -> bool:
        """Whether storing it rewrites the message before it (a secret cut at the seam)."""
        return self.read.rewritable and self.read.ingested.after is not None


def prepare_append(
    res: Resources,
    tenant_id: int,
    session_id: str,
    body: AppendRequest,
    idempotency_key: str | None = None,
    activity: str | None = None,
) -> Prepared:
    """The append's first half, no transaction: its profile, and its messages ingested (normalized,
    redacted, offloaded, counted) after the session's last stored message, read now."""
    stored_key, body_hash = _idempotency(res, body, idempotency_key)
    read = _after_stored(res, tenant_id, session_id, body)
    return Prepared(
        tenant_id, session_id, body, profile_of(body, res, tenant_id), activity, stored_key, body_hash, read
    )


def with_turns(p: Prepared, turns: Sequence[Turn]) -> Prepared:
    """`p` storing `turns` instead of the ones ingested (its last one with a memory note added)."""
    ingested = replace(p.read.ingested, turns=tuple(turns))
    return replace(p, read=replace(p.read, ingested=ingested))


def tenant_scope(tenant_id: int) -> bytes:
    """The scope of a tenant's clean texts in the redactor's memory (CleanTexts)."""
    return b"tenant:%d" % tenant_id


def _after_stored(res: Resources, tenant_id: int, session_id: str, body: AppendRequest) -> AfterStored:
    """`body`'s messages ingested after the session's last stored message as it is now."""
    counting = CountingRedactor.of(res.redactor, tenant_scope(tenant_id))
    # the stored message this append follows: a secret cut between it and the first new message
    # is redacted on both sides while the new one is still as it came (seams.py)
    stored = last_message(res.engine, tenant_id, session_id)
    after, rewritable = seam_view(res, stored)
    ingested = ingest(body.messages, first_seq=1, redactor=counting, policy=res.base_policy, after=after)
    return AfterStored(stored, rewritable, counting, ingested)


def store_prepared(
    res: Resources,
    p: Prepared,
    enqueue: Enqueue,
    locked: Callable[[Any, Any], None] | None = None,
    *,
    last_try: bool,
    note: bool = True,
    memory_note: bool = True,
    noted_through: int | None = None,
) -> Outcome:
    """The append's second half: validate and store `p` in one transaction (with the memory note
    its last user turn is due, unless not `memory_note`: its turns then carry the note, if any, for
    the memory through `noted_through`), then note its version in the prompt cache (unless not
    `note`: the caller does, note_version) and make sure a job is pending. Raises StaleRead when the session's last message is no longer the one `p` was ingested
    after (unless `last_try`: then the two halves are redacted as each was alone, see _seam)."""
    read = p.read
    done = append_turns(
        res.engine,
        p.tenant_id,
        p.session_id,
        read.ingested.turns,
        files=read.ingested.files,
        profile=p.profile,
        activity=p.activity,
        idempotency_key=p.stored_key,
        body_hash=p.body_hash,
        validate=check_window,
        locked=locked,
        seam=_seam(read.stored, read.ingested.after if read.rewritable else None, read.counting, last_try),
        memory_note=memory_note,
        noted_through=noted_through,
    )
    if done.reseamed or done.system_changed:
        # the turn before was rewritten, or the system prompt: the cached prompt holds the old one
        res.cache.invalidate(done.session_pk)
    if not done.replayed:
        if note:
            note_version(res, done)
        enqueue(p.tenant_id, done.session_pk, done.version)
    return Outcome(done, p.profile, len(read.ingested.turns), dict(read.counting.counts))


def note_version(res: Resources, done: Appended) -> None:
    """What a fetch served from the cache alone (the database down) must cover: the append's
    version, noted in Redis once it is committed. Best effort: never raises."""
    res.cache.prompts.note_version(done.session_pk, done.version, done.context_window, done.output_reserve)


# how often an append is ingested again when another append to its session came between its read
# of the stored message it follows and its transaction (then the halves as redacted alone: reseam)
READ_ATTEMPTS = 3


class StaleRead(Exception):
    """Raised when the session's last stored message changed after the append read it."""


def _idempotency(res: Resources, body: AppendRequest, key: str | None) -> tuple[str | None, str]:
    """The key as stored, redacted like content (the same key always maps to the same stored value),
    and the body's hash as validated (the same key over HTTP and over the task hashes the same)."""
    if not key:
        return key, ""
    return res.redactor.redact_text(key), request_hash(body.model_dump(mode="json"))


def seam_view(res: Resources, stored: Stored | None) -> tuple[Message | None, bool]:
    """The stored message as the append's ingest scans its boundary with (`after=`), and whether
    what the scan makes of it may be written back. A message offloaded to a virtual file ends with
    the pointer: it is scanned with the end of the file instead, and not rewritten (the file keeps
    the first half of a secret cut there; the new message loses the rest)."""
    if stored is None:
        return None, False
    ref = pointers.offloaded_ref(edge_text(stored.blocks, last=True))
    found = read_file(res.engine, stored.session_pk, ref) if ref else None
    if found is None:
        return (stored.role, stored.blocks), True
    return (stored.role, with_edge_text(stored.blocks, found[2][-SEAM_CHARS:], last=True)), False


def _seam(
    stored: Stored | None, rewritten: tuple[Block, ...] | None, redactor: Redactor, last_try: bool
) -> Seam:
    """The store's seam callback: the ingest's scan of the boundary stands when the stored message
    is still the one it read; otherwise the append is ingested again (StaleRead), or at the last
    try the two halves are redacted as each was alone (reseam)."""

    def seam(previous: tuple[Block, ...], first: tuple[Block, ...]) -> Reseamed | None:
        if stored is not None and previous == stored.blocks:
            return None if rewritten is None else reseamed(previous, rewritten, first)
        if not last_try:
            raise StaleRead
        return reseam(previous, first, redactor)

    return seam


def check_window(window: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    """Refuse an append that would break the conversation (tool_use without its result, ...)."""
    problems = request_problems({"messages": merge_roles(window + new)}, allow_pending_tool_use=True)
    if problems:
        raise BrokenConversation(problems[:10], _counted(window))


def _counted(window: list[dict[str, Any]]) -> str:
    """What the problems' message indices count: the window a new session has not (it is the
    messages sent), or one that starts with a user message standing for the stored turns."""
    if not window:
        return "indices are those of the messages sent"
    if len(window) == 1:
        # no assistant message stored: the stored turns are all user turns, merged into one
        return "messages[0] is the session's stored user turns, the messages sent merged after them"
    return (
        "messages[0] stands for the stored turns before the last stored assistant message, which "
        "follows with the turns after it, then the messages sent"
    )


def profile_of(body: AppendRequest, res: Resources, tenant_id: int) -> Profile:
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
        # the same prompt comes with every append of a session: once found clean it is not scanned
        # again (the redactor's memory of clean texts, this tenant's)
        system=res.redactor.scoped(tenant_scope(tenant_id)).redact_text(body.system)
        if body.system is not None
        else None,
        parent_session_id=body.parent_session_id,
        parent_tool_use_id=body.parent_tool_use_id,
        cache_ttl_seconds=body.cache_ttl_seconds,
    )


class EnqueuedAppend(BaseModel):
    """The keyword arguments of a `compactd.append` message: the HTTP append, as one message.

    `body` is exactly the JSON body of POST /v1/sessions/{sid}/turns; `api_key` is the tenant's
    key (checked against its stored hash, as the Authorization header is); `idempotency_key` plays
    the Idempotency-Key header (without it, the Celery task id: a redelivered message stores once).
    """

    model_config = ConfigDict(extra="forbid")

    api_key: str = Field(min_length=1, max_length=200)
    session_id: SessionId
    body: AppendRequest
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    activity: Activity | None = None


class Rejected(Exception):
    """Raised when an enqueued append is refused for good: retrying the same message cannot help."""

    def __init__(self, reason: str, problems: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.problems = problems or []


def append_enqueued(
    res: Resources, kwargs: dict[str, Any], *, task_id: str, enqueue: Enqueue
) -> dict[str, Any]:
    """Run one `compactd.append` message through the HTTP path's checks and core.

    Returns what happened (`appended`, `replayed` or `rejected`). A rejection is logged and
    recorded (see `rejections`) and returned, never raised: the message is done. A database that
    does not answer raises TransientError, for the task to retry.
    """
    session_id = str(kwargs.get("session_id", ""))[:200]
    tenant_id: int | None = None
    try:
        message = parse_enqueued(kwargs)
        tenant_id = tenant_for_key(res.engine, message.api_key)
        if tenant_id is None:
            raise Rejected("unknown API key")
        try:  # the HTTP path's 413, as a rejection
            check_turn_sizes(message.body.messages, res.settings.max_turn_bytes)
        except TurnTooLarge as exc:
            raise Rejected(str(exc)) from None
        outcome = append_messages(
            res,
            tenant_id,
            message.session_id,
            message.body,
            idempotency_key=message.idempotency_key or f"task:{task_id}",
            activity=message.activity.value if message.activity else None,
            enqueue=enqueue,
        )
    except Rejected as exc:
        return reject(res, task_id, tenant_id, session_id, exc.reason, exc.problems)
    except InvalidTranscript as exc:
        return reject(res, task_id, tenant_id, session_id, f"invalid messages: {exc}")
    except BrokenConversation as exc:
        return reject(res, task_id, tenant_id, session_id, str(exc), exc.problems)
    except IdempotencyMismatch:
        reason = "this idempotency_key was already used with a different body"
        return reject(res, task_id, tenant_id, session_id, reason)
    except (OperationalError, InterfaceError) as exc:
        raise TransientError(f"database unavailable: {type(exc).__name__}") from None
    done = outcome.appended
    status = "replayed" if done.replayed else "appended"
    if not done.replayed:
        recorder = recorder_for(res.cache)
        record_append(recorder, outcome.turns, outcome.redactions)
        recorder.flush()
    log.info(
        f"append.{status}",
        tenant_id=tenant_id,
        session_id=session_id,
        first_seq=done.first_seq,
        last_seq=done.last_seq,
    )
    return {
        "status": status,
        "session_id": session_id,
        "first_seq": done.first_seq,
        "last_seq": done.last_seq,
    }


def parse_enqueued(kwargs: dict[str, Any]) -> EnqueuedAppend:
    """The message's fields, validated like the HTTP request; Rejected names each bad field
    (location and rule only, never the value sent)."""
    try:
        return EnqueuedAppend.model_validate(kwargs)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:20]]
        raise Rejected("the message does not match compactd.append's fields", problems) from None


def reject(
    res: Resources,
    task_id: str,
    tenant_id: int | None,
    session_id: str,
    reason: str,
    problems: list[str] | None = None,
) -> dict[str, Any]:
    """Log and record a refused message where operators look; the message is then done."""
    # reasons can quote what was sent: redacted, and cut after (a cut secret is not recognisable)
    record = res.redactor.redact_value(
        {
            "at": time.time(),
            "task_id": task_id,
            "tenant_id": tenant_id,
            "session_id": session_id,
            "reason": reason,
            "problems": list(problems or [])[:10],
        }
    )
    record["reason"] = record["reason"][:500]
    record["problems"] = [p[:300] for p in record["problems"]]
    log.warning(
        "append.rejected",
        task_id=task_id,
        tenant_id=tenant_id,
        session_id=record["session_id"],
        reason=record["reason"],
        problems=record["problems"],
    )
    key = res.cache.prefix + REJECTED_KEY
    try:
        pipe = res.cache.client.pipeline()
        pipe.lpush(key, orjson.dumps(record))
        pipe.ltrim(key, 0, REJECTED_KEEP - 1)
        pipe.execute()
    except redis.RedisError as exc:
        # the log line above stays: the rejection is not silent even without Redis
        log.warning("append.rejection_unrecorded", task_id=task_id, error=type(exc).__name__)
    return {"status": "rejected", "session_id": record["session_id"], "reason": record["reason"]}


def rejections(res: Resources, limit: int = 100) -> list[dict[str, Any]]:
    """The latest rejected `compactd.append` messages, newest first."""
    raw = res.cache.client.lrange(res.cache.prefix + REJECTED_KEY, 0, limit - 1)
    return [orjson.loads(r) for r in raw]  # type: ignore[union-attr]
