"""Serving a prompt: the cached snapshot's JSON bytes plus the tail from the DB, spliced, never waiting.

The big, stable part (system and all snapshot messages but the last) is stored as final JSON bytes
and copied into the response unchanged; only the last snapshot message, the tail and the status
note are parsed and serialized per fetch, so the cost follows the tail, not the session.

A fetch never serves more than the budget: when the snapshot plus the tail would pass it (the
worker down or behind), it serves the summary prepared ahead plus its tail if that fits, else a
deterministic fit computed on the spot (no LLM), and says so in `fallback`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from worker.cache.cache import Cache
from worker.cache.prompts import Entry
from worker.compaction.assemble import (
    DB_NOTE_TOKENS,
    MEMORY_NOTE_TOKENS,
    FileInfo,
    assemble,
    finish,
    note_tokens,
    served_tokens,
    status_note,
)
from worker.compaction.codec import transcript_from_json
from worker.compaction.epochs import fit_fallback
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.tokens import count_text
from worker.memory.model import clip_note
from worker.store import fetch as reads
from worker.store.db import read_tx
from worker.store.files import file_infos, last_read_id, save_files
from worker.store.memory import changes_since, load_items, render
from worker.store.sessions import load_turns
from worker.store.snapshots import latest_snapshot, load


@dataclass(frozen=True, slots=True)
class Served:
    body: bytes  # the response JSON
    source: str  # "cache" or "db"
    epoch: int
    version: int
    request_bytes: int = 0  # system + messages, as a provider reads them for caching
    stable_bytes: int = 0  # of which before the volatile status note: what the next fetch repeats
    tokens: int = 0
    budget_tokens: int = 0
    fallback: str | None = None  # "pending" or "fit" when the published snapshot + tail would not fit

    @property
    def fits(self) -> bool:
        return self.tokens <= self.budget_tokens


def entry_from_prompt(
    prompt: dict[str, Any],
    *,
    epoch: int,
    through: int,
    memver: int,
    tokens: int,
    files: Sequence[FileInfo],
    memory_note: str = "",
) -> Entry:
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
        files=encode_files(files),
        memory_note=memory_note.encode(),
    )


def encode_files(files: Sequence[FileInfo]) -> bytes:
    """The status note's file list as the cache entry keeps it."""
    return orjson.dumps([[f.ref, f.kind, f.lines, list(f.read_ranges)] for f in files])


@functools.lru_cache(maxsize=128)
def note_files(files: bytes) -> tuple[int, tuple[FileInfo, ...]]:
    """What the status note needs of an entry's file list: how many files, and those read.

    Decoded once per list (cached): a session's fetches repeat the list until its next read or
    compaction, and decoding it was most of a fetch's note cost (200 files: ~30 us). The newest
    128 lists are kept (~10 MB if each had 1,000 files); an older one is decoded again."""
    listed = orjson.loads(files)
    return len(listed), tuple(FileInfo(r, k, n, tuple(reads)) for r, k, n, reads in listed if reads)


def refresh_status_files(engine: Engine, cache: Cache, session_pk: int) -> bool:
    """After a file read: the cached entry's file list from the DB, so the next fetch's status note
    shows the read at once (not only after the next compaction)."""
    seen = cache.prompts.position(session_pk)
    if seen is None:
        # nothing cached: fetches assemble from the DB, which has the read
        return False
    with read_tx(engine) as conn:
        files = file_infos(conn, session_pk)
        reads = last_read_id(conn, session_pk)
    return cache.prompts.refresh_files(session_pk, seen, encode_files(files), reads)


