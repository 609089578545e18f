"""Replay over HTTP: drive a running compactd at an agent's pace, as an agent would.

Appends each message (one request per message, paced in real time), fetches before each model
call, and counts what a user would: served tokens against the budget, validity, fallbacks,
epochs, fetch latency, and the provider's bill for every served request (cache rules applied to
the breakpoints actually placed) next to the uncompacted history sent the same way.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from worker.compaction.prefixes import extends
from worker.compaction.pricing import PromptCache, keeps_prefix, last_mark_key
from worker.compaction.tokens import count_request
from worker.compaction.validate import request_problems
from worker.flows.simulate import Fetch, Pace, RawHistory, ReplayReport, ThinkingModel, epoch_label


class ReplayError(Exception):
    """Raised when the service refuses an append or a fetch (the status and problem detail say why)."""


def _resent(client: httpx.Client, method: str, url: str, tries: int = 3, **kwargs: Any) -> httpx.Response:
    """The request, sent again when the connection closed under it: a kept-alive connection the server
    closed as the request went out (every request here is safe to repeat: a fetch reads, an append
    carries its Idempotency-Key)."""
    for attempt in range(tries):
        try:
            return client.request(method, url, **kwargs)
        except (httpx.RemoteProtocolError, httpx.ConnectError):
            if attempt == tries - 1:
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def replay_http(
    base_url: str,
    api_key: str,
    system: str,
    messages: Sequence[dict[str, Any]],
    *,
    pace: Pace,
    timestamps: Sequence[float | None] | None = None,
    context_window: int | None = None,
    session_id: str | None = None,
    price_per_mtok: float = 3.0,
    after_append: Callable[[httpx.Client, str, int], None] | None = None,
    thinking: ThinkingModel | None = None,
    cache_ttl_seconds: float = 300.0,
) -> ReplayReport:
    """Replay `messages` into a new session of a running service; returns what it served.
    `after_append(client, session_id, i)` runs after message i is appended (checkpoints);
    `thinking` plays a model with preserved thinking (each assistant message gets a thinking block
    bound to the prompt fetched before it, and every fetch is checked as the provider checks it);
    `cache_ttl_seconds`: the provider cache's lifetime the bills use (the service's own setting,
    COMPACTD_CACHE_TTL_SECONDS, when it runs on a scaled clock)."""
    sid = session_id or f"replay-{uuid.uuid4().hex[:12]}"
    times = pace.times(timestamps, len(messages))
    raw = RawHistory(system)
    provider, raw_provider = (
        PromptCache(ttl_seconds=cache_ttl_seconds),
        PromptCache(ttl_seconds=cache_ttl_seconds),
    )
    fetches: list[Fetch] = []
    epochs: set[int] = set()
    request: dict[str, Any] = {}
    previous_mark: tuple[int, bytes] | None = None
    label = "0"  # the epoch (or fallback) of the last fetch: what an assistant turn answers
    headers = {"Authorization": f"Bearer {api_key}"}
    started = time.monotonic()
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as client:
        for i, message in enumerate(messages):
            delay = started + times[i] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if thinking is not None and message["role"] == "assistant" and request:
                message = thinking.answer(request, message, label)
            body: dict[str, Any] = {"messages": [message]}
            if i == 0:
                body["system"] = system or None
                body["context_window"] = context_window
            idem = {"Idempotency-Key": f"{sid}-{i}"}
            r = _resent(client, "POST", f"/v1/sessions/{sid}/turns", json=body, headers=idem)
            _check(r, f"append {i}")
            raw.add(message)
            if after_append is not None:
                after_append(client, sid, i)
            if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
                t0 = time.perf_counter()
                r = _resent(client, "GET", f"/v1/sessions/{sid}/prompt")
                ms = (time.perf_counter() - t0) * 1000
                _check(r, f"fetch before message {i + 1}")
                served = r.json()
                previous, request = request, {"system": served["system"], "messages": served["messages"]}
                now = time.monotonic() - started
                epochs.add(served["epoch"])
                kept, previous_mark = keeps_prefix(previous_mark, request), last_mark_key(request)
                label = epoch_label(served["epoch"], served.get("fallback"))
                checked = thinking.observe(request, label) if thinking is not None else (True, 0, 0)
                fetches.append(
                    Fetch(
                        turn=i + 1,
                        at_seconds=round(now, 3),
                        prompt_tokens=served["token_count"],
                        request_tokens=count_request(request),
                        budget_tokens=served["budget_tokens"],
                        raw_tokens=raw.tokens,
                        epoch=served["epoch"],
                        valid=not request_problems(request),
                        fallback=served.get("fallback"),
                        billed=provider.bill(request, now),
                        raw_billed=raw_provider.bill(raw.request(), now),
                        latency_ms=round(ms, 3),
                        kept_prefix=kept,
                        extended=not previous or extends(previous, request),
                        thinking_valid=checked[0],
                        thinking_due=checked[1],
                        thinking_kept=checked[2],
                    )
                )
        switches = _switches(client, sid)
    budget = fetches[-1].budget_tokens if fetches else 0
    return ReplayReport(
        tuple(fetches),
        max(epochs, default=0),
        budget,
        price_per_mtok,
        str(pace),
        switches,
        request,
        turns=len(messages),
    )


def _switches(client: httpx.Client, sid: str) -> dict[str, int]:
    r = client.get(f"/v1/sessions/{sid}")
    _check(r, "session info")
    return {k: int(v) for k, v in r.json().get("switches", {}).items()}


def _check(r: httpx.Response, what: str) -> None:
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text[:200])
        except ValueError:
            detail = r.text[:200]
        raise ReplayError(f"{what}: HTTP {r.status_code}: {detail}")
