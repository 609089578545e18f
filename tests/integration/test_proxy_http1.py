"""The upstream's HTTP/1.1 client (api/http/http1.py) against real loopback servers: bodies relayed
as they arrive (chunked, content-length, until close), keep-alive, an early close cancels the call,
timeouts and connection errors as httpx's, https with certificate checks."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from api.http import http1
from api.http.http1 import Http1Client, request_head

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (content-length framed), as the client sent them."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


class Upstream:
    """A loopback server running `handler` per connection; counts the connections it accepted."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls, self.connections = handler, tls, 0

    async def __aenter__(self) -> Upstream:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/base"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


def client(url: str, read_seconds: float = 5.0) -> Http1Client:
    return Http1Client(url, connect_seconds=2.0, read_seconds=read_seconds)


def test_the_request_head_is_what_the_upstream_gets() -> None:
    """The request line and headers are written as httpx would, a client's host header dropped and a
    header with a line break refused."""
    head = request_head("/base/v1/messages?beta=true", b"api.example", {"x-api-key": "k", "host": "evil"}, 2)
    assert head == (
        b"POST /base/v1/messages?beta=true HTTP/1.1\r\nhost: api.example\r\nx-api-key: k\r\n"
        b"content-length: 2\r\n\r\n"
    )
    assert request_head("/v1/m?q=é%20x", b"h", {}, 0).startswith(b"POST /v1/m?q=%C3%A9%20x HTTP/1.1\r\n")
    with pytest.raises(httpx.LocalProtocolError):
        request_head("/", b"h", {"x-api-key": "k\r\nx-evil: 1"}, 0)


def test_keep_alive_content_length_and_the_prefix() -> None:
    """Three calls share one kept-alive connection, each under the upstream URL's path prefix, each
    content-length body read whole."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append(head.split(b"\r\n")[0] + b" " + body)
            writer.write(
                b"HTTP/1.1 200 OK\r\nrequest-id: r1\r\nset-cookie: a=b\r\ncontent-length: 2\r\n\r\nok"
            )

    async def run() -> None:
        async with Upstream(answer) as up, client(up.url) as c:
            for i in range(3):
                response = await c.open(f"/v1/messages?n={i}", HEADERS, b"{}")
                assert (response.status_code, response.headers["request-id"]) == (200, "r1")
                assert await response.aread() == b"ok"
                await response.aclose()
            assert up.connections == 1  # kept alive

    asyncio.run(run())
    assert seen == [f"POST /base/v1/messages?n={i} HTTP/1.1 {{}}".encode() for i in range(3)]


def test_a_connection_idle_past_the_expiry_is_not_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept-alive connection idle longer than IDLE_SECONDS is closed, not written to (a NAT may
    have dropped it silently): the next call opens a new one."""
    monkeypatch.setattr(http1, "IDLE_SECONDS", 0.05)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    async def run() -> int:
        async with Upstream(answer) as up, client(up.url) as c:
            for pause in (0.0, 0.0, 0.2):
                await asyncio.sleep(pause)
                response = await c.open("/v1/messages", HEADERS, b"{}")
                assert await response.aread() == b"ok"
                await response.aclose()
            return up.connections

    assert asyncio.run(run()) == 2  # the first two calls shared one; the one after the pause did not


