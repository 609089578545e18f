"""Serving a prompt: the cached snapshot's JSON bytes plus the tail from the DB, spliced, never waiting.

The big, stable part (system and all snapshot messages but the last) is stored as final JSON bytes
and copied into the response unchanged; only the last snapshot message, the tail and the status
note are parsed and serialized per fetch, so the cost follows the tail, not the session.

A fetch adds nothing of its own but cache breakpoints: within an epoch each prompt extends the one
before, as the provider compares them (the memory changes ride in the turns they were appended
with). With a model that binds thinking to its prefix, the turns after the snapshot carry their
thinking only from the version the epoch was first served at (`Entry.served_from`, claimed by the
epoch's first fetch): the ones before were produced on an earlier prompt (worker/compaction/thinking.py).

A fetch never serves more than the budget: when the snapshot plus the tail would pass it (the
worker down or behind), it serves the summary prepared ahead plus its tail if that fits, else a
deterministic fit computed on the spot (no LLM), and says so in `fallback`. A fallback is a
rewrite: it carries no thinking, and the epoch's next fetch is served anew (`reset_served_from`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from worker.cache.cache import Cache
from worker.cache.prompts import Entry
from worker.compaction.assemble import assemble, finish, served_tokens
from worker.compaction.codec import transcript_from_json
from worker.compaction.epochs import fit_fallback
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.thinking import THINKING, binds_thinking, strip_all, without_thinking
from worker.store import fetch as reads
from worker.store.db import read_tx
from worker.store.files import save_files
from worker.store.sessions import load_turns, noted
from worker.store.snapshots import latest_snapshot, load


@dataclass(frozen=True, slots=True)
class Served:
    body: bytes  # the response JSON
    source: str  # "cache" or "db"
    epoch: int
    version: int
    request_bytes: int = 0  # system + messages, as a provider reads them for caching
    stable_bytes: int = 0  # of which the next fetch repeats (all of it: a fetch adds nothing volatile)
    tokens: int = 0
    budget_tokens: int = 0
    fallback: str | None = None  # "pending" or "fit" when the published snapshot + tail would not fit
    # the entry served, its `served_from` known once this fetch claimed it (for the API's EntryMemo)
    entry: Entry | None = None

    @property
    def fits(self) -> bool:
        return self.tokens <= self.budget_tokens


def entry_from_prompt(prompt: dict[str, Any], *, epoch: int, through: int, memver: int, tokens: int) -> Entry:
    """Split an assembled {system, messages} into the fragments the fetch path splices."""
    messages = prompt["messages"]
    return Entry(
        epoch=epoch,
        through=through,
        memver=memver,
        system=orjson.dumps(prompt["system"]),
        head=b",".join(orjson.dumps(m) for m in messages[:-1]),
        last=orjson.dumps(messages[-1]) if messages else b"",
        tokens=tokens,
    )


Tail = Sequence[tuple[str, Any, int]]  # (role, content blocks, tokens) of the turns after the snapshot


def served_tail(
    tail: Tail, first_seq: int, served_from: int | None
) -> tuple[list[tuple[str, Any, int]], int]:
    """The turns after the snapshot as the epoch serves them to a model that binds thinking: the
    thinking of every turn up to `served_from` dropped (None: of every turn), and the tokens that
    took off. `first_seq` is the first tail turn's seq (the tail is contiguous)."""
    out, removed = [], 0
    for k, (role, content, tokens) in enumerate(tail):
        produced_before = served_from is None or first_seq + k <= served_from
        if role == "assistant" and produced_before and any(b.get("type") in THINKING for b in content):
            kept, fewer = without_thinking(content)
            out.append((role, list(kept), tokens - fewer))
            removed += fewer
        else:
            out.append((role, content, tokens))
    return out, removed