def render_body(
    client_id: str,
    version: int,
    entry: Entry,
    tail: Sequence[tuple[str, Any, int]],
    policy: Policy,
    fallback: str | None = None,
) -> tuple[bytes, int, int, int]:
    """The prompt response: snapshot fragments + tail merged onto the last message + status note.

    Also returns the request's byte length, how many of its leading bytes come before the note,
    and its tokens (snapshot, tail and note).
    """
    end = [orjson.loads(entry.last)] if entry.last else []
    end += [{"role": role, "content": content} for role, content, _ in tail]
    tokens = entry.tokens + sum(t for _, _, t in tail)
    file_count, read = note_files(entry.files)
    note = status_note(tokens, policy.budget_tokens, file_count, read, entry.memory_note.decode())
    end = finish(end, note)
    has_note = bool(end) and end[-1]["role"] == "user" and end[-1]["content"][-1].get("text") == note
    # an imported history can end with the model's own turn: the request then asks it to continue
    prefill = bool(end) and end[-1]["role"] == "assistant"
    tokens += note_tokens(note) if has_note else 0
    parts = [entry.head] if entry.head else []
    parts += [orjson.dumps(m) for m in end]
    # the messages go into the body as parts, not joined first: one copy of the head, not two
    messages = list(_joined(parts, b","))
    request_bytes = len(entry.system) + sum(map(len, messages))
    # the note is the last block of the last message: `,{note}]}` is all that differs next time
    note_bytes = len(orjson.dumps({"type": "text", "text": note})) + 3 if has_note else 0
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
    return body, request_bytes, request_bytes - note_bytes, tokens


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
    tail: Sequence[tuple[str, Any, int]],
    policy: Policy,
    source: str,
    fallback: str | None = None,
) -> Served:
    body, total, stable, tokens = render_body(client_id, version, entry, tail, policy, fallback)
    return Served(body, source, entry.epoch, version, total, stable, tokens, policy.budget_tokens, fallback)


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
        if head[0] == pk and entry.epoch >= head[2] and entry.memver >= head[3]:
            policy = policy_for(head[4], head[5])
            tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
            return _served(client_id, head[1], entry, tail, policy, "cache")
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
    cached: tuple[int, Entry],
    tenant_id: int,
    client_id: str,
    policy_for: Any,
    turns: Sequence[Turn],
    profile: tuple[int | None, int | None],
) -> Served | None:
    """What fetch_ready will serve once `turns` (ingested, their transaction not yet run) are the
    session's next turns, rendered now from its cached entry (`cached_entry`): the same render over
    the same rows.

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
    current = head[0] == pk and entry.epoch >= head[2] and entry.memver >= head[3]
    if not current or window not in (None, head[4]) or reserve not in (None, head[5]):
        return None
    tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
    tail += [(t.role, list(t.content), t.tokens) for t in turns]
    served = _served(client_id, head[1] + len(turns), entry, tail, policy_for(head[4], head[5]), "cache")
    return served if served.fits else None


def _from_cache_alone(cache: Cache, pk: int, client_id: str, entry: Entry, policy_for: Any) -> Served | None:
    """The cached entry served without the database, when it covers the newest acknowledged append
    (noted in Redis by the append, after its commit); None when that cannot be shown."""
    noted = cache.prompts.noted_version(pk)
    if noted is None or entry.through < noted[0]:
        return None
    version, window, reserve = noted
    return _served(client_id, version, entry, [], policy_for(window, reserve), "cache")


def fallback(
    engine: Engine, cache: Cache | None, tenant_id: int, client_id: str, policy_for: Any
) -> Served | None:
    """Snapshot + tail would pass the budget: the summary prepared ahead plus its tail, if that
    fits; else a fit computed now from the snapshot state and the tail (deterministic, no LLM)."""
    pk = session_pk(engine, tenant_id, client_id, cache) if cache is not None else None
    pending = cache.pending.entry(pk) if cache is not None and pk is not None else None
    if pending is not None:
        rows = reads.tail_rows(engine, tenant_id, client_id, pending.through)
        if rows and rows[0][0] == pk and pending.memver >= rows[0][3]:
            head = rows[0]
            tail = [(r[6], orjson.loads(r[7]), r[8]) for r in rows if r[6] is not None]
            served = _served(
                client_id, head[1], pending, tail, policy_for(head[4], head[5]), "pending", "pending"
            )
            if served.fits:
                return served
    if pk is None:
        with read_tx(engine) as conn:
            pk = reads.find_pk(conn, tenant_id, client_id)
    loaded = load(engine, pk, policy_for(None, None).memory_budget_tokens) if pk is not None else None
    # the pk may come from the API process's memo: it must still be this tenant's session
    if loaded is None or (loaded.session.tenant_id, loaded.session.client_id) != (tenant_id, client_id):
        return None
    row, snap = loaded.session, loaded.snapshot
    # the published prefix's memory block and the changes since, as a fetch from the snapshot
    # serves them
    state = loaded.state()
    pinned, pinned_version = loaded.pinned(state)
    changes = changes_after(engine, row, pinned_version)
    policy = policy_for(row.context_window, row.output_reserve)
    current, note = fallback_memory(loaded.current(state, memory=pinned), loaded.memory, changes)
    fitted, note = fit_fallback(current, loaded.memory, note, policy)
    if fitted.files:
        save_files(engine, row.tenant_id, row.id, fitted.files)  # content-addressed: a repeat writes nothing
    with read_tx(engine) as conn:
        files = file_infos(conn, row.id)
    epoch = snap.epoch if snap else 0
    through = loaded.tail[-1].seq if loaded.tail else (snap.through_seq if snap else 0)
    entry = entry_from_prompt(
        assemble(replace(fitted, files=())),
        epoch=epoch,
        through=through,
        memver=row.memory_version,
        tokens=served_tokens(fitted),
        files=files,
        memory_note=note,
    )
    return _served(client_id, row.version, entry, [], policy, "fit", "fit")


def changes_after(engine: Engine, session: Any, pinned_version: int) -> str:
    """The working-memory changes since the pinned block's version, uncut; "" (no read) when the
    session's memory is still at that version. The job's and a fetch's fit start from them."""
    if pinned_version >= session.memory_version:
        return ""
    with read_tx(engine) as conn:
        return changes_since(conn, session.id, pinned_version, 1 << 30)