def test_a_body_larger_than_the_buffer_pauses_the_socket_and_arrives_whole() -> None:
    """A caller reading slower than the upstream sends: past the buffer's high-water mark the socket
    is paused, reading drains it and resumes it, and every byte arrives in order."""
    body = bytes(range(256)) * (4 * http1._HIGH_WATER_BYTES // 256)  # four times the mark
    paused: list[bool] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    async def run() -> bytes:
        async with Upstream(answer) as up, client(up.url) as c:
            response = await c.open("/v1/messages", HEADERS, b"{}")
            got = bytearray()
            async for chunk in response.aiter_raw():
                paused.append(response._paused)
                got += chunk
                await asyncio.sleep(0.001)  # a slow reader
            await response.aclose()
            return bytes(got)

    assert asyncio.run(run()) == body
    assert any(paused)  # the mark was crossed: the socket was paused while the caller lagged


def test_calls_past_max_calls_wait_for_a_slot_then_time_out_as_httpx_does() -> None:
    """With one call allowed, a second waits for the first's slot: it gets it once the first is
    closed, and a PoolTimeout when none frees within the connect timeout."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    async def run() -> None:
        async with Upstream(answer) as up:
            c = Http1Client(up.url, connect_seconds=0.2, read_seconds=5.0, max_calls=1)
            first = await c.open("/v1/messages", HEADERS, b"{}")
            with pytest.raises(httpx.PoolTimeout):
                await c.open("/v1/messages", HEADERS, b"{}")
            second = asyncio.create_task(c.open("/v1/messages", HEADERS, b"{}"))
            await asyncio.sleep(0.05)
            assert not second.done()  # waiting for the slot
            assert await first.aread() == b"ok"
            await first.aclose()
            response = await second
            assert await response.aread() == b"ok"
            await response.aclose()
            await c.aclose()

    asyncio.run(run())


def test_a_chunked_body_is_relayed_as_it_arrives() -> None:
    """A chunked answer reaches the caller chunk by chunk, before the upstream has sent the rest."""

    async def run() -> None:
        second = asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nevent1\r\n")
            await second.wait()  # the client has the first chunk before the second is sent
            writer.write(b"6\r\nevent2\r\n0\r\n\r\n")
            await reader.read()

        async with Upstream(answer) as up, client(up.url) as c:
            response = await c.open("/v1/messages", HEADERS, b"{}")
            chunks = []
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                second.set()
            assert chunks == [b"event1", b"event2"]
            await response.aclose()

    asyncio.run(run())


def test_a_body_read_until_the_connection_closes() -> None:
    """An answer with neither content-length nor chunked framing ends when the upstream closes cleanly."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")

    async def run() -> None:
        async with Upstream(answer) as up, client(up.url) as c:
            for _ in range(2):  # the closed connection is not reused
                response = await c.open("/v1/messages", HEADERS, b"{}")
                assert await response.aread() == b"all of it"
                await response.aclose()
            assert up.connections == 2

    asyncio.run(run())


def test_closing_early_cancels_the_call_and_a_cut_answer_is_an_error() -> None:
    """Closing a response early closes its connection (the upstream sees the call cancelled), and an
    answer cut mid-body is an httpx error, not a short body."""

    async def run() -> None:
        closed = asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npart")
            if up.connections == 1:
                await reader.read()  # EOF: the client closed its end
                closed.set()
            # the second answer is cut: the connection closes after "part"

        async with Upstream(answer) as up, client(up.url) as c:
            response = await c.open("/v1/messages", HEADERS, b"{}")
            await response.aclose()
            await asyncio.wait_for(closed.wait(), 2)

            response = await c.open("/v1/messages", HEADERS, b"{}")  # a new connection
            chunks = []
            with pytest.raises(httpx.RemoteProtocolError):
                async for chunk in response.aiter_raw():
                    chunks.append(chunk)
            assert chunks == [b"part"] and up.connections == 2

    asyncio.run(run())


def test_timeouts_and_an_unreachable_upstream_are_httpx_errors() -> None:
    """A silent upstream is httpx's ReadTimeout and a closed port its ConnectError, as the edge expects
    from either client."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(2)

    async def run() -> None:
        async with Upstream(silent) as up, client(up.url, read_seconds=0.2) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.open("/v1/messages", HEADERS, b"{}")
        async with Upstream(silent) as up:
            url = up.url
        with pytest.raises(httpx.ConnectError):
            await client(url).open("/v1/messages", HEADERS, b"{}")

    asyncio.run(run())


def test_https_checks_the_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An https upstream with a certificate the trust store lacks is refused, and accepted once
    SSL_CERT_FILE names it."""
    cert, key = _self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecure")
        await writer.drain()

    async def call(url: str) -> bytes:
        async with client(url) as c:
            response = await c.open("/v1/messages", HEADERS, b"{}")
            return await response.aread()

    async def run() -> None:
        async with Upstream(answer, server_tls) as up:
            with pytest.raises(httpx.ConnectError):  # not a certificate the client trusts
                await call(up.url)
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted, as httpx reads it
            assert await call(up.url) == b"secure"

    asyncio.run(run())


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path