def render_body(
    client_id: str,
    version: int,
    entry: Entry,
    tail: Tail,
    policy: Policy,
    fallback: str | None = None,
) -> tuple[bytes, int, int, int]:
    """The prompt response: snapshot fragments + tail merged onto the last message, with the fetch's
    breakpoints. Also returns the request's byte length (twice: all of it is stable, what the next
    fetch repeats) and its tokens (snapshot and tail)."""
    end = [orjson.loads(entry.last)] if entry.last else []
    end += [{"role": role, "content": content} for role, content, _ in tail]
    tokens = entry.tokens + sum(t for _, _, t in tail)
    end = finish(end)
    # an imported history can end with the model's own turn: the request then asks it to continue
    prefill = bool(end) and end[-1]["role"] == "assistant"
    parts = [entry.head] if entry.head else []
    parts += [orjson.dumps(m) for m in end]
    # the messages go into the body as parts, not joined first: one copy of the head, not two
    messages = list(_joined(parts, b","))
    request_bytes = len(entry.system) + sum(map(len, messages))
    body = b"".join(
        (
            b'{"session_id":',
            orjson.dumps(client_id),
            b',"version":%d,"epoch":%d,"compacted_through":%d,"token_count":%d,"budget_tokens":%d'
            % (version, entry.epoch, entry.through, tokens, policy.budget_tokens),
            b',"fallback":',
            orjson.dumps(fallback),
            b',"prefill":',
            b"true" if prefill else b"false",
            b',"system":',
            entry.system,
            b',"messages":[',
            *messages,
            b"]}",
        )
    )
    return body, request_bytes, request_bytes, tokens


def _joined(parts: Sequence[bytes], separator: bytes) -> Iterator[bytes]:
    """`parts` with `separator` between them, as separate pieces (for one b"".join)."""
    for i, part in enumerate(parts):
        if i:
            yield separator
        yield part


def _served(
    client_id: str,
    version: int,
    entry: Entry,
    tail: Tail,
    policy: Policy,
    source: str,
    fallback: str | None = None,
    *,
    binds: bool = False,
) -> Served:
    """The response for `entry` plus `tail`; with `binds` (a model that binds thinking to its prefix)
    the tail's thinking as the epoch serves it (served_tail; a fallback serves none)."""
    if binds:
        tail, _ = served_tail(tail, entry.through + 1, None if fallback else entry.served_from)
    body, total, stable, tokens = render_body(client_id, version, entry, tail, policy, fallback)
    return Served(
        body, source, entry.epoch, version, total, stable, tokens, policy.budget_tokens, fallback, entry
    )


def claimed(cache: Cache | None, pk: int, entry: Entry, version: int, binds: bool) -> Entry:
    """`entry` with its `served_from`: known, or claimed by this fetch (the epoch's first), when the
    model binds thinking (otherwise nothing depends on it). Left None when Redis did not answer:
    the tail then serves no thinking, which is always valid."""
    if not binds or entry.served_from is not None or cache is None:
        return entry
    return replace(entry, served_from=cache.prompts.claim_served_from(pk, entry.epoch, version))


def fetch(
    engine: Engine, cache: Cache | None, tenant_id: int, client_id: str, policy_for: Any
) -> Served | None:
    """The session's prompt: every appended turn, from the cache when it is current, else from the
    DB; within the budget always (see the module docstring)."""
    served = fetch_ready(engine, cache, tenant_id, client_id, policy_for)
    if served is None or served.fits:
        return served
    return fallback(engine, cache, tenant_id, client_id, policy_for)


def fetch_ready(
    engine: Engine,
    cache: Cache | None,
    tenant_id: int,
    client_id: str,
    policy_for: Any,
    prefetched: tuple[int, Entry | None] | None = None,
) -> Served | None:
    """Snapshot + tail as published, whether or not it fits (the cheap path, a bounded read).

    `prefetched`: (session pk, its cached entry) already read from Redis (with the key check).
    """
    entry, pk = None, None
    if cache is not None:
        pk = session_pk(engine, tenant_id, client_id, cache)
        if pk is None:
            return None
        entry = prefetched[1] if prefetched is not None and prefetched[0] == pk else cache.prompts.get(pk)
    after = entry.through if entry else 0
    if entry is not None:
        try:
            rows = reads.tail_rows(engine, tenant_id, client_id, after)
        except DBAPIError:
            # the database is down: the cached entry alone, if it provably holds every append
            served = _from_cache_alone(cache, pk, client_id, entry, policy_for)  # type: ignore[arg-type]
            if served is None:
                raise
            return served
        if not rows:
            return None
        head = rows[0]
        if head[0] == pk and entry.epoch >= head[2]:
            policy = policy_for(head[4], head[5])
            tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
            binds = binds_thinking(head[9])
            entry = claimed(cache, pk, entry, head[1], binds)  # type: ignore[arg-type]
            return _served(client_id, head[1], entry, tail, policy, "cache", binds=binds)
    with read_tx(engine) as conn:
        rows = reads.tail_rows_in(conn, tenant_id, client_id, after)
        if not rows:
            return None
        head = rows[0]
        return _from_db(conn, client_id, head, policy_for(head.context_window, head.output_reserve))


