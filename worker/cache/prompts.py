"""Prompt entries in Redis: a published snapshot as the fetch path splices it, written only forward."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Literal

from worker.cache.client import GuardedRedis

# Every write of an entry (a publish, a refill, a reset of `served_from`) stores a new random
# `rev`: a process that holds a copy knows it is current when the rev in Redis is still the copy's.
# Write only if (epoch, through, memver) is newer than what is cached: a late result never wins.
# A new epoch has not been served yet: its `served_from` goes (epoch 0 rewrote nothing: 0).
_PUBLISH = """
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'through', 'memver')
local ce, ct, cm = tonumber(cur[1] or '-1'), tonumber(cur[2] or '-1'), tonumber(cur[3] or '-1')
local e, t, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if ce > e or (ce == e and (ct > t or (ct == t and cm >= m))) then return 0 end
if ce ~= e then redis.call('HDEL', KEYS[1], 'served_from') end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'through', ARGV[2], 'memver', ARGV[3], 'system', ARGV[4],
           'head', ARGV[5], 'last', ARGV[6], 'tokens', ARGV[7], 'rev', ARGV[8])
if e == 0 then redis.call('HSETNX', KEYS[1], 'served_from', 0) end
return 1
"""
# The first fetch of an epoch: the version it serves is the epoch's `served_from` (the turns up to
# it were produced under an earlier prompt), set once; the value in Redis is returned (nil: the
# entry is no longer at that epoch).
_CLAIM_SERVED_FROM = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return false end
redis.call('HSETNX', KEYS[1], 'served_from', ARGV[2])
return redis.call('HGET', KEYS[1], 'served_from')
"""
# A fetch served something else (a fallback): the epoch's next fetch serves it anew
_RESET_SERVED_FROM = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'served_from')
redis.call('HSET', KEYS[1], 'rev', ARGV[2])
return 1
"""

# The newest acknowledged append (and the session's window): what a fetch must cover when it is
# served from the cache alone (the database down). Only ever moves forward.
_NOTE_VERSION = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'window', ARGV[2], 'reserve', ARGV[3])
return 1
"""

# what a publish writes; a read also takes `served_from` (READ)
FIELDS = ("epoch", "through", "memver", "system", "head", "last", "tokens")
READ = (*FIELDS, "served_from")
_MISSING: list[Any] = [None] * len(READ)  # an entry's values when Redis is skipped or down


@dataclass(frozen=True, slots=True)
class Entry:
    """A published snapshot as the fetch path splices it: JSON fragments, ready to concatenate."""

    epoch: int
    through: int
    memver: int
    system: bytes  # JSON array
    head: bytes  # messages[:-1] as comma-joined JSON objects (no brackets)
    last: bytes  # the last message as JSON ("" if none): the tail may merge into it
    tokens: int
    # the session version the epoch was first served at (None: not yet, or not known): the turns
    # after the snapshot up to it were produced under an earlier prompt, so their thinking, bound
    # to that prompt, is not served with this one (worker/compaction/thinking.py)
    served_from: int | None = None


def entry_values(entry: Entry) -> list[bytes | int]:
    """An entry's values in FIELDS order (what a publish writes)."""
    e = entry
    return [e.epoch, e.through, e.memver, e.system, e.head, e.last, e.tokens]


def entry_of(values: list[Any]) -> Entry | None:
    """The entry HMGET returned in READ (or FIELDS) order; None when there is none (or Redis was
    skipped)."""
    if values[0] is None:
        return None
    e, t, m, system, head, last, tokens = values[:7]
    served = values[7] if len(values) > 7 else None
    return Entry(
        int(e), int(t), int(m), system, head, last, int(tokens), None if served is None else int(served)
    )


def _note_args(version: int, context_window: int | None, output_reserve: int | None) -> list[Any]:
    return [version, context_window or "", output_reserve if output_reserve is not None else ""]


