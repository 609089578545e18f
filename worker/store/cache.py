"""Redis: the prompt cache (guarded writes), per-session locks and counters. Short timeouts throughout."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.store.breaker import Breaker
from worker.store.compact_requests import CompactRequests

log = structlog.get_logger("compactd.cache")
T = TypeVar("T")

# Write only if (epoch, through, memver) is newer than what is cached: a late result never wins.
_PUBLISH = """
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'through', 'memver')
local ce, ct, cm = tonumber(cur[1] or '-1'), tonumber(cur[2] or '-1'), tonumber(cur[3] or '-1')
local e, t, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if ce > e or (ce == e and (ct > t or (ct == t and cm >= m))) then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'through', ARGV[2], 'memver', ARGV[3], 'system', ARGV[4],
           'head', ARGV[5], 'last', ARGV[6], 'tokens', ARGV[7], 'files', ARGV[8], 'files_ver', 0,
           'memory_note', ARGV[9])
return 1
"""
# One fetch's cache reuse: the bytes it shares with the session's previous fetch. Within an epoch
# that is everything the previous fetch served before its status note; across epochs it is at most
# the prefix the worker found the old and new snapshots share (stored at publish).
_REUSE = """
local prev = redis.call('HMGET', KEYS[1], 'epoch', 'stable')
local epoch, total, stable = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local shared = 0
if prev[1] then
  shared = tonumber(prev[2])
  if tonumber(prev[1]) ~= epoch then
    local snap = redis.call('HMGET', KEYS[2], 'epoch', 'bytes')
    if snap[1] and tonumber(snap[1]) == epoch then shared = math.min(shared, tonumber(snap[2])) else shared = 0 end
  end
  shared = math.min(shared, total)
  local share = 0
  if total > 0 then share = shared / total end
  redis.call('HINCRBY', KEYS[1], 'fetches', 1)
  redis.call('HINCRBYFLOAT', KEYS[1], 'share_sum', share)
  if share >= 0.9 then redis.call('HINCRBY', KEYS[1], 'reused_90', 1) end
end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'stable', stable)
return tostring(shared)
"""
# A file was read: replace the entry's file list (the status note's "what has been read") only if
# the entry is still the one the list was computed against (a newer publish brings its own list)
# and the list has seen more reads than the one there (two reads may refresh in either order).
_REFRESH_FILES = """
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'through', 'memver', 'files_ver')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] and cur[3] == ARGV[3]
   and tonumber(cur[4] or '0') < tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[1], 'files', ARGV[4], 'files_ver', ARGV[5])
  return 1
end
return 0
"""

# The newest acknowledged append (and the session's window): what a fetch must cover when it is
# served from the cache alone (the database down). Only ever moves forward.
_NOTE_VERSION = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'window', ARGV[2], 'reserve', ARGV[3])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
FIELDS = ("epoch", "through", "memver", "system", "head", "last", "tokens", "files", "memory_note")
_MISSING: list[Any] = [None] * len(FIELDS)  # an entry's values when Redis is skipped or down


def make_redis(url: str, timeout_seconds: float = 0.25) -> redis.Redis:
    """A client that fails fast: short timeouts, no retries (redis-py's defaults take seconds)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        health_check_interval=0,
    )


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
    files: bytes  # JSON: [[ref, kind, lines, [read ranges]], ...]
    memory_note: bytes = b""  # memory changes since the pinned block, for the status note (UTF-8)


def _entry_values(entry: Entry) -> list[bytes | int]:
    """An entry's values in FIELDS order."""
    e = entry
    return [e.epoch, e.through, e.memver, e.system, e.head, e.last, e.tokens, e.files, e.memory_note]


def _entry(values: list[Any]) -> Entry | None:
    if values[0] is None:
        return None
    e, t, m, system, head, last, tokens, files, memory_note = values
    return Entry(int(e), int(t), int(m), system, head, last, int(tokens), files, memory_note or b"")


