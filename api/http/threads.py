"""in_thread(fn, *args): a blocking call (the database, redis-py) off the event loop.

Starlette's run_in_threadpool goes through anyio: a capacity limiter, run-vars and a cancel scope on
every call, which cost an append about as much CPU as storing its turn (BENCHMARKS.md, session 11).
This is the event loop's own executor hop with what the routes relied on kept: the caller's context
variables (structlog's bound session and tenant ids) are seen in the thread, and at most THREADS
calls run at once (anyio's default, the API's limit before).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

THREADS = 40

P = ParamSpec("P")
T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="compactd-api")


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """fn(*args, **kwargs) in the API's thread pool, in a copy of the caller's context."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_pool, call)
