"""Per-request checks every API process shares through Redis: the key-revocation stamp and per-key rate limits.

Both come back in one pipelined round trip, which the event loop does not wait on: the commands of
concurrent requests share one connection (Redis answers in order) and one reader hands the replies
out. Redis down fails them differently on purpose: keys are then looked up in the database on every
request (a revoked key is never served from a stale cache), while rate limits let the request
through (an outage of the limiter is not one of the API).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
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

    It holds one connection of its own (redis-py's, for its handshake: AUTH, SELECT, TLS), writes
    the commands on its socket and parses the replies with hiredis directly: redis-py's pipeline and
    pool cost ~2x the round trip itself on the fetch path, and its per-command packing and reply
    reading were still ~15% of a fetch's CPU. The event loop awaits the replies (`_Pipe`) instead of
    blocking on them, so one API process keeps serving while Redis answers; over TLS (a socket the
    loop cannot drive) the round trip blocks, as it did before.
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
        self.timeout = float(pool.connection_kwargs.get("socket_timeout") or 0.25)
        self._get_stamp = _pack(("GET", stamp_key(prefix)))
        self._pipe: _Pipe | _BlockingPipe | None = None
        self._opening: asyncio.Task[_Pipe | _BlockingPipe] | None = None

    async def check(self, digest: str, reads: Sequence[tuple[Any, ...]] = ()) -> Verdict:
        """The stamp and, for this key, how long to wait (0: go ahead), plus the replies to `reads`
        (Redis commands, e.g. ("HMGET", key, *fields)) sent in the same round trip. Never raises."""
        if not self.breaker.allow():
            return Verdict(None)
        packed = [self._get_stamp]
        if self.per_second > 0:
            bucket = f"{self.prefix}ratelimit:{digest[:32]}"
            packed.append(_pack(("EVAL", _BUCKET, 1, bucket, self.per_second, self.burst)))
        packed += [_pack(tuple(read)) for read in reads]
        results = await self._replies(packed)
        if results is None:
            return Verdict(None)
        return _verdict(results, len(reads), limited=self.per_second > 0)

    async def send(self, commands: Sequence[tuple[Any, ...]]) -> bool:
        """Best effort: `commands` sent on this connection (no key check, no thread), their replies
        awaited; False when Redis did not answer them all without an error. Never raises."""
        results = await self.replies(commands)
        return results is not None and not any(isinstance(r, redis.ResponseError) for r in results)

    async def replies(self, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
        """`commands` sent on this connection, their replies (an error reply as a
        redis.ResponseError value); None when Redis did not answer. Never raises."""
        if not commands or not self.breaker.allow():
            return None
        return await self._replies([_pack(c) for c in commands])

    async def _replies(self, packed: list[bytes]) -> list[Any] | None:
        """The replies to the packed commands; None when Redis did not answer (the breaker told)."""
        try:
            results = await self._round_trip(b"".join(packed), len(packed))
        except (redis.ConnectionError, redis.TimeoutError, OSError, TimeoutError, RuntimeError):
            self.breaker.failed()  # RuntimeError: a transport the loop had already closed
            return None
        except redis.RedisError:
            self.breaker.succeeded()
            return None
        self.breaker.succeeded()
        return results

    async def _round_trip(self, packed: bytes, count: int) -> list[Any]:
        pipe = self._pipe
        if pipe is None or not pipe.usable():
            pipe = await self._open()
        return await pipe.call(packed, count)

    async def _open(self) -> _Pipe | _BlockingPipe:
        """The connection of this event loop, opened by one task (redis-py's handshake, blocking
        and bounded by its socket timeout, then the loop takes the socket over) that concurrent
        requests await; a request cancelled meanwhile does not cancel the opening."""
        loop = asyncio.get_running_loop()
        opening = self._opening
        if opening is None or opening.done() or opening.get_loop() is not loop:
            if self._pipe is not None:
                self._pipe.close(redis.ConnectionError("reopened"))  # closed, or another loop's
            opening = self._opening = loop.create_task(self._connect())
            opening.add_done_callback(_retrieved)
        return await asyncio.shield(opening)

    async def _connect(self) -> _Pipe | _BlockingPipe:
        self._conn.connect()
        self._pipe = await _open_pipe(self._conn, self.timeout)
        return self._pipe

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close(redis.ConnectionError("the guard is closed"))
        self._conn.disconnect()


def _verdict(results: list[Any], reads: int, *, limited: bool) -> Verdict:
    """The Verdict of one round trip's replies: the stamp, the rate limit's wait, the reads'."""
    raw, wait = results[0], results[1] if limited else 0
    replies = [None if isinstance(r, redis.ResponseError) else r for r in results[len(results) - reads :]]
    if isinstance(raw, redis.ResponseError) or isinstance(wait, redis.ResponseError):
        # the server answered with an error (a wrong type at the stamp's key, a script error)
        return Verdict(None, replies=replies)
    stamp = raw.decode() if isinstance(raw, bytes) else (raw or "")
    return Verdict(stamp, int(wait), replies)


