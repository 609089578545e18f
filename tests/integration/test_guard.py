"""The per-request Redis round trip (api/http/guard.py) over real Redis: the key stamp, the token bucket and
the caller's reads come back together, in order, whatever the server answers, for concurrent
requests on one connection too, and a frozen server costs a request at most the socket timeout."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import redis

from api.http.guard import Guard, Verdict, bump_stamp
from tests.integration.conftest import flush_prefix, free_port
from tests.services import PrivateRedis
from worker.cache.client import make_redis

pytestmark = pytest.mark.services
T = TypeVar("T")


def closing(guard: Guard, step: Coroutine[Any, Any, T]) -> T:
    """Run `step` in a new event loop and close the guard in it (its connection belongs to it)."""

    async def run() -> T:
        try:
            return await step
        finally:
            guard.close()
            await asyncio.sleep(0)  # the transport's closing callback runs in this loop

    return asyncio.run(run())


@pytest.fixture
def client(redis_url: str) -> Iterator[tuple[redis.Redis, str]]:
    prefix = f"test-guard-{uuid.uuid4().hex[:8]}:"
    c = make_redis(redis_url)
    yield c, prefix
    c.close()
    flush_prefix(redis_url, prefix)


def test_reads_ride_in_the_key_check_and_come_back_in_order(client: tuple[redis.Redis, str]) -> None:
    """The stamp, the bucket's verdict and each read's reply, in the order the reads were given."""
    c, prefix = client
    c.set(f"{prefix}a", b"1")
    c.hset(f"{prefix}h", mapping={"x": b"2"})
    stamp = bump_stamp(c, prefix)
    guard = Guard(c, prefix, per_second=10.0, burst=5)
    try:
        verdict = closing(
            guard, guard.check("d" * 64, [("GET", f"{prefix}a"), ("HMGET", f"{prefix}h", "x", "y")])
        )
    finally:
        guard.close()
    assert verdict.stamp == stamp and verdict.retry_after_ms == 0
    assert verdict.replies == [b"1", [b"2", None]]


def test_an_error_reply_leaves_the_next_round_trip_in_step(client: tuple[redis.Redis, str]) -> None:
    """A stamp key of the wrong type is an error reply: that request gets no stamp, and the next
    request on the same connection still reads its own replies, not the previous one's."""
    c, prefix = client
    c.rpush(f"{prefix}keys:stamp", b"not a string")
    c.set(f"{prefix}a", b"first")
    guard = Guard(c, prefix, per_second=0.0, burst=1)

    async def two_checks() -> tuple[Verdict, Verdict, str]:
        broken = await guard.check("d" * 64, [("GET", f"{prefix}a"), ("LPOP", f"{prefix}a")])
        c.delete(f"{prefix}keys:stamp")
        stamp = bump_stamp(c, prefix)
        c.set(f"{prefix}b", b"second")
        return broken, await guard.check("d" * 64, [("GET", f"{prefix}b")]), stamp

    try:
        broken, after, stamp = closing(guard, two_checks())
    finally:
        guard.close()
    assert broken.stamp is None and broken.replies == [b"first", None]
    assert after.stamp == stamp and after.replies == [b"second"]


def test_rate_limit_counts_every_check_of_a_key(client: tuple[redis.Redis, str]) -> None:
    """With a burst of 3 the fourth check in a row is told to wait; another key is not."""
    c, prefix = client
    guard = Guard(c, prefix, per_second=0.5, burst=3)
    try:

        async def checks() -> tuple[list[int], int]:
            waits = [(await guard.check("a" * 64)).retry_after_ms for _ in range(4)]
            return waits, (await guard.check("b" * 64)).retry_after_ms

        waits, other = closing(guard, checks())
    finally:
        guard.close()
    assert waits[:3] == [0, 0, 0] and waits[3] > 0 and other == 0


def test_a_dead_redis_gives_no_stamp_and_opens_the_circuit() -> None:
    """Nothing listening: no stamp, no replies (keys are then checked in the database), and the
    breaker skips Redis for the next requests instead of each waiting out a timeout."""
    c = make_redis(f"redis://127.0.0.1:{free_port()}/0")
    guard = Guard(c, "test-dead:", per_second=1.0, burst=1)
    try:
        verdict = closing(guard, guard.check("d" * 64, [("GET", "x")]))
        assert verdict.stamp is None and verdict.replies is None
        assert not guard.breaker.closed
    finally:
        guard.close()
        c.close()


