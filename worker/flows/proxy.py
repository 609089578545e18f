"""The drop-in endpoint's use case: reconcile a request's history with its session, then record the reply.

reconcile: identify the conversation -> plan against its record (pure) -> append what is new, the
record moving in the same transaction -> the session to serve. A history that does not extend the
record continues in a new session linked to the old one. record_reply: the assistant's message
(and any server-side rounds of compactd's own tools) appended, the record moved past it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import orjson
import structlog
from sqlalchemy import Engine

from worker.cache.prompts import Entry
from worker.compaction.errors import InvalidTranscript
from worker.compaction.normalize import normalize_message
from worker.compaction.profiles import known_profile
from worker.compaction.tokens import count_text
from worker.contracts import AppendRequest, Enqueue
from worker.flows.append import (
    BrokenConversation,
    Prepared,
    append_messages,
    check_window,
    prepare_append,
    store_prepared,
    with_turns,
)
from worker.flows.serve import Served, cached_entry, fetch_ahead
from worker.proxy import fingerprints, provider_keys
from worker.proxy.conversations import Conversation, client_prefix, stable_system_text
from worker.proxy.reconcile import Plan, Record, plan, restart
from worker.resources import Resources
from worker.store.proxy import (
    SessionGone,
    SessionTaken,
    StalePlan,
    claim,
    load_records,
    main_session,
    sealed_provider_key,
    store_provider_key,
)
from worker.store.sessions import EARLIER, WINDOW_TURNS, Appended, Profile, window_start

log = structlog.get_logger("compactd.proxy")

ATTEMPTS = 5


def proxy_key(redaction_key: bytes) -> bytes:
    """The key of the proxy's chain hashes and conversation digests (derived: never the redaction key itself)."""
    return hmac.new(redaction_key, b"compactd.proxy", hashlib.sha256).digest()


class ProviderKeyUnreadable(Exception):
    """The provider key held for a tenant does not open (the deployment's redaction key changed)."""


def provider_key_reader(
    engine: Engine, master: bytes, provider: str = "anthropic"
) -> Callable[[int], str | None]:
    """HeldKeys' read: the tenant's key for `provider`, unsealed; None when it holds none."""

    def read(tenant_id: int) -> str | None:
        sealed = sealed_provider_key(engine, tenant_id, provider)
        if sealed is None:
            return None
        try:
            return provider_keys.unseal(master, tenant_id, sealed, provider)
        except provider_keys.SealError:
            # never fall back to the deployment's key: the tenant's calls would be billed elsewhere
            log.error("proxy.provider_key_unreadable", tenant_id=tenant_id, provider=provider)
            raise ProviderKeyUnreadable(tenant_id) from None

    return read


def set_provider_key(
    engine: Engine, master: bytes, tenant_id: int, key: str | None, provider: str = "anthropic"
) -> str | None:
    """Hold `key` (sealed) for the tenant and provider, or none (None); its public key id."""
    if key is None:
        store_provider_key(engine, tenant_id, None, provider=provider)
        return None
    kid = provider_keys.key_id(master, key)
    store_provider_key(engine, tenant_id, provider_keys.seal(master, tenant_id, key, provider), kid, provider)
    return kid


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The session a request is served from, and its record after the request's messages."""

    plan: Plan
    appended: int  # client messages appended by this request
    # an append committed but not yet noted in the prompt cache: the caller notes it (note_version)
    # beside the upstream call, before the first byte reaches the client (commit_ahead's)
    unnoted: Appended | None = None


# a session's cached prompt entry as read ahead: (session id, pk, the entry; None: none cached)
Prefetched = tuple[str, int, Entry | None]


class Unreconciled(Exception):
    """Raised when a conversation's record kept changing under the request (heavy contention)."""


@lru_cache(maxsize=256)
def _tools_tokens(tools_json: bytes) -> int:
    return count_text(tools_json.decode())


def tools_tokens(tools: Sequence[Any]) -> int:
    """Tokens of the tool definitions sent upstream (cached: the same tools arrive on every request)."""
    return _tools_tokens(orjson.dumps(list(tools))) if tools else 0