async def _open_pipe(conn: Any, timeout: float) -> _Pipe | _BlockingPipe:
    """The connection redis-py just opened (its handshake done), driven by the event loop; over
    TLS (a socket the loop cannot take over) the round trip blocks, as it always did."""
    sock = conn._sock
    if isinstance(sock, ssl.SSLSocket):
        return _BlockingPipe(conn)
    conn._sock = None  # the loop's transport owns the socket from here
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        _, pipe = await loop.create_connection(lambda: _Pipe(timeout, sock), sock=sock)
    except BaseException:
        sock.close()
        raise
    return pipe


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Done callback: the opening's outcome counts as seen even if every request awaiting it left."""
    if not task.cancelled():
        task.exception()


class _Pipe(asyncio.Protocol):
    """One Redis connection that requests share: each writes its commands and awaits its replies,
    handed out in the order Redis sends them as they arrive. A timeout or an error closes it (the
    replies would no longer line up) and fails every request still waiting; the Guard opens a new
    one on the next request. A request cancelled while it waits (its client left) leaves its place:
    its replies are read and dropped in turn."""

    def __init__(self, timeout: float, sock: socket.socket) -> None:
        self.timeout, self.sock, self.closed = timeout, sock, False
        self.loop = asyncio.get_running_loop()
        self.reader = _reader()
        # (replies expected, replies so far, the request's future, its timeout), oldest first
        self.waiting: collections.deque[_Waiting] = collections.deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def usable(self) -> bool:
        """Open, on this event loop (a test's asyncio.run makes another)."""
        return (
            not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
            and self.loop is asyncio.get_running_loop()
        )

    async def call(self, packed: bytes, count: int) -> list[Any]:
        if not self.usable():  # closed by Redis since the check (its connection_lost still to come)
            raise redis.ConnectionError("the guard's connection is closed")
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        timer = self.loop.call_later(self.timeout, self._timed_out, future)
        self.waiting.append((count, [], future, timer))
        assert self.transport is not None
        self.transport.write(packed)
        return await future

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.waiting:
            reply = self.reader.gets()
            if reply is False:
                return
            count, got, future, timer = self.waiting[0]
            got.append(reply)
            if len(got) == count:
                self.waiting.popleft()
                timer.cancel()
                if not future.done():
                    future.set_result(got)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(exc or redis.ConnectionError("Redis closed the connection"))

    def _timed_out(self, future: asyncio.Future[list[Any]], looked_again: bool = False) -> None:
        """The timeout: once more after the loop has read its sockets (a loop that stalled runs its
        due timers before it reads the replies already there), then the connection is closed."""
        if future.done():
            return
        if not looked_again:
            self.loop.call_later(0.001, self._timed_out, future, True)
            return
        self.close(redis.TimeoutError("Redis did not answer in time"))

    def close(self, exc: Exception) -> None:
        if self.closed:
            return
        self.closed = True
        while self.waiting:
            _, _, future, timer = self.waiting.popleft()
            timer.cancel()
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved here: a request that left no longer awaits it
        if self.transport is not None and not self.loop.is_closed():
            self.transport.abort()
        else:  # its loop is gone (an asyncio.run that ended): the socket is closed by hand
            self.sock.close()


_Waiting = tuple[int, list[Any], "asyncio.Future[list[Any]]", asyncio.TimerHandle]


class _BlockingPipe:
    """The round trip on a TLS socket: write, then read the replies, blocking the loop."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.closed = conn, False
        self.reader = _reader()

    def usable(self) -> bool:
        return not self.closed

    async def call(self, packed: bytes, count: int) -> list[Any]:
        sock = self.conn._sock
        try:
            sock.sendall(packed)
            out: list[Any] = []
            while len(out) < count:
                reply = self.reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("Redis closed the connection")
                    self.reader.feed(data)
                else:
                    out.append(reply)
            return out
        except BaseException as exc:
            self.close(exc if isinstance(exc, Exception) else redis.ConnectionError("interrupted"))
            raise

    def close(self, exc: Exception) -> None:
        self.closed = True
        self.conn.disconnect()


def _pack(command: tuple[Any, ...]) -> bytes:
    """One command in RESP; hiredis' stub types its argument as a 1-tuple, hence the ignore."""
    return hiredis.pack_command(command)  # type: ignore[arg-type]


def _reader() -> hiredis.Reader:
    """A RESP parser whose error replies come back as redis.ResponseError values, not raised."""
    return hiredis.Reader(protocolError=redis.InvalidResponse, replyError=redis.ResponseError)
