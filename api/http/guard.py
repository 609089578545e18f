"""Per-request checks every API process shares through Redis: the key-revocation stamp and per-key rate limits.

Both come back in one pipelined round trip. Redis down fails them differently on purpose: keys are
then looked up in the database on every request (a revoked key is never served from a stale
cache), while rate limits let the request through (an outage of the limiter is not one of the API).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import redis

from worker.cache.breaker import Breaker

# A token bucket per key, on Redis' clock (API processes on several hosts share one clock):
# refill `rate` tokens a second up to `burst`, take one, or say how many ms until one is there.
_BUCKET = """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(b[1]) or burst, tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local wait_ms = 0
if tokens >= 1 then tokens = tokens - 1 else wait_ms = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return wait_ms
"""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The shared state one request saw: the keys stamp (None: Redis did not answer) and its wait."""

    stamp: str | None
    retry_after_ms: int = 0


def stamp_key(prefix: str) -> str:
    return f"{prefix}keys:stamp"


def bump_stamp(client: redis.Redis, prefix: str) -> str:
    """Mark every API process's key cache stale: called after any revocation or rotation commits.

    A fresh random value rather than a counter: a Redis that lost its data can never bring back a
    value some process still has cached.
    """
    stamp = uuid.uuid4().hex
    client.set(stamp_key(prefix), stamp)
    return stamp


class Guard:
    """The per-request Redis round trip: read the keys stamp and, when limits are on, take a token."""

    def __init__(
        self, client: redis.Redis, prefix: str, per_second: float, burst: int, breaker: Breaker | None = None
    ) -> None:
        self.client, self.prefix = client, prefix
        self.per_second, self.burst = per_second, max(1, burst)
        # the prompt cache's circuit: while Redis is down or frozen, requests skip the round trip
        # (keys checked in the database, no rate limit) instead of each waiting out the timeout
        self.breaker = breaker or Breaker()

    def check(self, digest: str) -> Verdict:
        """The stamp and, for this key, how long to wait (0: go ahead). Never raises."""
        if not self.breaker.allow():
            return Verdict(None)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(stamp_key(self.prefix))
            if self.per_second > 0:
                # EVAL, not a registered script: redis-py checks a pipeline's scripts in a round trip of its own
                pipe.eval(_BUCKET, 1, f"{self.prefix}ratelimit:{digest[:32]}", self.per_second, self.burst)
            results: list[Any] = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError):
            self.breaker.failed()
            return Verdict(None)
        except redis.RedisError:
            self.breaker.succeeded()
            return Verdict(None)
        self.breaker.succeeded()
        raw = results[0]
        stamp = raw.decode() if isinstance(raw, bytes) else (raw or "")
        return Verdict(stamp, int(results[1]) if len(results) > 1 else 0)