def append_body(
    body: dict[str, Any], messages: list[Any], plan_: Plan, context_window: int | None, tools: Sequence[Any]
) -> AppendRequest:
    """The append of a request's new messages, with the session profile the request implies: its
    model, its system prompt (the stable part), an output reserve that keeps room for max_tokens
    (the model's own reserve when the client sets none) and every tool definition sent upstream
    (the budget covers the whole request), and how long the
    provider keeps its prompt cache (`ttl: "1h"` on a breakpoint: an hour)."""
    max_tokens = body.get("max_tokens")
    model = body.get("model")
    if not (isinstance(max_tokens, int) and max_tokens > 0):
        # a client that leaves the reply's size to the model (Codex): the model's own reserve
        known = known_profile(model if isinstance(model, str) else None)
        max_tokens = known.output_reserve if known else 0
    reserve = max_tokens + tools_tokens(tools)
    return AppendRequest(
        messages=messages,
        model=model if isinstance(model, str) and model else None,
        system=stable_system_text(body.get("system")),
        context_window=context_window,
        output_reserve=min(reserve, 1_000_000) or None,
        parent_session_id=plan_.parent_session_id,
        cache_ttl_seconds=cache_ttl_seconds(body),
    )


def cache_ttl_seconds(body: dict[str, Any]) -> int | None:
    """The cache lifetime a request asks for on its system or tool breakpoints: 3600 for `ttl:
    "1h"`, 300 for the default; None when it marks none (the session keeps what it had)."""
    system = body.get("system")
    marked = [
        b.get("cache_control")
        for b in [*(system if isinstance(system, list) else []), *(body.get("tools") or [])]
        if isinstance(b, dict) and isinstance(b.get("cache_control"), dict)
    ]
    if not marked:
        return None
    return 3600 if any(isinstance(m, dict) and m.get("ttl") == "1h" for m in marked) else 300


@dataclass(frozen=True, slots=True)
class Written:
    """What this process's last write left a conversation's newest session at."""

    version: int
    system: bytes  # a digest of its stored system prompt (the budget counts it)

    @classmethod
    def of(cls, version: int, system: str | None) -> Written | None:
        """None when the write did not set the system prompt (then it is not known here)."""
        return None if system is None else cls(version, system_digest(system))


def system_digest(system: str) -> bytes:
    return hashlib.blake2b(system.encode(), digest_size=16).digest()


class RecordMemo:
    """Each conversation's branch records as this process last read or moved them, so the usual
    request (its history extends the branch it extended last time) plans without reading them;
    with them, what this process's last write left the newest branch's session at (Written).

    Only a plan that extends a branch is taken from it, and that plan is checked where it counts:
    the append's claim moves the record only if the database still holds it exactly as remembered
    (same session, length and chain), with the session row locked; else StalePlan and the records
    are read again. Any other plan (same, new, diverged) is made from the database's records.
    A conversation whose remembered plan went stale once (another API process serves it too, or
    two of its histories race) is planned from the database from then on: a stale plan costs an
    ingest and a transaction rolled back, more than the read it saves. Bounded, least recently
    used out; chain values only, never text.

    Written lets a request be sent upstream before its append commits (reconcile_ahead): a session
    whose stored version is not the one remembered was written by someone else (another API
    process, POST /turns, a write this process has not remembered yet), and its prompt could hold
    the request's new messages already; a request whose system prompt is not the stored one would
    be sent with a budget counted for another.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        # conversation -> (records, trusted, what our last write left records[0]'s session at)
        self._entries: OrderedDict[Hashable, tuple[tuple[Record, ...], bool, Written | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conversation: Hashable) -> tuple[Record, ...] | None:
        """The remembered records; None when unknown or no longer trusted."""
        with self._lock:
            entry = self._entries.get(conversation)
        return entry[0] if entry is not None and entry[1] else None

    def written(self, conversation: Hashable) -> tuple[tuple[Record, ...], Written] | None:
        """The remembered records with what this process's last write left the newest branch's
        session at, read together; None when either is unknown (read from the database, not
        written since) or no longer trusted."""
        with self._lock:
            entry = self._entries.get(conversation)
        if entry is None or not entry[1] or entry[2] is None:
            return None
        return entry[0], entry[2]

    def put(self, conversation: Hashable, records: Sequence[Record], written: Written | None = None) -> None:
        with self._lock:
            trusted = self._entries.get(conversation, ((), True, None))[1]
            self._entries[conversation] = (tuple(records), trusted, written)
            self._entries.move_to_end(conversation)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def moved(
        self, conversation: Hashable, records: Sequence[Record], p: Plan, written: Written | None = None
    ) -> None:
        """Remember `records` with the plan's branch moved (or added), newest first, and what the
        write that moved it left its session at."""
        rest = [r for r in records if r != p.expected and r.session_id != p.after.session_id]
        self.put(conversation, [p.after, *rest], written)

    def unwritten(self, conversation: Hashable) -> None:
        """Forget what this process's last write left the session at (the records stay): the
        conversation's next request is stored before it is sent."""
        with self._lock:
            entry = self._entries.get(conversation)
            if entry is not None:
                self._entries[conversation] = (entry[0], entry[1], None)

    def distrust(self, conversation: Hashable) -> None:
        """Plan this conversation from the database from now on."""
        with self._lock:
            self._entries[conversation] = ((), False, None)
            self._entries.move_to_end(conversation)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def known(self, conversation: Hashable) -> tuple[Record, ...]:
        """The remembered records, trusted or not (to move on after a reply)."""
        with self._lock:
            entry = self._entries.get(conversation)
        return entry[0] if entry is not None else ()


