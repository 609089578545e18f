"""What differs per wire format on the proxy's path: the upstream request built from the served
prompt, the stream relay, the next round's request after compactd's own tools, the error shape.

The served prompt (GET /prompt's body: system blocks with compactd's working memory, then the
canonical messages) is the same for every format; `upstream` turns it into the format's request
with the client's own parameters (worker/proxy/outbound.py for Anthropic Messages,
worker/proxy/wire/ for OpenAI's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from fastapi.responses import Response

from api.http.error_shapes import anthropic_type, openai_error
from api.http.proxy.auth import ANTHROPIC, OPENAI, Provider
from api.http.proxy.errors import ProxyError, anthropic_response, openai_response
from api.http.upstream import error_body
from worker.compaction.tools import tool_definitions
from worker.memory.tool import memory_tool_definitions
from worker.proxy.outbound import split_served, upstream_bytes
from worker.proxy.sse import Event, Relay
from worker.proxy.wire import chat, responses
from worker.proxy.wire.chat_relay import ChatRelay
from worker.proxy.wire.responses_relay import ResponsesRelay

MEMORY_PREFIX = "<working_memory>"


def compactd_tools() -> list[dict[str, Any]]:
    """compactd's own tools (Messages API shape), offered upstream on every proxied request."""
    return tool_definitions() + memory_tool_definitions()


class StreamRelay(Protocol):
    """One format's relay (worker/proxy/sse.py, worker/proxy/wire/*_relay.py)."""

    rounds: list[Any]

    @property
    def current(self) -> Any: ...
    def start_round(self) -> Any: ...
    def feed(self, event: Event) -> bytes: ...
    def round_done(self) -> bool: ...
    def failed(self) -> bool: ...
    def hidden_tool_uses(self) -> list[dict[str, Any]]: ...
    def extend_request(self, body: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]: ...
    def error_event(self, payload: dict[str, Any]) -> bytes: ...
    def should_continue(self, max_rounds: int) -> bool: ...
    def finish(self) -> bytes: ...
    def client_response(self) -> dict[str, Any]: ...
    def client_message(self) -> dict[str, Any]: ...
    def stored_messages(self, results: list[list[dict[str, Any]]]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class Format:
    """One wire format's side of the proxy flow."""

    name: str  # "messages" | "responses" | "chat"
    provider: Provider
    path: str  # the upstream path, after the upstream's base URL
    # (client body, served prompt body, compactd's tools) -> (upstream body, names compactd answers)
    upstream: Callable[[dict[str, Any], bytes, list[dict[str, Any]]], tuple[bytes, frozenset[str]]]
    relay: Callable[[dict[str, Any], frozenset[str]], StreamRelay]
    error: Callable[[ProxyError], Response]

    def error_payload(self, status: int, message: str) -> dict[str, Any]:
        """An error's body in the format's shape (an error event mid-stream carries it)."""
        if self.provider is ANTHROPIC:
            return error_body(anthropic_type(status), message)
        return openai_error(status, message)


def served_parts(served_body: bytes) -> tuple[str, list[dict[str, Any]]]:
    """The served prompt's working-memory text and its canonical messages."""
    system, messages = split_served(served_body)
    memory = "\n\n".join(
        str(b.get("text", "")) for b in system if str(b.get("text", "")).startswith(MEMORY_PREFIX)
    )
    return memory, orjson.loads(messages)


def _responses_upstream(
    client: dict[str, Any], served_body: bytes, tools: Sequence[dict[str, Any]]
) -> tuple[bytes, frozenset[str]]:
    memory, messages = served_parts(served_body)
    body, hidden = responses.upstream_body(client, messages, memory, tools)
    return orjson.dumps(body), hidden


def _chat_upstream(
    client: dict[str, Any], served_body: bytes, tools: Sequence[dict[str, Any]]
) -> tuple[bytes, frozenset[str]]:
    memory, messages = served_parts(served_body)
    body, hidden = chat.upstream_body(client, messages, memory, tools)
    return orjson.dumps(body), hidden


def _include_usage(client: dict[str, Any]) -> bool:
    options = client.get("stream_options")
    return bool(isinstance(options, dict) and options.get("include_usage")) or not client.get("stream")


MESSAGES = Format(
    "messages", ANTHROPIC, "/v1/messages", upstream_bytes, lambda _, hidden: Relay(hidden), anthropic_response
)
RESPONSES = Format(
    "responses",
    OPENAI,
    "/responses",
    _responses_upstream,
    lambda _, hidden: ResponsesRelay(hidden),
    openai_response,
)
CHAT = Format(
    "chat",
    OPENAI,
    "/chat/completions",
    _chat_upstream,
    lambda client, hidden: ChatRelay(hidden, _include_usage(client)),
    openai_response,
)