class PromptEntries:
    """Per-session prompt entries (`{prefix}prompt:<pk>`) and the newest acknowledged append."""

    def __init__(self, r: GuardedRedis) -> None:
        self.r = r
        self._publish = r.client.register_script(_PUBLISH)
        self._claim_served_from = r.client.register_script(_CLAIM_SERVED_FROM)
        self._reset_served_from = r.client.register_script(_RESET_SERVED_FROM)
        self._note_version = r.client.register_script(_NOTE_VERSION)

    def key(self, session_pk: int) -> str:
        return f"{self.r.prefix}prompt:{session_pk}"

    def get(self, session_pk: int) -> Entry | None:
        """The cached entry; None when missing or Redis is unreachable."""
        return entry_of(self.r.call(lambda: self.r.client.hmget(self.key(session_pk), READ), _MISSING))

    def refill(self, session_pk: int, entry: Entry) -> None:
        """Guarded write from the fetch path (the entry was missing, e.g. after a Redis restart);
        best effort."""
        self.r.call(lambda: self.put(session_pk, entry), False)

    def note_version(
        self, session_pk: int, version: int, context_window: int | None, output_reserve: int | None
    ) -> None:
        """After an acknowledged append: the version a prompt served without the database must
        cover. Best effort (a fetch that cannot prove it covers the newest append answers 503)."""
        args = _note_args(version, context_window, output_reserve)
        self.r.call(lambda: self._note_version(keys=[f"{self.r.prefix}version:{session_pk}"], args=args), 0)

    def note_version_command(
        self, session_pk: int, version: int, context_window: int | None, output_reserve: int | None
    ) -> tuple[Any, ...]:
        """note_version as one Redis command, for a caller that sends it on a connection of its own
        (the API's event loop: api/http/guard.py)."""
        key = f"{self.r.prefix}version:{session_pk}"
        return ("EVAL", _NOTE_VERSION, 1, key, *_note_args(version, context_window, output_reserve))

    def noted_version(self, session_pk: int) -> tuple[int, int | None, int | None] | None:
        """(version, context window, output reserve) as the last append noted them; None if unknown."""
        key = f"{self.r.prefix}version:{session_pk}"
        v, w, r = self.r.call(
            lambda: self.r.client.hmget(key, ("version", "window", "reserve")), _MISSING[:3]
        )
        if v is None:
            return None
        return int(v), int(w) if w else None, int(r) if r else None  # type: ignore[arg-type]

    def put(self, session_pk: int, entry: Entry) -> bool:
        """Guarded write; False when a newer entry is already cached."""
        return bool(self._publish(keys=[self.key(session_pk)], args=[*entry_values(entry), new_rev()]))

    def position(self, session_pk: int) -> tuple[int, int, int] | None:
        """(epoch, through, memver) of the cached entry; None when there is none or Redis is down."""
        fields = ("epoch", "through", "memver")
        e, t, m = self.r.call(lambda: self.r.client.hmget(self.key(session_pk), fields), _MISSING[:3])
        return None if e is None else (int(e), int(t), int(m))  # type: ignore[arg-type]

    def served_from(self, session_pk: int, epoch: int) -> int | None:
        """The version the entry's epoch was first served at; None when it has not been, the entry
        is at another epoch, or Redis is down (the job then keeps no thinking of the tail's)."""
        key = self.key(session_pk)
        e, served = self.r.call(lambda: self.r.client.hmget(key, ("epoch", "served_from")), _MISSING[:2])
        return int(served) if e is not None and int(e) == epoch and served is not None else None  # type: ignore[arg-type]

    def claim_served_from(self, session_pk: int, epoch: int, version: int) -> int | None:
        """The version the entry's epoch was first served at: `version` if this is its first fetch.
        None when the entry is no longer at `epoch`, or on a Redis error (not known)."""
        args = [epoch, version]
        found = self.r.call(lambda: self._claim_served_from(keys=[self.key(session_pk)], args=args), None)
        return None if found in (None, False) else int(found)

    def reset_served_from(self, session_pk: int, epoch: int) -> None:
        """A fetch served a fallback instead of the entry: the epoch's next fetch serves it anew
        (the turns produced meanwhile answer the fallback's prompt). Best effort."""
        args: list[bytes | int] = [epoch, new_rev()]
        self.r.call(lambda: self._reset_served_from(keys=[self.key(session_pk)], args=args), 0)


