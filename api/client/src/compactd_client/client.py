"""Compactd and AsyncCompactd: the HTTP API as typed calls, with retries and idempotency handled.

Each operation is first described as a `Call` (pure: `calls.*` below), then sent by the sync or the
async client with the same retry loop, and decoded by the same function. An append carries an
Idempotency-Key generated once per `append()` and reused by every retry, so a retry after a lost
response returns the first answer instead of storing the turns twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

import httpx

from compactd_client.errors import ProblemError, UnreachableError
from compactd_client.retry import RetryPolicy, retryable_error, retryable_status
from compactd_client.types import (
    AppendResult,
    Call,
    CompactAccepted,
    FileExcerpt,
    Memory,
    MessagesKwargs,
    ServedPrompt,
)

log = logging.getLogger("compactd.client")
DEFAULT_URL = "http://127.0.0.1:8700"
DEFAULT_MAX_TOKENS = 4096


def new_idempotency_key() -> str:
    return f"cpd-{uuid.uuid4().hex}"


def _session(sid: str) -> str:
    return f"/v1/sessions/{quote(sid, safe='')}"


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# -- what each operation sends (pure) ---------------------------------------------------------


def append_call(
    sid: str,
    messages: Sequence[dict[str, Any]],
    *,
    idempotency_key: str,
    model: str | None = None,
    context_window: int | None = None,
    output_reserve: int | None = None,
    system: str | None = None,
    parent_session_id: str | None = None,
    parent_tool_use_id: str | None = None,
    activity: Literal["busy", "idle"] | None = None,
) -> Call:
    body = _drop_none(
        {
            "messages": list(messages),
            "model": model,
            "context_window": context_window,
            "output_reserve": output_reserve,
            "system": system,
            "parent_session_id": parent_session_id,
            "parent_tool_use_id": parent_tool_use_id,
        }
    )
    headers = {"Idempotency-Key": idempotency_key}
    if activity:
        headers["X-Compactd-Activity"] = activity
    return Call("POST", f"{_session(sid)}/turns", json=body, headers=headers)


def read_file_call(
    sid: str,
    ref: str,
    *,
    start_line: int | None = None,
    end_line: int | None = None,
    start_byte: int | None = None,
    end_byte: int | None = None,
    pattern: str | None = None,
    context_lines: int | None = None,
    max_matches: int | None = None,
) -> Call:
    params = _drop_none(
        {
            "start_line": start_line,
            "end_line": end_line,
            "start_byte": start_byte,
            "end_byte": end_byte,
            "pattern": pattern,
            "context_lines": context_lines,
            "max_matches": max_matches,
        }
    )
    return Call("GET", f"{_session(sid)}/files/{quote(ref, safe='')}", params=params)


def memory_call(sid: str, scope: str = "") -> Call:
    return Call("GET", f"{_session(sid)}/memory", params=_scope(scope))


def update_memory_call(
    sid: str, ops: Sequence[dict[str, Any]], *, origin: str = "agent", reason: str = "", scope: str = ""
) -> Call:
    # not idempotent (an `add` twice is two events): never re-sent once it may have arrived
    body = {"ops": list(ops), "origin": origin, "reason": reason}
    return Call("PATCH", f"{_session(sid)}/memory", params=_scope(scope), json=body, retry_unsent_only=True)


def compact_call(sid: str, focus: str | None = None) -> Call:
    # asking twice only asks again: the request is coalesced server-side
    return Call("POST", f"{_session(sid)}/compact", json={"focus": focus} if focus else None)


def _scope(scope: str) -> dict[str, Any]:
    return {"scope": scope} if scope else {}


# -- what comes back ----------------------------------------------------------------------------


def _decode(response: httpx.Response) -> Any:
    """The JSON body of a success; a problem+json (or any error) as ProblemError."""
    if response.is_success:
        return response.json() if response.content else None
    try:
        body = response.json()
    except ValueError:
        body = None
    raise ProblemError.from_response(response.status_code, body, response.text)


def _auth(key: str | None) -> dict[str, str]:
    key = key if key is not None else os.environ.get("COMPACTD_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class _Base:
    """Settings shared by both clients: where, who, the model defaults and the retry policy."""

    def __init__(
        self,
        base_url: str | None,
        key: str | None,
        *,
        model: str | None,
        max_tokens: int,
        retry: RetryPolicy | None,
    ) -> None:
        self.base_url = (base_url or os.environ.get("COMPACTD_URL") or DEFAULT_URL).rstrip("/")
        self.headers = _auth(key)
        self.model = model
        self.max_tokens = max_tokens
        self.retry = retry or RetryPolicy()
        self._tools: list[dict[str, Any]] | None = None

    def _kwargs(
        self,
        served: ServedPrompt,
        model: str | None,
        max_tokens: int | None,
        tools: Sequence[dict[str, Any]] | None,
        compactd_tools: list[dict[str, Any]],
    ) -> MessagesKwargs:
        chosen = model or self.model
        if not chosen:
            raise ValueError("no model: pass model= to prompt() or to the client")
        return served.kwargs(
            model=chosen, max_tokens=max_tokens or self.max_tokens, tools=[*(tools or ()), *compactd_tools]
        )

    def _wait_after_error(self, call: Call, attempt: int, exc: httpx.TransportError) -> float:
        """Seconds to wait before sending `call` again after a transport error; UnreachableError
        when it is not retried (attempts used up, or a request that may have been received)."""
        if not self._should_retry(call, attempt, status=None, exc=exc):
            raise UnreachableError(f"{call.method} {call.path}: {type(exc).__name__}: {exc}") from exc
        return self._logged(call, attempt, self.retry.wait(attempt, None))

    def _wait_after_response(self, call: Call, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before sending `call` again (429, 503...), or None: the response is the answer."""
        if not self._should_retry(call, attempt, status=response.status_code, exc=None):
            return None
        return self._logged(call, attempt, self.retry.wait(attempt, response.headers.get("retry-after")))

    @staticmethod
    def _logged(call: Call, attempt: int, wait: float) -> float:
        log.info("compactd.retry %s %s attempt=%d wait=%.2fs", call.method, call.path, attempt + 1, wait)
        return wait

    def _should_retry(self, call: Call, attempt: int, *, status: int | None, exc: Exception | None) -> bool:
        if attempt + 1 >= self.retry.attempts:
            return False
        if exc is not None:
            return retryable_error(exc, unsent_only=call.retry_unsent_only)
        return status is not None and retryable_status(status, unsent_only=call.retry_unsent_only)