def cached_entry(engine: Engine, cache: Cache, tenant_id: int, client_id: str) -> tuple[int, Entry] | None:
    """The session's pk and its cached prompt entry; None when it has none (or no such session)."""
    pk = session_pk(engine, tenant_id, client_id, cache)
    entry = cache.prompts.get(pk) if pk is not None else None
    return None if pk is None or entry is None else (pk, entry)


def fetch_ahead(
    engine: Engine,
    cache: Cache | None,
    cached: tuple[int, Entry],
    tenant_id: int,
    client_id: str,
    policy_for: Any,
    turns: Sequence[Turn],
    profile: tuple[int | None, int | None],
) -> tuple[Served, list[Turn], int | None] | None:
    """What fetch_ready will serve once `turns` (ingested, their transaction not yet run) are the
    session's next turns, rendered now from its cached entry (`cached_entry`): the same render over
    the same rows. With it the turns as they will be stored: the last one with the memory note it
    is due (the append's rule, worker/store/sessions.py `noted`), and the memory version that note
    covers (None: no note was due).

    None when that cannot be shown here: the entry is not current, the append changes the
    session's window or reserve (`profile`: the append's, None where it keeps the session's), or it
    would not fit (the ordinary path then picks the fallback).
    """
    pk, entry = cached
    rows = reads.tail_rows(engine, tenant_id, client_id, entry.through)
    if not rows:
        return None
    head = rows[0]
    window, reserve = profile
    current = head[0] == pk and entry.epoch >= head[2]
    if not current or window not in (None, head[4]) or reserve not in (None, head[5]):
        return None
    noted_to = None
    if head[3] > head[10] and turns and turns[-1].role == "user":
        with read_tx(engine) as conn:
            turns, noted_to = noted(conn, pk, head[10], turns, observed=bool(head[11])), head[3]
    tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
    tail += [(t.role, list(t.content), t.tokens) for t in turns]
    version, binds = head[1] + len(turns), binds_thinking(head[9])
    entry = claimed(cache, pk, entry, version, binds)
    served = _served(client_id, version, entry, tail, policy_for(head[4], head[5]), "cache", binds=binds)
    return (served, list(turns), noted_to) if served.fits else None


def _from_cache_alone(cache: Cache, pk: int, client_id: str, entry: Entry, policy_for: Any) -> Served | None:
    """The cached entry served without the database, when it covers the newest acknowledged append
    (noted in Redis by the append, after its commit); None when that cannot be shown."""
    noted = cache.prompts.noted_version(pk)
    if noted is None or entry.through < noted[0]:
        return None
    version, window, reserve = noted
    # the turns after its snapshot, not known here, are all it could drop thinking from
    return _served(client_id, version, entry, [], policy_for(window, reserve), "cache")


