"""Per-request checks every API process shares through Redis: the key-revocation stamp and per-key rate limits.

Both come back in one pipelined round trip. Redis down fails them differently on purpose: keys are
then looked up in the database on every request (a revoked key is never served from a stale
cache), while rate limits let the request through (an outage of the limiter is not one of the API).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
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
    """The shared state one request saw: the keys stamp (None: Redis did not answer), its wait, and
    the replies to the reads the caller sent along (None: not read)."""

    stamp: str | None
    retry_after_ms: int = 0
    replies: list[Any] | None = None


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
    """The per-request Redis round trip: read the keys stamp and, when limits are on, take a token;
    the caller's own reads (a fetch's prompt entry) ride in the same round trip.

    It holds one connection of its own (redis-py's, for its handshake: AUTH, SELECT, TLS) and writes
    the commands on its socket and parses the replies with hiredis directly: redis-py's pipeline and
    pool cost ~2x the round trip itself on the fetch path (~0.2 ms against ~0.09 ms here), and its
    per-command packing and reply reading were still ~15% of a fetch's CPU.
    """

    def __init__(
        self, client: redis.Redis, prefix: str, per_second: float, burst: int, breaker: Breaker | None = None
    ) -> None:
        self.client, self.prefix = client, prefix
        self.per_second, self.burst = per_second, max(1, burst)
        # the prompt cache's circuit: while Redis is down or frozen, requests skip the round trip
        # (keys checked in the database, no rate limit) instead of each waiting out the timeout
        self.breaker = breaker or Breaker()
        pool = client.connection_pool
        self._conn = pool.connection_class(**pool.connection_kwargs)
        self._reader = _reader()
        self._get_stamp = _pack(("GET", stamp_key(prefix)))
        # the event loop calls it; a lock keeps a stray thread from interleaving replies
        self._lock = threading.Lock()

    def check(self, digest: str, reads: Sequence[tuple[Any, ...]] = ()) -> Verdict:
        """The stamp and, for this key, how long to wait (0: go ahead), plus the replies to `reads`
        (Redis commands, e.g. ("HMGET", key, *fields)) sent in the same round trip. Never raises."""
        if not self.breaker.allow():
            return Verdict(None)
        packed = [self._get_stamp]
        if self.per_second > 0:
            bucket = f"{self.prefix}ratelimit:{digest[:32]}"
            packed.append(_pack(("EVAL", _BUCKET, 1, bucket, self.per_second, self.burst)))
        packed += [_pack(tuple(read)) for read in reads]
        try:
            with self._lock:
                results = self._round_trip(b"".join(packed), len(packed))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.breaker.failed()
            return Verdict(None)
        except redis.RedisError:
            self.breaker.succeeded()
            return Verdict(None)
        self.breaker.succeeded()
        raw, wait = results[0], results[1] if self.per_second > 0 else 0
        replies = [
            None if isinstance(r, redis.ResponseError) else r for r in results[len(results) - len(reads) :]
        ]
        if isinstance(raw, redis.ResponseError) or isinstance(wait, redis.ResponseError):
            # the server answered with an error (a wrong type at the stamp's key, a script error)
            return Verdict(None, replies=replies)
        stamp = raw.decode() if isinstance(raw, bytes) else (raw or "")
        return Verdict(stamp, int(wait), replies)

    def _round_trip(self, packed: bytes, count: int) -> list[Any]:
        """Write the packed commands, read `count` replies (an error reply in its place); on a
        failure the connection is dropped, so no reply is left for the next request to read."""
        conn = self._conn
        try:
            sock = conn._sock  # redis-py's socket, after its handshake (connect() does AUTH, SELECT)
            if sock is None:
                conn.connect()
                sock = conn._sock
            assert sock is not None
            sock.sendall(packed)
            reader = self._reader
            out: list[Any] = []
            while len(out) < count:
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("Redis closed the connection")
                    reader.feed(data)
                else:
                    out.append(reply)
            return out
        except BaseException:
            conn.disconnect()
            self._reader = _reader()
            raise

    def close(self) -> None:
        self._conn.disconnect()


def _pack(command: tuple[Any, ...]) -> bytes:
    """One command in RESP; hiredis' stub types its argument as a 1-tuple, hence the ignore."""
    return hiredis.pack_command(command)  # type: ignore[arg-type]


def _reader() -> hiredis.Reader:
    """A RESP parser whose error replies come back as redis.ResponseError values, not raised."""
    return hiredis.Reader(protocolError=redis.InvalidResponse, replyError=redis.ResponseError)
