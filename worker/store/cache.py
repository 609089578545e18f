"""Redis: the prompt cache (guarded writes), per-session locks and counters. Short timeouts throughout."""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.store.compact_requests import CompactRequests

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

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
FIELDS = ("epoch", "through", "memver", "system", "head", "last", "tokens", "files", "memory_note")


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
    """Per-session prompt entries, locks and service counters under one key prefix."""

    def __init__(self, client: redis.Redis, prefix: str = "compactd:", cooldown_seconds: float = 1.0):
        self.client = client
        self.prefix = prefix
        self.cooldown_seconds = cooldown_seconds
        self._down_until = 0.0
        self.pks: dict[tuple[int, str], int] = {}  # (tenant, client session id) -> session pk
        self._publish = client.register_script(_PUBLISH)
        self._release = client.register_script(_RELEASE)
        self._reuse = client.register_script(_REUSE)
        self._refresh_files = client.register_script(_REFRESH_FILES)
        self.compact_requests = CompactRequests(client, prefix)

    def key(self, session_pk: int) -> str:
        return f"{self.prefix}prompt:{session_pk}"

    def get(self, session_pk: int) -> Entry | None:
        """The cached entry; None when missing or Redis is unreachable (then skipped for a second)."""
        if time.monotonic() < self._down_until:
            return None
        try:
            values = self.client.hmget(self.key(session_pk), FIELDS)
        except redis.RedisError:
            self._down_until = time.monotonic() + self.cooldown_seconds
            return None
        return _entry(values)

    def put(self, session_pk: int, entry: Entry) -> bool:
        """Guarded write; False when a newer entry is already cached."""
        return bool(self._publish(keys=[self.key(session_pk)], args=_entry_values(entry)))

    def position(self, session_pk: int) -> tuple[int, int, int] | None:
        """(epoch, through, memver) of the cached entry; None when there is none or Redis is down."""
        if time.monotonic() < self._down_until:
            return None
        try:
            e, t, m = self.client.hmget(self.key(session_pk), ("epoch", "through", "memver"))
        except redis.RedisError:
            return None
        return None if e is None else (int(e), int(t), int(m))  # type: ignore[arg-type]

    def refresh_files(
        self, session_pk: int, seen: tuple[int, int, int], files: bytes, reads_seen: int
    ) -> bool:
        """Replace the entry's file list if it is still at `seen` and its list has seen fewer than
        `reads_seen` reads; False otherwise or on a Redis error."""
        try:
            args: list[bytes | int] = [*seen, files, reads_seen]
            return bool(self._refresh_files(keys=[self.key(session_pk)], args=args))
        except redis.RedisError:
            return False

    def drop(self, session_pk: int) -> None:
        with contextlib.suppress(redis.RedisError):
            kinds = ("force", "compact", "shared", "reuse", "usage", "pending", "job", "switches")
            self.client.delete(self.key(session_pk), *(f"{self.prefix}{k}:{session_pk}" for k in kinds))

    def acquire(self, session_pk: int, ttl_seconds: float) -> str | None:
        """A per-session lock token, or None if someone else holds it."""
        token = secrets.token_hex(8)
        ok = self.client.set(f"{self.prefix}lock:{session_pk}", token, nx=True, px=int(ttl_seconds * 1000))
        return token if ok else None

    def release(self, session_pk: int, token: str) -> bool:
        """Release only if still the owner (the lock may have expired and been taken)."""
        return bool(self._release(keys=[f"{self.prefix}lock:{session_pk}"], args=[token]))

    def claim_job(self, session_pk: int, ttl_seconds: float) -> bool:
        """True when no compaction job is pending for the session (the caller then sends one).

        At most one job waits per session: appends while it waits add nothing; the job compacts
        the latest version when it runs. The claim expires, so a lost message costs at most
        `ttl_seconds` (and the beat sweep finds the session anyway). Redis down: True (send).
        """
        try:
            return bool(
                self.client.set(f"{self.prefix}job:{session_pk}", 1, nx=True, px=int(ttl_seconds * 1000))
            )
        except redis.RedisError:
            return True

    def release_job_claim(self, session_pk: int) -> None:
        """A job has started: the next append must send a new one (it would see a newer version)."""
        with contextlib.suppress(redis.RedisError):
            self.client.delete(f"{self.prefix}job:{session_pk}")

    def put_pending(self, session_pk: int, state: bytes, entry: Entry) -> None:
        """Keep a summarized next epoch prepared ahead: its state (for the job that switches it in)
        and its prompt fragments (for a fetch that would otherwise pass the budget)."""
        key = f"{self.prefix}pending:{session_pk}"
        mapping = {"state": state, **dict(zip(FIELDS, _entry_values(entry), strict=True))}
        with contextlib.suppress(redis.RedisError):
            pipe = self.client.pipeline()
            pipe.delete(key)
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.execute()

    def has_pending(self, session_pk: int) -> bool:
        with contextlib.suppress(redis.RedisError):
            return bool(self.client.exists(f"{self.prefix}pending:{session_pk}"))
        return False

    def pending_state(self, session_pk: int) -> bytes | None:
        with contextlib.suppress(redis.RedisError):
            return self.client.hget(f"{self.prefix}pending:{session_pk}", "state")  # type: ignore[return-value]
        return None

    def pending_entry(self, session_pk: int) -> Entry | None:
        """The prepared epoch's prompt fragments; None when there is none or Redis is down."""
        if time.monotonic() < self._down_until:
            return None
        try:
            values = self.client.hmget(f"{self.prefix}pending:{session_pk}", FIELDS)
        except redis.RedisError:
            return None
        return _entry(values)

    def invalidate(self, session_pk: int) -> None:
        """Forget the cached prompt and any prepared summary (the memory block changed); the
        session's counters, claim and /compact request stay."""
        with contextlib.suppress(redis.RedisError):
            self.client.delete(self.key(session_pk), f"{self.prefix}pending:{session_pk}")

    def drop_pending(self, session_pk: int) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.delete(f"{self.prefix}pending:{session_pk}")

    def record_shared_prefix(self, session_pk: int, epoch: int, shared_bytes: int) -> None:
        """At publish: how many leading bytes the new epoch's snapshot shares with the old one."""
        with contextlib.suppress(redis.RedisError):
            self.client.hset(
                f"{self.prefix}shared:{session_pk}", mapping={"epoch": epoch, "bytes": shared_bytes}
            )

    def record_fetches(self, fetches: list[tuple[int, int, int, int]]) -> None:
        """Count served prompts' byte-identical reuse of the previous one, in fetch order, in one
        round trip: (session pk, epoch, request bytes, stable bytes) each. Best effort."""
        if not fetches or time.monotonic() < self._down_until:
            return
        with contextlib.suppress(redis.RedisError):
            pipe = self.client.pipeline(transaction=False)
            for pk, epoch, total, stable in fetches:
                keys = [f"{self.prefix}reuse:{pk}", f"{self.prefix}shared:{pk}"]
                self._reuse(keys=keys, args=[epoch, total, stable], client=pipe)
            pipe.execute()

    def add_usage(
        self, session_pk: int, input_tokens: int, output_tokens: int, cost_usd: float | None
    ) -> None:
        """Accumulate a session's summarizer usage (LLM summarizers only)."""
        with contextlib.suppress(redis.RedisError):
            key = f"{self.prefix}usage:{session_pk}"
            pipe = self.client.pipeline()
            pipe.hincrby(key, "summaries", 1)
            pipe.hincrby(key, "input_tokens", input_tokens)
            pipe.hincrby(key, "output_tokens", output_tokens)
            if cost_usd is not None:
                pipe.hincrbyfloat(key, "cost_usd", cost_usd)
            pipe.execute()

    def count_switch(self, session_pk: int, reason: str) -> None:
        """A prepared summary was switched in (reason: quiet, deadline or forced)."""
        with contextlib.suppress(redis.RedisError):
            self.client.hincrby(f"{self.prefix}switches:{session_pk}", reason, 1)

    def session_stats(self, session_pk: int) -> dict[str, dict[str, float]]:
        """{"cache_reuse", "summarizer_usage", "switches"} for GET /v1/sessions/{sid}."""
        try:
            reuse = self.client.hgetall(f"{self.prefix}reuse:{session_pk}")
            usage = self.client.hgetall(f"{self.prefix}usage:{session_pk}")
            switches = self.client.hgetall(f"{self.prefix}switches:{session_pk}")
        except redis.RedisError:
            return {}
        r = {k.decode(): float(v) for k, v in reuse.items()}  # type: ignore[union-attr]
        n = r.get("fetches", 0.0)
        return {
            "cache_reuse": {
                "fetches_compared": int(n),
                "mean_reused_share": round(r.get("share_sum", 0.0) / n, 4) if n else 0.0,
                "share_of_fetches_reusing_90pct": round(r.get("reused_90", 0.0) / n, 4) if n else 0.0,
            },
            "summarizer_usage": {k.decode(): float(v) for k, v in usage.items()},  # type: ignore[union-attr]
            "switches": {k.decode(): int(v) for k, v in switches.items()},  # type: ignore[union-attr]
        }

    def count(self, field: str, amount: int = 1) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.hincrby(f"{self.prefix}stats", field, amount)

    def stats(self) -> dict[str, int]:
        try:
            raw = self.client.hgetall(f"{self.prefix}stats")
        except redis.RedisError:
            return {}
        return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]