def test_concurrent_checks_share_the_connection_and_each_gets_its_own_replies(
    client: tuple[redis.Redis, str],
) -> None:
    """Many requests in flight at once on the one connection (replies as large as a prompt entry)
    each get their own reads back, and one cancelled while it waits for its replies (its client
    left) does not shift the replies of the ones after it."""
    c, prefix = client
    values = {i: f"value {i} ".encode() * (1 + 4_000 * (i % 5)) for i in range(40)}
    for i, value in values.items():
        c.set(f"{prefix}k{i}", value)
    stamp = bump_stamp(c, prefix)
    guard = Guard(c, prefix, per_second=0.0, burst=1)

    async def one(i: int) -> Verdict:
        return await guard.check("d" * 64, [("GET", f"{prefix}k{i}")])

    async def many() -> list[Verdict | BaseException]:
        await guard.check("d" * 64)  # the connection is open
        tasks = [asyncio.create_task(one(i)) for i in range(40)]
        await asyncio.sleep(0)  # every task has written its commands and waits for its replies
        assert guard._pipe is not None and len(guard._pipe.waiting) == 40  # type: ignore[union-attr]
        tasks[7].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    got = closing(guard, many())
    assert isinstance(got[7], asyncio.CancelledError)
    for i, verdict in enumerate(got):
        if i != 7:
            assert isinstance(verdict, Verdict) and verdict.stamp == stamp and verdict.replies == [values[i]]


def test_requests_waiting_for_the_connection_outlive_a_cancelled_opener(
    client: tuple[redis.Redis, str],
) -> None:
    """The first request opens the connection and the others wait for it; the first one's client
    leaving (cancelled mid-open) neither cancels the opening nor leaves the others waiting."""
    c, prefix = client
    stamp = bump_stamp(c, prefix)
    guard = Guard(c, prefix, per_second=0.0, burst=1)

    async def opener_cancelled() -> list[Verdict | BaseException]:
        tasks = [asyncio.create_task(guard.check("d" * 64)) for _ in range(5)]
        await asyncio.sleep(0)  # the first is opening, the others await it
        tasks[0].cancel()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)

    got = closing(guard, opener_cancelled())
    assert isinstance(got[0], asyncio.CancelledError)
    assert all(isinstance(v, Verdict) and v.stamp == stamp for v in got[1:])


def test_a_frozen_redis_costs_a_request_at_most_the_timeout_then_the_guard_recovers(
    private_redis: PrivateRedis,
) -> None:
    """SIGSTOP: the waiting request gets no stamp after the socket timeout (0.25 s) and the
    circuit opens; once the server runs again a new connection answers in step."""
    c = make_redis(private_redis.url)
    stamp = bump_stamp(c, "test-frozen:")
    guard = Guard(c, "test-frozen:", per_second=0.0, burst=1)

    async def frozen_then_resumed() -> tuple[Verdict, float, Verdict]:
        assert (await guard.check("d" * 64)).stamp == stamp  # the connection is open
        private_redis.signal(signal.SIGSTOP)
        started = time.monotonic()
        during = await guard.check("d" * 64)
        took = time.monotonic() - started
        private_redis.signal(signal.SIGCONT)
        await asyncio.sleep(guard.breaker.cooldown_seconds + 0.1)  # the circuit lets a probe through
        return during, took, await guard.check("d" * 64, [("GET", "test-frozen:keys:stamp")])

    try:
        during, took, after = closing(guard, frozen_then_resumed())
    finally:
        guard.close()
        c.close()
    assert during.stamp is None and took < 1.0
    assert after.stamp == stamp and after.replies == [stamp.encode()]


def test_a_version_is_noted_on_the_guards_connection(client: tuple[redis.Redis, str]) -> None:
    """note_version's command sent on the guard's connection moves the noted version forward only,
    as the prompt cache's own note does, in step with the key checks sharing the connection; an
    error reply or a dead Redis is False, never raised."""
    from worker.cache.cache import Cache

    c, prefix = client
    prompts = Cache(c, prefix).prompts
    guard = Guard(c, prefix, per_second=0, burst=1)

    async def noted() -> list[bool]:
        sent = [
            guard.send([prompts.note_version_command(7, 5, 200_000, None)]),
            guard.check("d" * 64),
            guard.send([prompts.note_version_command(7, 3, 100_000, 10)]),  # older: no move
            guard.send([("GET", f"{prefix}x"), ("HSET", f"{prefix}x")]),  # HSET without a field: an error
        ]
        done = await asyncio.gather(*sent)
        after = await guard.check("d" * 64)  # the connection is still in step after the error
        return [done[0], isinstance(done[1], Verdict), done[2], done[3], after.stamp is not None]

    assert closing(guard, noted()) == [True, True, True, False, True]
    assert prompts.noted_version(7) == (5, 200_000, None)
    dead = Guard(make_redis(f"redis://127.0.0.1:{free_port()}/0"), prefix, per_second=0, burst=1)
    assert closing(dead, dead.send([prompts.note_version_command(7, 9, None, None)])) is False