def fallback(
    engine: Engine, cache: Cache | None, tenant_id: int, client_id: str, policy_for: Any
) -> Served | None:
    """Snapshot + tail would pass the budget: the summary prepared ahead plus its tail, if that
    fits; else a fit computed now from the snapshot state and the tail (deterministic, no LLM).
    Either is a rewrite: with a model that binds thinking it carries none, and the epoch's next
    fetch serves it anew (the turns produced meanwhile answer this prompt)."""
    pk = session_pk(engine, tenant_id, client_id, cache) if cache is not None else None
    pending = cache.pending.entry(pk) if cache is not None and pk is not None else None
    if pending is not None:
        rows = reads.tail_rows(engine, tenant_id, client_id, pending.through)
        if rows and rows[0][0] == pk:
            head = rows[0]
            tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
            binds = binds_thinking(head[9])
            served = _served(
                client_id,
                head[1],
                pending,
                tail,
                policy_for(head[4], head[5]),
                "pending",
                "pending",
                binds=binds,
            )
            if served.fits:
                _served_elsewhere(cache, pk, head[2], binds)  # type: ignore[arg-type]
                return served
    if pk is None:
        with read_tx(engine) as conn:
            pk = reads.find_pk(conn, tenant_id, client_id)
    loaded = load(engine, pk, policy_for(None, None).memory_budget_tokens) if pk is not None else None
    # the pk may come from the API process's memo: it must still be this tenant's session
    if loaded is None or (loaded.session.tenant_id, loaded.session.client_id) != (tenant_id, client_id):
        return None
    row, snap = loaded.session, loaded.snapshot
    # the published prefix's memory block, as a fetch from the snapshot serves it
    state = loaded.state()
    pinned, _ = loaded.pinned(state)
    policy = policy_for(row.context_window, row.output_reserve)
    fitted = fit_fallback(loaded.current(state, memory=pinned), loaded.memory, policy)
    if fitted.files:
        save_files(engine, row.tenant_id, row.id, fitted.files)  # content-addressed: a repeat writes nothing
    binds = binds_thinking(row.model)
    if binds:
        fitted = strip_all(fitted)
    epoch = snap.epoch if snap else 0
    through = loaded.tail[-1].seq if loaded.tail else (snap.through_seq if snap else 0)
    entry = entry_from_prompt(
        assemble(replace(fitted, files=())),
        epoch=epoch,
        through=through,
        memver=row.memory_version,
        tokens=served_tokens(fitted),
    )
    _served_elsewhere(cache, row.id, epoch, binds)
    return _served(client_id, row.version, entry, [], policy, "fit", "fit")


def _served_elsewhere(cache: Cache | None, pk: int, epoch: int, binds: bool) -> None:
    """A fallback was served instead of the epoch's prompt: its next fetch serves it anew."""
    if binds and cache is not None:
        cache.prompts.reset_served_from(pk, epoch)


def _from_db(conn: Connection, client_id: str, session: Any, policy: Policy) -> Served:
    """The prompt from the database (no current entry cached): the snapshot's as published, its
    memory block the one it pinned (none before the first snapshot: the changes are in the turns'
    notes until a rewrite from the top renders one). The turns after the snapshot serve thinking
    only in epoch 0 (never rewritten): elsewhere the version the epoch was first served at is
    Redis's, not known here."""
    snap = latest_snapshot(conn, session.id)
    system = reads.system_of(conn, session.id)
    if snap is None:
        state, through, epoch = Transcript(system=system, turns=()), 0, 0
        prompt = assemble(state)
    else:
        published = transcript_from_json(orjson.loads(snap.state))
        state = replace(published, system=system)
        through, epoch = snap.through_seq, snap.epoch
        if published.system != system and binds_thinking(session.model):
            state = strip_all(state)  # the top changed: no block is on its own prefix any more
        # a new system prompt (not compacted yet) is served at once
        prompt = orjson.loads(snap.prompt) if published.system == system else assemble(state)
    tokens = served_tokens(state)
    entry = entry_from_prompt(
        prompt, epoch=epoch, through=through, memver=session.memory_version, tokens=tokens
    )
    if epoch == 0:
        entry = replace(entry, served_from=0)
    tail = [(t.role, list(t.content), t.tokens) for t in load_turns(conn, session.id, through)]
    return _served(client_id, session.version, entry, tail, policy, "db", binds=binds_thinking(session.model))


def session_pk(engine: Engine, tenant_id: int, client_id: str, cache: Cache) -> int | None:
    # A session's pk never changes while it exists; a stale one (deleted elsewhere) only costs a
    # cache miss, because fetch() checks it against the row it reads.
    key = (tenant_id, client_id)
    pks = cache.pks
    pk = pks.get(key)
    if pk is None:
        with read_tx(engine) as conn:
            pk = reads.find_pk(conn, tenant_id, client_id)
        if pk is None:
            return None
        if len(pks) > 100_000:
            pks.clear()
        pks[key] = pk
    return pk


def request_prefix(entry: Entry) -> bytes:
    """The snapshot's part of the request bytes (system, then messages), for reuse accounting."""
    return entry.system + entry.head + (b"," if entry.head and entry.last else b"") + entry.last


def forget(cache: Cache, tenant_id: int, client_id: str) -> None:
    cache.pks.pop((tenant_id, client_id), None)
