"""The upstream client (api/http/upstream.py) against a real loopback socket: what goes on the
wire, no cookie carried between callers, the read timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from api.http.upstream import open_stream, upstream_client
from worker.settings import Settings

HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "k", "content-type": "application/json"}


class Server:
    """A loopback HTTP/1.1 server that records each request's bytes and answers with `reply`
    (None: never answers)."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply, self.requests = reply, list[bytes]()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    if data.endswith(b"{}"):  # every test body is {}
                        self.requests.append(data)
                        data = b""
                        if self.reply is None:
                            threading.Event().wait(2)
                            break
                        conn.sendall(self.reply)


@pytest.fixture
def answering() -> Iterator[Server]:
    server = Server(b"HTTP/1.1 200 OK\r\nset-cookie: a=b\r\ncontent-length: 2\r\n\r\nok")
    yield server
    server.sock.close()


def _client(url: str, read_seconds: float = 5.0) -> httpx.AsyncClient:
    return upstream_client(Settings(upstream_url=url, upstream_read_timeout_seconds=read_seconds))


def test_the_request_goes_as_given_and_no_cookie_is_carried_to_the_next_caller(answering: Server) -> None:
    """Path, query and headers as given; a cookie the upstream set in one answer is never sent on
    the next call (one client serves every tenant)."""

    async def calls() -> None:
        async with _client(answering.url) as client:
            for _ in range(2):
                response = await open_stream(client, "/v1/messages", "beta=true", HEADERS, b"{}")
                assert response.status_code == 200 and await response.aread() == b"ok"
                await response.aclose()

    asyncio.run(calls())
    assert len(answering.requests) == 2
    for raw in answering.requests:
        head = raw.split(b"\r\n\r\n")[0].split(b"\r\n")
        assert head[0] == b"POST /v1/messages?beta=true HTTP/1.1"
        assert {b"anthropic-version: 2023-06-01", b"x-api-key: k"} <= {h.lower() for h in head[1:]}
        assert b"cookie" not in raw.lower()


def test_an_upstream_that_does_not_answer_times_out() -> None:
    """The client's read timeout applies: httpx.ReadTimeout (the edge's 504)."""
    server = Server(None)

    async def call() -> None:
        async with _client(server.url, read_seconds=0.2) as client:
            await open_stream(client, "/v1/messages", "", HEADERS, b"{}")

    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(call())
    server.sock.close()
