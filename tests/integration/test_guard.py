"""The per-request Redis round trip (api/http/guard.py) over real Redis: the key stamp, the token bucket and
the caller's reads come back together, in order, whatever the server answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from api.http.guard import Guard, bump_stamp
from tests.integration.conftest import flush_prefix, free_port
from worker.cache.client import make_redis

pytestmark = pytest.mark.services


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
        verdict = guard.check("d" * 64, [("GET", f"{prefix}a"), ("HMGET", f"{prefix}h", "x", "y")])
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
    try:
        broken = guard.check("d" * 64, [("GET", f"{prefix}a"), ("LPOP", f"{prefix}a")])
        c.delete(f"{prefix}keys:stamp")
        stamp = bump_stamp(c, prefix)
        c.set(f"{prefix}b", b"second")
        after = guard.check("d" * 64, [("GET", f"{prefix}b")])
    finally:
        guard.close()
    assert broken.stamp is None and broken.replies == [b"first", None]
    assert after.stamp == stamp and after.replies == [b"second"]


def test_rate_limit_counts_every_check_of_a_key(client: tuple[redis.Redis, str]) -> None:
    """With a burst of 3 the fourth check in a row is told to wait; another key is not."""
    c, prefix = client
    guard = Guard(c, prefix, per_second=0.5, burst=3)
    try:
        waits = [guard.check("a" * 64).retry_after_ms for _ in range(4)]
        other = guard.check("b" * 64).retry_after_ms
    finally:
        guard.close()
    assert waits[:3] == [0, 0, 0] and waits[3] > 0 and other == 0


def test_a_dead_redis_gives_no_stamp_and_opens_the_circuit() -> None:
    """Nothing listening: no stamp, no replies (keys are then checked in the database), and the
    breaker skips Redis for the next requests instead of each waiting out a timeout."""
    c = make_redis(f"redis://127.0.0.1:{free_port()}/0")
    guard = Guard(c, "test-dead:", per_second=1.0, burst=1)
    try:
        verdict = guard.check("d" * 64, [("GET", "x")])
        assert verdict.stamp is None and verdict.replies is None
        assert not guard.breaker.closed
    finally:
        guard.close()
        c.close()