class Compactd(_Base):
    """The compactd API, synchronously. `base_url` and `key` default to COMPACTD_URL and COMPACTD_KEY.

    cpd = Compactd("http://127.0.0.1:8700", key, model="claude-sonnet-4-6")
    cpd.append("demo", [{"role": "user", "content": "Fix the failing test"}])
    reply = anthropic.Anthropic().messages.create(**cpd.prompt("demo", tools=my_tools))
    """

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        *,
        model: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, key, model=model, max_tokens=max_tokens, retry=retry)
        self.http = http or httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout)

    def __enter__(self) -> Compactd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call) -> Any:
        """Send one call, retrying 429/503/connection failures with backoff (Retry-After honoured)."""
        attempt = 0
        while True:
            try:
                response = self.http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.TransportError as exc:
                wait = self._wait_after_error(call, attempt, exc)
            else:
                answer = self._wait_after_response(call, attempt, response)
                if answer is None:
                    return _decode(response)
                wait = answer
            time.sleep(wait)
            attempt += 1

    def append(
        self,
        sid: str,
        messages: Sequence[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> AppendResult:
        """Append Anthropic messages (model=, context_window=, output_reserve=, system=,
        parent_session_id=, parent_tool_use_id=, activity="busy"|"idle" optional). Safe to retry:
        one key per call, generated unless given, reused by every retry."""
        key = idempotency_key or new_idempotency_key()
        return AppendResult.from_json(
            self.send(append_call(sid, messages, idempotency_key=key, **options)), key
        )

    def fetch_prompt(self, sid: str) -> ServedPrompt:
        """The served prompt with its metadata (token_count, budget_tokens, epoch, fallback)."""
        return ServedPrompt.from_json(self.send(Call("GET", f"{_session(sid)}/prompt")))

    def prompt(
        self,
        sid: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        compactd_tools: bool = True,
    ) -> MessagesKwargs:
        """`messages.create(**cpd.prompt(sid, tools=my_tools))`: the served system and messages, the
        model and max_tokens (the client's defaults unless given), your tools then compactd's own."""
        served = self.fetch_prompt(sid)
        return self._kwargs(served, model, max_tokens, tools, self.tools() if compactd_tools else [])

    def tools(self) -> list[dict[str, Any]]:
        """compactd's tool definitions (read_file, grep, update_working_memory); fetched once."""
        if self._tools is None:
            self._tools = list(self.send(Call("GET", "/v1/tools")))
        return self._tools

    def read_file(self, sid: str, ref: str, **where: Any) -> FileExcerpt:
        """Read a virtual file: start_line/end_line, start_byte/end_byte, or pattern (RE2) with
        context_lines/max_matches."""
        return FileExcerpt.from_json(self.send(read_file_call(sid, ref, **where)))

    def files(self, sid: str) -> list[dict[str, Any]]:
        """The session's virtual files: [{ref, kind, lines, read_ranges}]."""
        return list(self.send(Call("GET", f"{_session(sid)}/files"))["files"])

    def memory(self, sid: str, *, scope: str = "") -> Memory:
        return Memory.from_json(self.send(memory_call(sid, scope)))

    def update_memory(
        self,
        sid: str,
        ops: Sequence[dict[str, Any]],
        *,
        origin: str = "agent",
        reason: str = "",
        scope: str = "",
    ) -> Memory:
        """PATCH memory: ops (set, add, remove, resolve) applied all or nothing; the tool's input as is."""
        return Memory.from_json(
            self.send(update_memory_call(sid, ops, origin=origin, reason=reason, scope=scope))
        )

    def compact(self, sid: str, *, focus: str | None = None) -> CompactAccepted:
        return CompactAccepted.from_json(self.send(compact_call(sid, focus)))

    def set_activity(self, sid: str, state: Literal["busy", "idle"]) -> None:
        self.send(Call("PUT", f"{_session(sid)}/activity", json={"state": state}))

    def session(self, sid: str) -> dict[str, Any]:
        """GET /v1/sessions/{sid}: version, epoch, tokens, counts, compact_request, ..."""
        return dict(self.send(Call("GET", _session(sid))))

    def delete(self, sid: str) -> None:
        self.send(Call("DELETE", _session(sid)))


class AsyncCompactd(_Base):
    """The same API for asyncio; every method of `Compactd`, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        *,
        model: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, key, model=model, max_tokens=max_tokens, retry=retry)
        self.http = http or httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=timeout)

    async def __aenter__(self) -> AsyncCompactd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call) -> Any:
        attempt = 0
        while True:
            try:
                response = await self.http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.TransportError as exc:
                wait = self._wait_after_error(call, attempt, exc)
            else:
                answer = self._wait_after_response(call, attempt, response)
                if answer is None:
                    return _decode(response)
                wait = answer
            await asyncio.sleep(wait)
            attempt += 1

    async def append(
        self,
        sid: str,
        messages: Sequence[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> AppendResult:
        key = idempotency_key or new_idempotency_key()
        body = await self.send(append_call(sid, messages, idempotency_key=key, **options))
        return AppendResult.from_json(body, key)

    async def fetch_prompt(self, sid: str) -> ServedPrompt:
        return ServedPrompt.from_json(await self.send(Call("GET", f"{_session(sid)}/prompt")))

    async def prompt(
        self,
        sid: str,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        compactd_tools: bool = True,
    ) -> MessagesKwargs:
        served = await self.fetch_prompt(sid)
        return self._kwargs(served, model, max_tokens, tools, await self.tools() if compactd_tools else [])

    async def tools(self) -> list[dict[str, Any]]:
        if self._tools is None:
            self._tools = list(await self.send(Call("GET", "/v1/tools")))
        return self._tools

    async def read_file(self, sid: str, ref: str, **where: Any) -> FileExcerpt:
        return FileExcerpt.from_json(await self.send(read_file_call(sid, ref, **where)))

    async def files(self, sid: str) -> list[dict[str, Any]]:
        return list((await self.send(Call("GET", f"{_session(sid)}/files")))["files"])

    async def memory(self, sid: str, *, scope: str = "") -> Memory:
        return Memory.from_json(await self.send(memory_call(sid, scope)))

    async def update_memory(
        self,
        sid: str,
        ops: Sequence[dict[str, Any]],
        *,
        origin: str = "agent",
        reason: str = "",
        scope: str = "",
    ) -> Memory:
        call = update_memory_call(sid, ops, origin=origin, reason=reason, scope=scope)
        return Memory.from_json(await self.send(call))

    async def compact(self, sid: str, *, focus: str | None = None) -> CompactAccepted:
        return CompactAccepted.from_json(await self.send(compact_call(sid, focus)))

    async def set_activity(self, sid: str, state: Literal["busy", "idle"]) -> None:
        await self.send(Call("PUT", f"{_session(sid)}/activity", json={"state": state}))

    async def session(self, sid: str) -> dict[str, Any]:
        return dict(await self.send(Call("GET", _session(sid))))

    async def delete(self, sid: str) -> None:
        await self.send(Call("DELETE", _session(sid)))