class PromptCache:
    """Per-session prompt entries, locks and service counters under one key prefix.

    Calls on the request path go through a circuit breaker: a failed call (dead, frozen or
    unreachable Redis, each failing within the client's short timeout) makes the next
    `cooldown_seconds` of calls skip Redis at once, then one call probes it again. Callers get
    their "nothing cached" answer meanwhile and read the database.
    """

    def __init__(self, client: redis.Redis, prefix: str = "compactd:", cooldown_seconds: float = 1.0):
        self.client = client
        self.prefix = prefix
        self.breaker = Breaker(cooldown_seconds, on_change=_log_circuit)
        self.pks: dict[tuple[int, str], int] = {}  # (tenant, client session id) -> session pk
        self._publish = client.register_script(_PUBLISH)
        self._release = client.register_script(_RELEASE)
        self._reuse = client.register_script(_REUSE)
        self._refresh_files = client.register_script(_REFRESH_FILES)
        self._note_version = client.register_script(_NOTE_VERSION)
        self.compact_requests = CompactRequests(client, prefix)

    def _try(self, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` when the breaker is open or Redis fails (unreachable or timing
        out opens it)."""
        if not self.breaker.allow():
            return default
        try:
            value = call()
        except (redis.ConnectionError, redis.TimeoutError):
            self.breaker.failed()
            return default
        except redis.RedisError:
            # the server answered (a script or type error): no reason to skip it
            self.breaker.succeeded()
            return default
        self.breaker.succeeded()
        return value

    @property
    def available(self) -> bool:
        """False while the breaker skips Redis (it failed less than a cool-down ago)."""
        return self.breaker.closed

    def key(self, session_pk: int) -> str:
        return f"{self.prefix}prompt:{session_pk}"

    def get(self, session_pk: int) -> Entry | None:
        """The cached entry; None when missing or Redis is unreachable."""
        return _entry(self._try(lambda: self.client.hmget(self.key(session_pk), FIELDS), _MISSING))

    def entry_read(self, session_pk: int) -> tuple[str, ...]:
        """The command `get` sends, for a caller that batches it with reads of its own."""
        return ("HMGET", self.key(session_pk), *FIELDS)

    @staticmethod
    def entry_of(reply: list[Any]) -> Entry | None:
        """The entry an `entry_read` reply holds; None when there is none."""
        return _entry(reply)

    def refill(self, session_pk: int, entry: Entry) -> None:
        """Guarded write from the fetch path (the entry was missing, e.g. after a Redis restart);
        best effort."""
        self._try(lambda: self.put(session_pk, entry), False)

    def note_version(
        self, session_pk: int, version: int, context_window: int | None, output_reserve: int | None
    ) -> None:
        """After an acknowledged append: the version a prompt served without the database must
        cover. Best effort (a fetch that cannot prove it covers the newest append answers 503)."""
        args = [version, context_window or "", output_reserve if output_reserve is not None else ""]
        self._try(lambda: self._note_version(keys=[f"{self.prefix}version:{session_pk}"], args=args), 0)

    def noted_version(self, session_pk: int) -> tuple[int, int | None, int | None] | None:
        """(version, context window, output reserve) as the last append noted them; None if unknown."""
        key = f"{self.prefix}version:{session_pk}"
        v, w, r = self._try(lambda: self.client.hmget(key, ("version", "window", "reserve")), _MISSING[:3])
        if v is None:
            return None
        return int(v), int(w) if w else None, int(r) if r else None  # type: ignore[arg-type]

    def put(self, session_pk: int, entry: Entry) -> bool:
        """Guarded write; False when a newer entry is already cached."""
        return bool(self._publish(keys=[self.key(session_pk)], args=_entry_values(entry)))

    def position(self, session_pk: int) -> tuple[int, int, int] | None:
        """(epoch, through, memver) of the cached entry; None when there is none or Redis is down."""
        fields = ("epoch", "through", "memver")
        e, t, m = self._try(lambda: self.client.hmget(self.key(session_pk), fields), _MISSING[:3])
        return None if e is None else (int(e), int(t), int(m))  # type: ignore[arg-type]

    def refresh_files(
        self, session_pk: int, seen: tuple[int, int, int], files: bytes, reads_seen: int
    ) -> bool:
        """Replace the entry's file list if it is still at `seen` and its list has seen fewer than
        `reads_seen` reads; False otherwise or on a Redis error."""
        args: list[bytes | int] = [*seen, files, reads_seen]
        return bool(self._try(lambda: self._refresh_files(keys=[self.key(session_pk)], args=args), 0))

    def drop(self, session_pk: int) -> None:
        kinds = ("force", "compact", "shared", "reuse", "usage", "pending", "job", "switches", "version")
        keys = [self.key(session_pk), *(f"{self.prefix}{k}:{session_pk}" for k in kinds)]
        self._try(lambda: self.client.delete(*keys), 0)

    def acquire(self, session_pk: int, ttl_seconds: float) -> str | None:
        """A per-session lock token, or None if someone else holds it."""
        token = secrets.token_hex(8)
        ok = self.client.set(f"{self.prefix}lock:{session_pk}", token, nx=True, px=int(ttl_seconds * 1000))
        return token if ok else None

    def release(self, session_pk: int, token: str) -> bool:
        """Release only if still the owner (the lock may have expired and been taken)."""
        return bool(self._release(keys=[f"{self.prefix}lock:{session_pk}"], args=[token]))

    def claim_job(self, session_pk: int, ttl_seconds: float) -> bool | None:
        """True when no compaction job is pending for the session (the caller then sends one).

        At most one job waits per session: appends while it waits add nothing; the job compacts
        the latest version when it runs. The claim expires, so a lost message costs at most
        `ttl_seconds` (and the beat sweep finds the session anyway). None: Redis is unreachable.
        """
        key = f"{self.prefix}job:{session_pk}"
        return self._try(lambda: bool(self.client.set(key, 1, nx=True, px=int(ttl_seconds * 1000))), None)

    def release_job_claim(self, session_pk: int) -> None:
        """A job has started: the next append must send a new one (it would see a newer version)."""
        self._try(lambda: self.client.delete(f"{self.prefix}job:{session_pk}"), 0)

    def put_pending(self, session_pk: int, state: bytes, entry: Entry) -> None:
        """Keep a summarized next epoch prepared ahead: its state (for the job that switches it in)
        and its prompt fragments (for a fetch that would otherwise pass the budget)."""
        key = f"{self.prefix}pending:{session_pk}"
        mapping = {"state": state, **dict(zip(FIELDS, _entry_values(entry), strict=True))}

        def write() -> None:
            pipe = self.client.pipeline()
            pipe.delete(key)
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.execute()

        self._try(write, None)

    def has_pending(self, session_pk: int) -> bool:
        return bool(self._try(lambda: self.client.exists(f"{self.prefix}pending:{session_pk}"), 0))

    def pending_state(self, session_pk: int) -> bytes | None:
        key = f"{self.prefix}pending:{session_pk}"
        return self._try(lambda: self.client.hget(key, "state"), None)  # type: ignore[arg-type,return-value]

    def pending_entry(self, session_pk: int) -> Entry | None:
        """The prepared epoch's prompt fragments; None when there is none or Redis is down."""
        key = f"{self.prefix}pending:{session_pk}"
        return _entry(self._try(lambda: self.client.hmget(key, FIELDS), _MISSING))

    def invalidate(self, session_pk: int) -> None:
        """Forget the cached prompt and any prepared summary (the memory block changed); the
        session's counters, claim and /compact request stay."""
        keys = (self.key(session_pk), f"{self.prefix}pending:{session_pk}")
        self._try(lambda: self.client.delete(*keys), 0)

    def drop_pending(self, session_pk: int) -> None:
        self._try(lambda: self.client.delete(f"{self.prefix}pending:{session_pk}"), 0)

    def record_shared_prefix(self, session_pk: int, epoch: int, shared_bytes: int) -> None:
        """At publish: how many leading bytes the new epoch's snapshot shares with the old one."""
        key = f"{self.prefix}shared:{session_pk}"
        self._try(lambda: self.client.hset(key, mapping={"epoch": epoch, "bytes": shared_bytes}), 0)

    def record_fetches(self, fetches: list[tuple[int, int, int, int]]) -> None:
        """Count served prompts' byte-identical reuse of the previous one, in fetch order, in one
        round trip: (session pk, epoch, request bytes, stable bytes) each. Best effort."""
        if not fetches:
            return

        def write() -> None:
            pipe = self.client.pipeline(transaction=False)
            for pk, epoch, total, stable in fetches:
                keys = [f"{self.prefix}reuse:{pk}", f"{self.prefix}shared:{pk}"]
                self._reuse(keys=keys, args=[epoch, total, stable], client=pipe)
            pipe.execute()

        self._try(write, None)

    def add_usage(
        self, session_pk: int, input_tokens: int, output_tokens: int, cost_usd: float | None
    ) -> None:
        """Accumulate a session's summarizer usage (LLM summarizers only)."""
        key = f"{self.prefix}usage:{session_pk}"

        def write() -> None:
            pipe = self.client.pipeline()
            pipe.hincrby(key, "summaries", 1)
            pipe.hincrby(key, "input_tokens", input_tokens)
            pipe.hincrby(key, "output_tokens", output_tokens)
            if cost_usd is not None:
                pipe.hincrbyfloat(key, "cost_usd", cost_usd)
            pipe.execute()

        self._try(write, None)

    def count_switch(self, session_pk: int, reason: str) -> None:
        """A prepared summary was switched in (reason: quiet, deadline or forced)."""
        self._try(lambda: self.client.hincrby(f"{self.prefix}switches:{session_pk}", reason, 1), 0)

    def session_stats(self, session_pk: int) -> dict[str, dict[str, float]]:
        """{"cache_reuse", "summarizer_usage", "switches"} for GET /v1/sessions/{sid}."""

        def read() -> tuple[Any, Any, Any]:
            pipe = self.client.pipeline(transaction=False)
            for kind in ("reuse", "usage", "switches"):
                pipe.hgetall(f"{self.prefix}{kind}:{session_pk}")
            reuse, usage, switches = pipe.execute()
            return reuse, usage, switches

        got = self._try(read, None)
        if got is None:
            return {}
        reuse, usage, switches = got
        r = {k.decode(): float(v) for k, v in reuse.items()}
        n = r.get("fetches", 0.0)
        return {
            "cache_reuse": {
                "fetches_compared": int(n),
                "mean_reused_share": round(r.get("share_sum", 0.0) / n, 4) if n else 0.0,
                "share_of_fetches_reusing_90pct": round(r.get("reused_90", 0.0) / n, 4) if n else 0.0,
            },
            "summarizer_usage": {k.decode(): float(v) for k, v in usage.items()},
            "switches": {k.decode(): int(v) for k, v in switches.items()},
        }

    def count(self, field: str, amount: int = 1) -> None:
        self._try(lambda: self.client.hincrby(f"{self.prefix}stats", field, amount), 0)

    def stats(self) -> dict[str, int]:
        raw = self._try(lambda: self.client.hgetall(f"{self.prefix}stats"), None)
        if raw is None:
            return {}
        return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]


def _log_circuit(closed: bool) -> None:
    if closed:
        log.info("redis.circuit_closed")
    else:
        log.warning("redis.circuit_opened")