@dataclass(frozen=True, slots=True)
class Proxied:
    """One proxied request, as the use case needs it."""

    res: Resources
    tenant_id: int
    conversation: Conversation
    body: dict[str, Any]
    tools: Sequence[Any]  # every tool definition sent upstream (the client's and compactd's)
    context_window: int | None
    enqueue: Enqueue
    records: RecordMemo | None = None  # this process's memo of branch records (None: always read)
    # a session's cached prompt entry read already (with the key check): (session id, pk, entry)
    prefetched: Prefetched | None = None


def reconcile(
    req: Proxied, chains: list[str], missing: bool = False, *, memory_note: bool = True
) -> Reconciled:
    """Store what the request's history adds (nothing for a retry), in the session it belongs to.

    Raises InvalidTranscript / BrokenConversation (the history cannot be stored: nothing written)
    or Unreconciled. `missing`: the record's session was found deleted (the history starts anew).
    `memory_note`: False when its prompt already went upstream (no note may be added under it).
    """
    key, messages = req.conversation.key, req.body["messages"]
    memo_key = (req.tenant_id, key)
    taken = 0
    gone = missing
    remembered = req.records.get(memo_key) if req.records is not None and not missing else None
    from_memory = False
    for _ in range(ATTEMPTS):
        p = None
        if remembered is not None:
            records: Sequence[Record] = remembered
            p = plan(records, chains, key)
            remembered = None  # trusted for one extend at most: after that the database decides
            from_memory = p.kind == "extend"
            if not from_memory:
                p = None
        if p is None:
            from_memory = False
            records = load_records(req.res.engine, req.tenant_id, key)
            p = plan(records, chains, key, taken)
            if gone and p.expected is not None and p.kind in ("same", "extend"):
                # the branch's session was deleted: the whole history starts a new one (not linked)
                p = restart(p.expected, chains, key, taken)
            if p.kind == "new" and not taken:
                p = _linked(req, p)
        if p.kind == "same":
            _remember(req, memo_key, records, None)
            return Reconciled(p, 0)
        try:
            written = _store(req, p, messages[p.start :], memory_note=memory_note)
        except StalePlan:
            if from_memory and req.records is not None:
                req.records.distrust(memo_key)
            from_memory = False
            continue
        except SessionTaken:
            # the name a history derives is taken: the next one, then one at random (a history the
            # client returns to again and again, as after each of its own compactions, has had its
            # first names used by the branches it left)
            taken = 1 if taken == 0 else secrets.randbelow(10**9) + 2
            continue
        except SessionGone:
            gone = True
            continue
        _remember(req, memo_key, records, p, written)
        _log_plan(req, p, len(messages))
        return Reconciled(p, len(messages) - p.start)
    raise Unreconciled(key)


@dataclass(frozen=True, slots=True)
class Ahead:
    """A request that extends its remembered branch, its new messages ingested and its prompt
    rendered with them, their transaction not yet run (commit_ahead)."""

    req: Proxied
    plan: Plan
    records: tuple[Record, ...]  # the remembered records the plan was made from
    prepared: Prepared  # its turns as stored: the last one with the memory note it was served with
    served: Served
    appended: int
    noted_through: int | None = None  # the memory version that note covers (None: no note)


class StaleAhead(Exception):
    """Raised inside the transaction when the prompt rendered ahead is no longer the one the stored
    session gives (another append came first, or this one changes the window, reserve or system)."""


