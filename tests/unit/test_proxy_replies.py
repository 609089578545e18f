"""When a proxied reply is recorded: a plain one waits out its grace unless the next request stores it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from api.http.replies import ReplyGrace, may_wait


def _a(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


TEXT = {"type": "text", "text": "Done."}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
THINKING = {"type": "thinking", "thinking": "hmm", "signature": "sig"}


@pytest.mark.parametrize(
    ("stored", "client", "expected"),
    [
        ([_a(TEXT)], _a(TEXT), True),
        ([_a(TEXT, CALL)], _a(TEXT, CALL), True),
        # thinking: recorded at once, with its signature as the upstream sent it
        ([_a(THINKING, TEXT)], _a(THINKING, TEXT), False),
        ([_a({"type": "redacted_thinking", "data": "x"}, TEXT)], _a(TEXT), False),
        # a server-side round of compactd's tools: the client never saw it, its request cannot carry it
        (
            [_a({**CALL, "name": "read_file"}), {"role": "user", "content": []}, _a(TEXT)],
            _a(TEXT),
            False,
        ),
    ],
)
def test_which_replies_may_wait(stored: list[dict[str, Any]], client: dict[str, Any], expected: bool) -> None:
    """Only a reply the client's next request carries exactly, and without thinking, may wait."""
    assert may_wait(stored, client) is expected


def test_a_reply_superseded_by_the_next_request_is_not_recorded() -> None:
    """The conversation's next request ends the wait at once, for that conversation only."""

    async def scenario() -> tuple[bool, bool, float]:
        grace = ReplyGrace(5.0)
        started = time.perf_counter()
        mine = asyncio.ensure_future(grace.superseded(("t", "a")))
        other = asyncio.ensure_future(grace.superseded(("t", "b")))
        await asyncio.sleep(0.01)
        grace.supersede(("t", "a"))
        first = await mine
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.01)
        still_waiting = not other.done()  # the other conversation's reply was not woken
        grace.supersede(("t", "b"))
        return first and still_waiting, await other, elapsed

    first, other, elapsed = asyncio.run(scenario())
    assert first and other and elapsed < 1.0


def test_a_reply_nobody_supersedes_is_recorded_after_the_grace() -> None:
    """Without a next request the wait ends with the grace, and a zero grace does not wait."""

    async def scenario() -> tuple[bool, bool, float]:
        started = time.perf_counter()
        waited = await ReplyGrace(0.05).superseded(("t", "a"))
        elapsed = time.perf_counter() - started
        return waited, await ReplyGrace(0).superseded(("t", "a")), elapsed

    waited, zero, elapsed = asyncio.run(scenario())
    assert not waited and not zero and 0.04 <= elapsed < 2.0
