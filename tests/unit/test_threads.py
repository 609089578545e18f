"""in_thread (api/http/threads.py): the caller's context in the thread, and a cancelled caller that
waits for its call to end, however often it is cancelled (as anyio's thread hop did)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from api.http.threads import in_thread

TENANT: contextvars.ContextVar[int] = contextvars.ContextVar("tenant", default=0)


def test_the_call_sees_the_callers_context_variables() -> None:
    async def main() -> int:
        TENANT.set(7)
        return await in_thread(TENANT.get)

    assert asyncio.run(main()) == 7


def test_a_cancelled_caller_goes_on_only_once_its_call_has_ended() -> None:
    ended = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        ended.set()

    async def main() -> bool:
        task = asyncio.ensure_future(in_thread(slow))
        await asyncio.sleep(0.05)
        for _ in range(3):  # anyio's cancel scopes repeat the cancellation
            task.cancel()
            await asyncio.sleep(0.01)
        with pytest.raises(asyncio.CancelledError):
            await task
        return ended.is_set()

    assert asyncio.run(main())
