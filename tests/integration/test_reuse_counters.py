"""The cache-reuse counts (worker/cache/counters.py) against real Redis: the API's batched write,
one script call per session over runs of identical fetches, counts exactly what counting each fetch
against the one before it counts, however the fetches fall into batches."""

from __future__ import annotations

import itertools
import uuid

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.conftest import flush_prefix
from worker.cache.client import GuardedRedis
from worker.cache.counters import Counters

pytestmark = pytest.mark.services

Fetch = tuple[int, int, int, int]  # (session pk, epoch, request bytes, stable bytes)


def per_fetch(fetches: list[Fetch], shared: dict[int, tuple[int, int]]) -> dict[int, tuple[int, float, int]]:
    """The rule, one fetch at a time: (fetches compared, share sum, fetches reusing >= 90%) per
    session. A fetch is compared with the session's previous one: it shares the previous fetch's
    stable bytes in the same epoch; across epochs at most what the new epoch's snapshot shares
    with the old one (`shared`: pk -> (epoch, bytes)), nothing when that is not known."""
    prev: dict[int, tuple[int, int]] = {}
    out: dict[int, tuple[int, float, int]] = {}
    for pk, epoch, total, stable in fetches:
        if pk in prev:
            p_epoch, p_stable = prev[pk]
            bytes_ = p_stable
            if p_epoch != epoch:
                snap = shared.get(pk)
                bytes_ = min(bytes_, snap[1]) if snap is not None and snap[0] == epoch else 0
            share = min(bytes_, total) / total if total > 0 else 0.0
            n, s, r = out.get(pk, (0, 0.0, 0))
            out[pk] = (n + 1, s + share, r + (share >= 0.9))
        prev[pk] = (epoch, stable)
    return out


fetch = st.tuples(
    st.sampled_from([1, 2, 3]),
    st.integers(0, 2),
    st.sampled_from([0, 100, 1000, 1000, 5000]),
    st.sampled_from([0, 90, 950, 1000, 4000]),
)


@settings(max_examples=60, deadline=None)
@given(
    fetches=st.lists(fetch, max_size=40).flatmap(
        lambda fs: st.tuples(st.just(fs), st.lists(st.integers(0, len(fs)), max_size=4))
    ),
    shared=st.dictionaries(st.sampled_from([1, 2, 3]), st.tuples(st.integers(0, 2), st.integers(0, 5000))),
)
def test_batched_counts_equal_counting_each_fetch(
    redis_url: str, fetches: tuple[list[Fetch], list[int]], shared: dict[int, tuple[int, int]]
) -> None:
    """Any fetch order, any cut into batches, any snapshot sharing: the same counts."""
    order, cuts = fetches
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    client = redis.Redis.from_url(redis_url)
    try:
        counters = Counters(GuardedRedis(client, prefix))
        for pk, (epoch, bytes_) in shared.items():
            client.hset(f"{prefix}shared:{pk}", mapping={"epoch": epoch, "bytes": bytes_})
        bounds = [0, *sorted(cuts), len(order)]
        for start, end in itertools.pairwise(bounds):
            counters.record_fetches(order[start:end])
        for pk, (n, share_sum, reused) in per_fetch(order, shared).items():
            got = {k.decode(): float(v) for k, v in client.hgetall(f"{prefix}reuse:{pk}").items()}
            assert got.get("fetches", 0) == n
            assert got.get("reused_90", 0) == reused
            assert got.get("share_sum", 0.0) == pytest.approx(share_sum, abs=1e-9)
        for pk in {1, 2, 3} - set(per_fetch(order, shared)):
            assert client.hget(f"{prefix}reuse:{pk}", "fetches") is None
    finally:
        flush_prefix(redis_url, prefix)
        client.close()
