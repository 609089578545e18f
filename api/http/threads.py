"""in_thread(fn, *args): a blocking call (the database, redis-py) off the event loop.

Starlette's run_in_threadpool goes through anyio: a capacity limiter, run-vars and a cancel scope on
every call (~3% of an append's CPU, BENCHMARKS.md session 11). This is the event loop's own
executor hop with what the routes relied on kept: the caller's context
variables (structlog's bound session and tenant ids) are seen in the thread, a cancelled caller
waits for its call to end, and at most THREADS + ANYIO_THREADS calls run at once (anyio's default
of 40, the API's limit before: the database pool is sized for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

import structlog

THREADS = 24
# the sync routes (sessions, files, memory, health, ui, metrics) still run in anyio's threads:
# together as many as before
ANYIO_THREADS = 16

log = structlog.get_logger("compactd.api")

P = ParamSpec("P")
T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="compactd-api")


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """fn(*args, **kwargs) in the API's thread pool, in a copy of the caller's context. Cancelled,
    it waits for the call to end before the cancellation goes on (as anyio's did): no caller's
    cleanup runs beside a call still writing."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    running = asyncio.get_running_loop().run_in_executor(_pool, call)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        while not running.done():  # however often the cancellation is repeated (anyio's scopes do)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # retrieved: the caller that would have seen it is gone
        raise


def in_background(fn: Callable[[], None]) -> None:
    """fn() in the API's thread pool, in a copy of the caller's context (its log lines, an error
    it raises included, keep the request's session and tenant ids), not awaited: for work that
    follows an answer and reports its own failures (HeldJobs.release logs an enqueue that failed)."""
    _pool.submit(contextvars.copy_context().run, _logged, fn)


def _logged(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as error:  # nobody awaits the call to see it
        log.error("api.background_call_failed", error=type(error).__name__, exc_info=error)
