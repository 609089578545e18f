"""A small HTTP/1.1 client for the upstream call: asyncio protocol, httptools' C parser, keep-alive.

What the proxy needs of a client and no more: POST a body, return once the status and headers are
in, relay the body as it arrives (content-length, chunked, or until the connection closes), close
early to cancel the call. httpx does the same in ~6x the CPU (h11 in Python, anyio streams): ~0.7
ms per call at 10k tokens, ~1.4 ms at 150k, on the path to the first byte (BENCHMARKS.md "Drop-in
proxy: fifth pass"). https with httpx's own certificate checks (`httpx.create_ssl_context`: certifi,
SSL_CERT_FILE / SSL_CERT_DIR), one pool of keep-alive connections to the one upstream, connect and
read timeouts, no retries, no cookies (it never reads set-cookie). Its errors are httpx's exception
types (ConnectError, ReadTimeout, RemoteProtocolError ...), so the edge handles either client alike.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import quote, urlsplit

import httptools
import httpx

# a response body buffered past this (the client reads slower than the upstream sends) pauses the
# socket until it drains
_HIGH_WATER_BYTES = 1 << 20
# a connection idle longer is not used again (httpx's keep-alive expiry): a NAT or balancer may have
# dropped it silently, and servers close their idle ones at a timeout of their own
IDLE_SECONDS = 5.0
_FORBIDDEN = ("\r", "\n", "\0")


class Http1Client:
    """Calls to one origin (`base_url`, its path a prefix of every target); `max_calls` at once
    (more wait for a slot up to the connect timeout: httpx.PoolTimeout), `max_idle` kept alive."""

    def __init__(
        self,
        base_url: str,
        connect_seconds: float,
        read_seconds: float,
        max_calls: int = 512,
        max_idle: int = 64,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"upstream URL must be http(s)://host[:port][/path]: {base_url!r}")
        tls = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if tls else 80)
        self.prefix = url.path.rstrip("/")
        default = (443 if tls else 80) == self.port
        self.host_header = (url.hostname if default else f"{url.hostname}:{self.port}").encode("idna")
        self.ssl = httpx.create_ssl_context() if tls else None
        self.connect_seconds, self.read_seconds = connect_seconds, read_seconds
        self.max_idle = max_idle
        self._idle: collections.deque[Connection] = collections.deque()
        self._slots = asyncio.Semaphore(max_calls)

    async def open(
        self, target: str, headers: Mapping[str, str], body: bytes, method: str = "POST"
    ) -> Response:
        """POST `body` (or another `method`'s) to the prefix + `target` (path and query); the response
        once its status and headers are in, body unread. The caller closes it (aclose): early, that
        cancels the call."""
        try:
            async with asyncio.timeout(self.connect_seconds):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no upstream connection free in time") from None
        conn: Connection | None = None
        try:
            conn = await self._connection()
            conn.transport.write(
                request_head(self.prefix + target, self.host_header, headers, len(body), method)
            )
            conn.transport.write(body)
            return await conn.response(self)
        except BaseException:
            if conn is not None:
                conn.close()
            self._slots.release()
            raise

    async def _connection(self) -> Connection:
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the likeliest still open
            if conn.reusable() and time.monotonic() - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_seconds):
                _, conn = await loop.create_connection(
                    Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout("the upstream did not accept the connection in time") from None
        except OSError as exc:
            raise httpx.ConnectError(f"the upstream could not be reached: {exc.strerror or exc}") from None
        return conn

    def _done(self, conn: Connection, keep: bool) -> None:
        """A call's response ended (read to its end when `keep`): its slot is free, its connection
        kept for the next call when it may be."""
        self._slots.release()
        if keep and conn.reusable() and len(self._idle) < self.max_idle:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def __aenter__(self) -> Http1Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def request_head(
    target: str, host: bytes, headers: Mapping[str, str], length: int, method: str = "POST"
) -> bytes:
    """The request line and headers of a POST (or `method`) with a `length`-byte body."""
    if not target.isascii():  # as httpx sends it: the non-ASCII characters percent-encoded
        target = quote(target, safe="/?#[]@!$&'()*+,;=:%~")
    path = target.split("?", 1)[0]
    if any(c in target for c in (*_FORBIDDEN, " ", "\t")) or "/../" in path + "/" or "/./" in path + "/":
        raise httpx.LocalProtocolError(f"the request target {target[:80]!r} is not a plain path")
    lines = [method.encode("ascii"), b" ", target.encode("ascii"), b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    for name, value in headers.items():
        if any(c in name or c in value for c in _FORBIDDEN) or ":" in name:
            raise httpx.LocalProtocolError(f"header {name!r} has a character HTTP forbids")
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        lines += [name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
    lines.append(b"content-length: %d\r\n\r\n" % length)
    return b"".join(lines)


class Connection(asyncio.Protocol):
    """One keep-alive connection; one response at a time, parsed as the bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self.lost = False
        self.idle_since = 0.0
        self._current: Response | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def reusable(self) -> bool:
        return not self.lost and not self.transport.is_closing()

    async def response(self, client: Http1Client) -> Response:
        self._current = response = Response(self, client)
        await response.wait_head()
        return response

    def data_received(self, data: bytes) -> None:
        response = self._current
        if response is None:  # nothing asked: a server that talks out of turn is not reused
            self.close()
            return
        try:
            response.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response.fail(httpx.RemoteProtocolError(f"the upstream's answer is not HTTP/1.1: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._current is not None:
            self._current.lost(exc)

    def finished(self) -> None:
        self._current = None

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


class Response:
    """The upstream's answer: status and headers, then the body as it arrives (httpx.Response's
    names: status_code, headers, aiter_raw, aread, aclose)."""

    def __init__(self, conn: Connection, client: Http1Client) -> None:
        self._conn, self._client = conn, client
        self.parser = httptools.HttpResponseParser(self)
        self.status_code = 0
        self.headers: dict[str, str] = {}
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._head_done = self._complete = self._closed = self._keep_alive = False
        self._error: httpx.HTTPError | None = None
        self._wake: asyncio.Future[None] | None = None

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status_code = self.parser.get_status_code()
        self._head_done = True
        self._notify()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER_BYTES and not self._paused:
            self._paused = True
            self._conn.transport.pause_reading()
        self._notify()

    def on_message_complete(self) -> None:
        self._complete = True
        self._keep_alive = self.parser.should_keep_alive()  # only known inside this callback
        self._conn.finished()
        self._notify()

    def lost(self, exc: Exception | None = None) -> None:
        """The connection closed: the end of a body read until close (closed cleanly, not reset),
        else a failure."""
        if self._complete:
            return
        if self._head_done and self._until_close() and exc is None:
            self._complete = True
        else:
            self.fail(httpx.RemoteProtocolError("the upstream closed the connection mid-answer"))
        self._notify()

    def fail(self, error: httpx.HTTPError) -> None:
        if self._error is None:
            self._error = error
        self._notify()

    def _until_close(self) -> bool:
        return (
            "content-length" not in self.headers
            and "chunked" not in self.headers.get("transfer-encoding", "").lower()
        )

    def _notify(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _wait(self) -> None:
        """Until the parser has something new, within the read timeout."""
        self._wake = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self._client.read_seconds):
                await self._wake
        except TimeoutError:
            raise httpx.ReadTimeout("the upstream did not answer in time") from None
        finally:
            self._wake = None

    async def wait_head(self) -> None:
        while not self._head_done and self._error is None:
            await self._wait()
        if self._error is not None:
            raise self._error

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer coding removed, content as sent); ends at its end."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered <= _HIGH_WATER_BYTES // 2:
                    self._paused = False
                    self._conn.transport.resume_reading()
                yield chunk
            elif self._error is not None:
                await self.aclose()
                raise self._error
            elif self._complete:
                await self._release()
                return
            else:
                await self._wait()

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def _release(self) -> None:
        if not self._closed:
            self._closed = True
            self._client._done(self._conn, keep=self._keep_alive)

    async def aclose(self) -> None:
        """Done with the response: read to its end, its connection is kept; else it is closed (the
        upstream call is cancelled)."""
        if self._closed:
            return
        if not self._complete or self._error is not None:
            self._conn.close()
        await self._release()

    def __repr__(self) -> str:
        return f"<Response {self.status_code}>"
