"""Redis: the prompt cache (guarded writes), per-session locks and counters. Short timeouts throughout."""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# Write only if (epoch, through, memver) is newer than what is cached: a late result never wins.
_PUBLISH = """
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'through', 'memver')
local ce, ct, cm = tonumber(cur[1] or '-1'), tonumber(cur[2] or '-1'), tonumber(cur[3] or '-1')
local e, t, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if ce > e or (ce == e and (ct > t or (ct == t and cm >= m))) then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'through', ARGV[2], 'memver', ARGV[3], 'system', ARGV[4],
           'head', ARGV[5], 'last', ARGV[6], 'tokens', ARGV[7], 'files', ARGV[8])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
FIELDS = ("epoch", "through", "memver", "system", "head", "last", "tokens", "files")


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
        if values[0] is None:
            return None
        e, t, m, system, head, last, tokens, files = values
        return Entry(int(e), int(t), int(m), system, head, last, int(tokens), files)  # type: ignore[arg-type]

    def put(self, session_pk: int, entry: Entry) -> bool:
        """Guarded write; False when a newer entry is already cached."""
        args: list[bytes | int] = [
            entry.epoch,
            entry.through,
            entry.memver,
            entry.system,
            entry.head,
            entry.last,
            entry.tokens,
            entry.files,
        ]
        return bool(self._publish(keys=[self.key(session_pk)], args=args))

    def drop(self, session_pk: int) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.delete(self.key(session_pk))

    def acquire(self, session_pk: int, ttl_seconds: float) -> str | None:
        """A per-session lock token, or None if someone else holds it."""
        token = secrets.token_hex(8)
        ok = self.client.set(f"{self.prefix}lock:{session_pk}", token, nx=True, px=int(ttl_seconds * 1000))
        return token if ok else None

    def release(self, session_pk: int, token: str) -> bool:
        """Release only if still the owner (the lock may have expired and been taken)."""
        return bool(self._release(keys=[f"{self.prefix}lock:{session_pk}"], args=[token]))

    def count(self, field: str, amount: int = 1) -> None:
        with contextlib.suppress(redis.RedisError):
            self.client.hincrby(f"{self.prefix}stats", field, amount)

    def stats(self) -> dict[str, int]:
        try:
            raw = self.client.hgetall(f"{self.prefix}stats")
        except redis.RedisError:
            return {}
        return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]