def reconcile_ahead(req: Proxied, chains: list[str]) -> Ahead | None:
    """The usual request (its history extends the branch this process remembers, whose session
    only this process has written since) ready to be served before its append commits; None for
    anything else (reconcile, the ordinary way).

    The prompt is what the fetch will serve once the append is stored (fetch_ahead: the same render
    over the same rows), and it may go upstream before the commit (settle): the session it is
    rendered from is at the version this process's own last write left it at, so the stored turns
    are the client's history before its new messages, and no one else's copy of those messages.
    commit_ahead stores exactly the ingested turns it holds, or raises.
    """
    if req.records is None:
        return None
    memo_key = (req.tenant_id, req.conversation.key)
    known = req.records.written(memo_key)
    if known is None:
        return None
    remembered, written = known
    p = plan(remembered, chains, req.conversation.key)
    # the version is the newest branch's: a request that extends an older one is the ordinary path's
    if p.kind != "extend" or p.session_id != remembered[0].session_id:
        return None
    res = req.res
    # no cached prompt (the worker has not published one yet): the ordinary path, before any ingest
    cached = _cached_entry(req, p.session_id)
    if cached is None:
        return None
    messages = req.body["messages"]
    body = append_body(req.body, messages[p.start :], p, req.context_window, req.tools)
    prepared = prepare_append(res, req.tenant_id, p.session_id, body)
    # a secret cut at the seam rewrites the turn before (and the cached prompt), a new system prompt
    # changes the budget, a broken tool pairing is refused: the ordinary path's, before any call
    if (
        prepared.rewrites_stored
        or prepared.profile.system is None
        or system_digest(prepared.profile.system) != written.system
        or not _pairs_with(messages, p.start, prepared)
    ):
        return None
    profile = prepared.profile
    rendered = fetch_ahead(
        res.engine,
        res.cache,
        cached,
        req.tenant_id,
        p.session_id,
        res.policy_for,
        prepared.turns,
        (profile.context_window, profile.output_reserve),
    )
    # stored: written by someone else since this process's last write (or not yet seen by the memo)
    if rendered is None or rendered[0].version - len(prepared.turns) != written.version:
        return None
    served, turns, noted_through = rendered
    return Ahead(
        req, p, remembered, with_turns(prepared, turns), served, len(messages) - p.start, noted_through
    )


def _cached_entry(req: Proxied, session_id: str) -> tuple[int, Entry] | None:
    """The session's pk and cached prompt entry: the one prefetched when it is this session's."""
    pre = req.prefetched
    if pre is None or pre[0] != session_id:
        return cached_entry(req.res.engine, req.res.cache, req.tenant_id, session_id)
    return None if pre[2] is None else (pre[1], pre[2])


def commit_ahead(ahead: Ahead) -> Reconciled:
    """Store the turns `ahead` was served with, the record moving in the same transaction, checked
    under the session lock: the session must be exactly the one the prompt was rendered from.
    Raises whatever stops it (StaleAhead, StalePlan, StaleRead, BrokenConversation, a database
    error); nothing is written then, and the request is reconciled again the ordinary way."""
    req, p, prepared = ahead.req, ahead.plan, ahead.prepared
    memo_key = (req.tenant_id, req.conversation.key)
    guard = _rendered_from(ahead.served.version - len(prepared.turns), prepared.profile)
    moved = claim(req.tenant_id, req.conversation.key, p)

    def locked(conn: Any, session: Any) -> None:
        guard(session)
        moved(conn, session)

    try:
        # its prompt went upstream as rendered, its memory note with it (fetch_ahead): stored as is
        done = store_prepared(
            req.res,
            prepared,
            req.enqueue,
            locked,
            last_try=False,
            note=False,
            memory_note=False,
            noted_through=ahead.noted_through,
        )
    except StalePlan:
        if req.records is not None:
            req.records.distrust(memo_key)
        raise
    _remember(req, memo_key, ahead.records, p, Written.of(done.appended.version, prepared.profile.system))
    return Reconciled(p, ahead.appended, None if done.appended.replayed else done.appended)


def settle(ahead: Ahead, chains: list[str]) -> tuple[Reconciled, Exception | None]:
    """Store a request served ahead, once its prompt has gone upstream: its commit (commit_ahead),
    or, when that cannot be (another write reached the session after the render, the database
    failed), the ordinary reconcile of its history (what a later request would store), and the
    exception that stopped the commit. Raises what stops the ordinary reconcile too; nothing of
    the request is stored then, what this process last wrote is forgotten (so the conversation's
    next request takes the ordinary path, which answers what stops it before any call), and the
    client's next request, which carries this history, stores it."""
    try:
        return commit_ahead(ahead), None
    except Exception as exc:
        stopped = exc
    # what is stored now may not be the prompt that went upstream: the thinking produced on that
    # prompt is not served again (the epoch's next fetch serves it anew, without the tail's)
    req = ahead.req
    pk = req.res.cache.pks.get((req.tenant_id, ahead.plan.session_id))
    if pk is not None:
        req.res.cache.prompts.reset_served_from(pk, ahead.served.epoch)
    try:
        return reconcile(ahead.req, chains, memory_note=False), stopped
    except Exception:
        if ahead.req.records is not None:
            ahead.req.records.unwritten((ahead.req.tenant_id, ahead.req.conversation.key))
        raise


