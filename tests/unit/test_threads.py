"""in_thread (api/http/threads.py): the caller's context in the thread, and a cancelled caller that
waits for its call to end, however often it is cancelled (as anyio's thread hop did); in_background:
the same pool and context, not awaited."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest
import structlog
import structlog.testing

from api.http.threads import in_background, in_thread

TENANT: contextvars.ContextVar[int] = contextvars.ContextVar("tenant", default=0)


def test_the_call_sees_the_callers_context_variables() -> None:
    async def main() -> int:
        TENANT.set(7)
        return await in_thread(TENANT.get)

    assert asyncio.run(main()) == 7


def test_a_call_in_the_background_runs_in_the_pool_with_the_callers_context() -> None:
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def record() -> None:
        seen.append((TENANT.get(), threading.current_thread().name))
        done.set()

    async def main() -> None:
        TENANT.set(9)
        in_background(record)  # not awaited

    asyncio.run(main())
    assert done.wait(5)
    assert seen[0][0] == 9 and seen[0][1].startswith("compactd-api")


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


def test_a_call_in_the_background_that_fails_is_logged_with_the_callers_ids() -> None:
    def fails() -> None:
        raise RuntimeError("broker gone")

    async def main() -> None:
        structlog.contextvars.bind_contextvars(session_id="s-1", tenant=3)
        in_background(fails)

    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        asyncio.run(main())
        for _ in range(500):  # the call runs in a pool thread, not awaited
            if logs:
                break
            time.sleep(0.01)
    assert [(e["event"], e["session_id"], e["tenant"], e["error"]) for e in logs] == [
        ("api.background_call_failed", "s-1", 3, "RuntimeError")
    ]
