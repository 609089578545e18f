"""The Python client against a real `compactd api` and worker: every call, retries, idempotency, problems."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
from compactd_client import (
    AsyncCompactd,
    Compactd,
    ProblemError,
    RetryPolicy,
    UnreachableError,
)

from tests.integration.conftest import Service, free_port, wait_for

pytestmark = [pytest.mark.services]

FAST = RetryPolicy(attempts=4, base=0.05, cap=0.2)
BIG_OUTPUT = (
    "\n".join(f"line {i}: collected item test_{i} PASSED" for i in range(1, 200)) + "\nERROR boom at 200"
)


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def _tool_turns(output: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"cmd": "pytest"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": output}]},
    ]


def _unit(n: int) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": f"toolu_u{n:02d}", "name": "bash", "input": {"cmd": f"make step{n}"}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_u{n:02d}", "content": f"step {n} ok\n" * 20}
    return [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]


def test_sync_client_appends_fetches_reads_remembers_and_compacts(service: Service) -> None:
    sid = _sid()
    my_tool = {"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}
    with Compactd(service.url, service.key, model="claude-sonnet-4-6", max_tokens=1024, retry=FAST) as cpd:
        first = cpd.append(
            sid,
            [{"role": "user", "content": "Fix the failing test"}],
            model="claude-sonnet-4-6",
            system="You fix tests.",
        )
        assert (first.first_seq, first.last_seq, first.window_assumed) == (1, 1, False)
        assert first.idempotency_key.startswith("cpd-")
        second = cpd.append(sid, _tool_turns(BIG_OUTPUT))
        assert (second.first_seq, second.last_seq) == (2, 3)

        kwargs = cpd.prompt(sid, tools=[my_tool])
        assert set(kwargs) == {"model", "max_tokens", "system", "messages", "tools"}
        assert (kwargs["model"], kwargs["max_tokens"]) == ("claude-sonnet-4-6", 1024)
        assert [t["name"] for t in kwargs["tools"]] == ["bash", "read_file", "grep", "update_working_memory"]
        assert "You fix tests." in str(kwargs["system"])
        assert kwargs["messages"][0]["content"][0]["text"].startswith("Fix the failing test")
        served = cpd.fetch_prompt(sid)
        assert served.version == 3 and served.token_count <= served.budget_tokens

        # the worker may publish a snapshot between two fetches (same version, the cache breakpoint
        # moved): once it has settled, prompt() gives exactly the messages served
        def same() -> bool:
            return cpd.fetch_prompt(sid).messages == cpd.prompt(sid, tools=[my_tool])["messages"]

        assert wait_for(same, timeout=30)

        # the big tool output was offloaded at ingest: its file is readable by lines and by pattern
        (file,) = cpd.files(sid)
        head = cpd.read_file(sid, file["ref"], start_line=1, end_line=2)
        assert head.text.splitlines() == [
            "line 1: collected item test_1 PASSED",
            "line 2: collected item test_2 PASSED",
        ]
        assert head.total_lines == 200
        hit = cpd.read_file(sid, file["ref"], pattern="ERROR")
        assert "ERROR boom at 200" in hit.text

        memory = cpd.update_memory(sid, [{"op": "set", "section": "task", "value": "Fix the failing test"}])
        assert [i.value for i in memory.sections["task"]] == ["Fix the failing test"]
        assert cpd.memory(sid).version == memory.version >= 1
        assert "Fix the failing test" in cpd.memory(sid).rendered

        cpd.append(sid, [m for n in range(8) for m in _unit(n)])
        accepted = cpd.compact(sid, focus="the failing test")
        assert accepted.status == "queued"
        # the real worker serves the request at the next quiet point: a handoff note switched in
        outcome = wait_for(
            lambda: (r := cpd.session(sid)["compact_request"]) and r["status"] != "pending" and r, timeout=120
        )
        assert outcome["status"] == "done", outcome
        assert "[compactd handoff note]" in str(cpd.fetch_prompt(sid).messages)


def test_async_client_does_the_same(service: Service) -> None:
    sid = _sid()

    async def scenario() -> None:
        async with AsyncCompactd(service.url, service.key, model="claude-sonnet-4-6", retry=FAST) as cpd:
            await cpd.append(sid, [{"role": "user", "content": "Summarize the logs"}])
            await cpd.append(sid, _tool_turns(BIG_OUTPUT))
            kwargs = await cpd.prompt(sid, max_tokens=77)
            assert kwargs["max_tokens"] == 77 and len(kwargs["messages"]) == 3
            (file,) = await cpd.files(sid)
            assert "ERROR boom" in (await cpd.read_file(sid, file["ref"], pattern="boom")).text
            memory = await cpd.update_memory(
                sid, [{"op": "add", "section": "decisions", "value": "read logs first"}]
            )
            assert (await cpd.memory(sid)).version == memory.version
            assert (await cpd.compact(sid)).status == "queued"
            with pytest.raises(ProblemError) as caught:
                await cpd.fetch_prompt(_sid())
            assert caught.value.status == 404

    asyncio.run(scenario())


class LoseFirstResponse(httpx.BaseTransport):
    """Fault injection: forwards every request to the real API, but the first response of the
    chosen method is lost on the way back (the server did the work; the client sees a broken connection)."""

    def __init__(self, method: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.method = method
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == self.method:
            self.sent.append(request)
            if len(self.sent) == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection reset after the request was processed", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


class RefuseFirst(httpx.BaseTransport):
    """Fault injection: answers the first request with `status` and Retry-After, forwards the rest."""

    def __init__(self, status: int, retry_after: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.status, self.retry_after = status, retry_after
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls == 1:
            body = b'{"type": "about:blank", "title": "Too many requests", "status": %d}' % self.status
            return httpx.Response(
                self.status,
                headers={"Retry-After": self.retry_after, "Content-Type": "application/problem+json"},
                content=body,
            )
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def _client(service: Service, transport: httpx.BaseTransport) -> Compactd:
    http = httpx.Client(
        base_url=service.url, headers={"Authorization": f"Bearer {service.key}"}, transport=transport
    )
    return Compactd(service.url, service.key, model="m", retry=FAST, http=http)


def test_an_append_whose_response_was_lost_is_retried_with_the_same_key_and_stored_once(
    service: Service,
) -> None:
    sid = _sid()
    transport = LoseFirstResponse("POST")
    with _client(service, transport) as cpd:
        done = cpd.append(sid, [{"role": "user", "content": "only once"}])
        assert len(transport.sent) == 2
        keys = {r.headers["idempotency-key"] for r in transport.sent}
        assert keys == {done.idempotency_key}
        assert (done.first_seq, done.last_seq) == (1, 1)
        assert cpd.session(sid)["version"] == 1
        assert len(cpd.fetch_prompt(sid).messages) == 1
        # a second append is a new key: stored
        assert cpd.append(sid, [{"role": "assistant", "content": "ok"}]).first_seq == 2


def test_a_memory_change_is_not_resent_once_it_may_have_arrived(service: Service) -> None:
    """PATCH is not idempotent (two adds are two events): a lost response is reported, not retried."""
    sid = _sid()
    with Compactd(service.url, service.key, retry=FAST) as plain:
        plain.append(sid, [{"role": "user", "content": "start"}])
    transport = LoseFirstResponse("PATCH")
    with _client(service, transport) as cpd:
        with pytest.raises(UnreachableError):
            cpd.update_memory(sid, [{"op": "add", "section": "decisions", "value": "use tabs"}])
        assert len(transport.sent) == 1
        assert [i.value for i in cpd.memory(sid).sections["decisions"]] == ["use tabs"]


@pytest.mark.parametrize("status", [429, 503])
def test_refusals_are_retried_after_the_servers_retry_after(service: Service, status: int) -> None:
    sid = _sid()
    transport = RefuseFirst(status, "0.3")
    with _client(service, transport) as cpd:
        started = time.monotonic()
        done = cpd.append(sid, [{"role": "user", "content": "hello"}])
        waited = time.monotonic() - started
    assert transport.calls == 2 and done.last_seq == 1
    assert waited >= 0.3  # Retry-After (0.3 s) honoured over the 0.05 s backoff


def test_a_refusal_that_outlasts_the_retries_is_raised_as_the_problem(service: Service) -> None:
    class AlwaysBusy(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(
                503,
                headers={"Retry-After": "0"},
                json={"title": "Service unavailable", "status": 503, "detail": "database down"},
            )

    with _client(service, AlwaysBusy()) as cpd, pytest.raises(ProblemError) as caught:
        cpd.fetch_prompt("x")
    assert (caught.value.status, caught.value.title, caught.value.detail) == (
        503,
        "Service unavailable",
        "database down",
    )


def test_an_unreachable_service_raises_after_retrying() -> None:
    port = free_port()  # nothing listens there
    retry = RetryPolicy(attempts=3, base=0.01, cap=0.02)
    with (
        Compactd(f"http://127.0.0.1:{port}", "k", retry=retry) as cpd,
        pytest.raises(UnreachableError, match="ConnectError"),
    ):
        cpd.append("s", [{"role": "user", "content": "x"}])


def test_problems_are_raised_with_status_title_and_detail(service: Service) -> None:
    sid = _sid()
    with Compactd(service.url, service.key, model="m", retry=FAST) as cpd:
        with pytest.raises(ProblemError) as missing:
            cpd.prompt(sid)
        assert (missing.value.status, missing.value.title) == (404, "Not found")
        assert str(missing.value) == "404 Not found: no such session"

        with pytest.raises(ProblemError) as invalid:
            cpd.append(
                sid,
                [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}],
                    }
                ],
            )
        assert invalid.value.status == 422 and invalid.value.detail
        with pytest.raises(ProblemError):
            cpd.session(sid)  # nothing half-written: the refused append created nothing

        cpd.append(sid, [{"role": "user", "content": "a"}], idempotency_key="k-1")
        with pytest.raises(ProblemError) as reused:
            cpd.append(sid, [{"role": "user", "content": "b"}], idempotency_key="k-1")
        assert (reused.value.status, reused.value.title) == (422, "Idempotency key reused")

        with pytest.raises(ProblemError) as bad_op:
            cpd.update_memory(sid, [{"op": "set", "section": "todo", "value": "x"}])
        assert bad_op.value.problem["field"] == "ops[0].section"

    with Compactd(service.url, "cpd_wrong", retry=FAST) as stranger, pytest.raises(ProblemError) as denied:
        stranger.fetch_prompt(sid)
    assert denied.value.status == 401


def test_prompt_without_a_model_says_what_to_pass(service: Service) -> None:
    sid = _sid()
    with Compactd(service.url, service.key, retry=FAST) as cpd:
        cpd.append(sid, [{"role": "user", "content": "hi"}])
        with pytest.raises(ValueError, match="model="):
            cpd.prompt(sid)
        assert cpd.prompt(sid, model="claude-haiku-4-5", compactd_tools=False).get("tools") is None