def _pairs_with(messages: list[Any], start: int, prepared: Prepared) -> bool:
    """Whether the new turns pair with the stored history's tool calls (check_window, the append's
    own check under the session lock), read from the client's copy of that history (its first
    `start` messages): the session holds it (the plan extends its record's chain), so no read is
    needed before the call."""
    # the window the append's check reads from the store (window_messages), from the client's copy
    j = window_start(lambda k: messages[k].get("role"), start, max(0, start - WINDOW_TURNS))
    try:
        # as stored: normalized (a blank text block dropped, string content as a block)
        stored = [] if j is None else list(map(normalize_message, messages[j:start]))
        window = [EARLIER, *({"role": r, "content": list(c)} for r, c in stored)]
        check_window(window, [t.as_message() for t in prepared.turns])
    except (BrokenConversation, InvalidTranscript):
        return False
    return True


def _rendered_from(version: int, profile: Profile) -> Callable[[Any], None]:
    def check(session: Any) -> None:
        kept = all(
            getattr(profile, k) in (None, getattr(session, k))
            for k in ("context_window", "output_reserve", "system")
        )
        if session.version != version or not kept:
            raise StaleAhead(session.client_id)

    return check


def _remember(
    req: Proxied,
    memo_key: Hashable,
    records: Sequence[Record],
    p: Plan | None,
    written: Written | None = None,
) -> None:
    if req.records is None:
        return
    if p is None:
        req.records.put(memo_key, records)
    else:
        req.records.moved(memo_key, records, p, written)


def _linked(req: Proxied, p: Plan) -> Plan:
    """A new conversation under a client session that already has one (Claude Code's sub-agents,
    started from the main conversation): its session is linked to that conversation's session."""
    conversation = req.conversation
    client = conversation.parent_client_session or conversation.client_session
    if client is None or p.parent_session_id is not None:
        return p
    parent = main_session(req.res.engine, req.tenant_id, client_prefix(client), conversation.key)
    return p if parent is None else replace(p, parent_session_id=parent)


def _store(req: Proxied, p: Plan, messages: list[Any], *, memory_note: bool = True) -> Written | None:
    """Append `messages` to the plan's session, the record moving in the same transaction; what it
    left the session at."""
    done = append_messages(
        req.res,
        req.tenant_id,
        p.session_id,
        append_body(req.body, messages, p, req.context_window, req.tools),
        idempotency_key=None,
        activity=None,
        enqueue=req.enqueue,
        locked=claim(req.tenant_id, req.conversation.key, p),
        memory_note=memory_note,
    )
    return Written.of(done.appended.version, done.profile.system)


def _log_plan(req: Proxied, p: Plan, messages: int) -> None:
    if p.kind == "diverged":
        log.warning(
            "proxy.diverged",
            tenant_id=req.tenant_id,
            conversation=req.conversation.key,
            session_id=p.session_id,
            parent_session_id=p.parent_session_id,
            covered=p.expected.messages if p.expected else 0,
            messages=messages,
        )
        req.res.cache.counters.count("proxy_diverged")
    elif p.kind == "new":
        log.info(
            "proxy.conversation_started",
            tenant_id=req.tenant_id,
            session_id=p.session_id,
            source=req.conversation.source,
        )


def record_reply(
    req: Proxied, served_from: Plan, stored: list[dict[str, Any]], client_message: dict[str, Any]
) -> bool:
    """Append the response (server-side rounds included) and move the record past the client's
    copy of it; False when the conversation moved on meanwhile (the client's next request carries it)."""
    before = served_from.after
    after = Record(
        before.session_id, before.messages + 1, fingerprints.extend_hex(before.chain, client_message)
    )
    moved = Plan("extend", before.session_id, before.messages, before, after)
    try:
        # stored as the upstream saw them (the rounds' tool results went up in their requests)
        written = _store(req, moved, stored, memory_note=False)
    except (StalePlan, SessionGone, SessionTaken):
        log.info(
            "proxy.reply_unrecorded",
            tenant_id=req.tenant_id,
            session_id=before.session_id,
            reason="conversation moved on",
        )
        return False
    if req.records is not None:
        memo_key = (req.tenant_id, req.conversation.key)
        req.records.moved(memo_key, req.records.known(memo_key), moved, written)
    return True