def new_rev() -> bytes:
    return os.urandom(8).hex().encode()


# What a fetch holding a copy checks instead of reading the entry: the rev, and the fields a writer
# that predates the rev (an older worker mid-upgrade) still moves on every write of its own
STAMP = ("rev", "epoch", "through", "memver")
# The entry unless it still has the stamp given (ARGV, in STAMP's order): 1 when it does, else its
# stamp and fields as one HMGET would answer (every one nil when there is no entry)
_UNLESS_STAMPED = (
    "local cur = redis.call('HMGET', KEYS[1], "
    + ", ".join(f"'{f}'" for f in STAMP)
    + ")\nfor i = 1, #ARGV do if cur[i] ~= ARGV[i] then return redis.call('HMGET', KEYS[1], "
    + ", ".join(f"'{f}'" for f in (*STAMP, *READ))
    + ") end end\nreturn 1"
)


class EntryMemo:
    """The prompt entries one API process served last, by session pk, with the stamp (`STAMP`)
    Redis held each at: a fetch holding a copy asks for the entry only if its stamp changed (one
    round trip either way), so an unchanged entry costs a few bytes instead of itself (150 KB at
    10,000 turns, 600 KB at a full 200k window). Bounded by the bytes it holds, least recently
    served out first. One per API process; event loop only."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.held = max_bytes, 0
        self.entries: OrderedDict[int, tuple[list[Any], Entry, int]] = OrderedDict()

    def read(self, prompts: PromptEntries, session_pk: int) -> tuple[Any, ...]:
        """The command for the round trip: the entry, or, when a copy is held, the entry unless it
        still has the copy's stamp."""
        key = prompts.key(session_pk)
        held = self.entries.get(session_pk)
        if held is None:
            return ("HMGET", key, *STAMP, *READ)
        return ("EVAL", _UNLESS_STAMPED, 1, key, *held[0])

    def answer(self, session_pk: int, reply: Any) -> Entry | Literal[False] | None:
        """The entry `reply` (to `read`'s command) stands for: the held copy when its stamp is
        still the one in Redis (1), the entry read along (held from now on), None when Redis has
        none, or False when the reply is an error (the caller reads the entry)."""
        if isinstance(reply, list) and len(reply) == len(STAMP) + len(READ):
            stamp, values = reply[: len(STAMP)], reply[len(STAMP) :]
            entry = entry_of(values)
            if entry is not None and all(v is not None for v in stamp):
                self._hold(session_pk, stamp, entry)
            else:
                self._drop(session_pk)
            return entry
        held = self.entries.get(session_pk)
        if held is not None and reply == 1:
            self.entries.move_to_end(session_pk)
            return held[1]
        self._drop(session_pk)
        return False

    def _hold(self, session_pk: int, stamp: list[Any], entry: Entry) -> None:
        self._drop(session_pk)
        size = len(entry.system) + len(entry.head) + len(entry.last)
        if size > self.max_bytes:
            return
        self.entries[session_pk] = (stamp, entry, size)
        self.held += size
        while self.held > self.max_bytes:
            self._drop(next(iter(self.entries)))

    def note_served_from(self, session_pk: int, served: Entry) -> None:
        """The held copy learns its `served_from` from the entry a fetch served (claimed then):
        claiming does not change the stamp, so the copy stays current."""
        held = self.entries.get(session_pk)
        if held is None or served.served_from is None or held[1].served_from is not None:
            return
        if (held[1].epoch, held[1].through) == (served.epoch, served.through):
            self.entries[session_pk] = (held[0], replace(held[1], served_from=served.served_from), held[2])

    def _drop(self, session_pk: int) -> None:
        held = self.entries.pop(session_pk, None)
        if held is not None:
            self.held -= held[2]