def fallback_memory(current: Transcript, fresh_memory: str, changes: str) -> tuple[Transcript, str]:
    """The memory a fetch's fit starts from, by the job's rule (`compact.refreshes_memory`): the
    pinned block and the changes since it (`changes`, uncut) within the note's room, unless they
    have outgrown it: then the block as it is now, and no note."""
    if outgrows_note(changes):
        return replace(current, memory=fresh_memory), ""
    return current, clip_note(changes, MEMORY_NOTE_TOKENS)


def outgrows_note(changes: str) -> bool:
    """Whether the memory changes since the pinned block pass the status note's room: the block
    is then rendered afresh (at a job's new epoch, or a fetch's fit) rather than noted."""
    return count_text(changes) > MEMORY_NOTE_TOKENS


def _from_db(conn: Connection, client_id: str, session: Any, policy: Policy) -> Served:
    snap = latest_snapshot(conn, session.id)
    system = reads.system_of(conn, session.id)
    if snap is None:
        memory = render(load_items(conn, session.id), policy.memory_budget_tokens)
        state, through, epoch, note = Transcript(system=system, memory=memory, turns=()), 0, 0, ""
    else:
        # the snapshot's pinned memory block stays (the cached prefix); what changed since is noted
        state = replace(transcript_from_json(orjson.loads(snap.state)), system=system)
        through, epoch = snap.through_seq, snap.epoch
        # the turns kept room for the note the job published, not for one that grew since (a memory
        # write from the API): this path notes at most what the flat room always held
        note = changes_since(conn, session.id, snap.pinned_memory_version, DB_NOTE_TOKENS)
    tokens = served_tokens(state)
    if snap is not None and snap.memory_version == session.memory_version:
        prompt = orjson.loads(snap.prompt)
    else:
        prompt = assemble(state)
    entry = entry_from_prompt(
        prompt,
        epoch=epoch,
        through=through,
        memver=session.memory_version,
        tokens=tokens,
        files=file_infos(conn, session.id),
        memory_note=note,
    )
    tail = [(t.role, list(t.content), t.tokens) for t in load_turns(conn, session.id, through)]
    return _served(client_id, session.version, entry, tail, policy, "db")


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
