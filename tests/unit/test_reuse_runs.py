"""The cache-reuse log's grouping (worker/cache/counters.py reuse_runs): a session's fetches, in
order, as runs of identical ones (what its one script call per batch takes); the counts themselves
are checked against real Redis in tests/integration/test_reuse_counters.py."""

from __future__ import annotations

from worker.cache.counters import reuse_runs


def test_runs_of_the_same_fetch_become_one_argument_group() -> None:
    """A batch of one prompt fetched again and again is one group per session, in order."""
    fetches = [(1, 0, 10, 8)] * 500 + [(2, 1, 5, 5), (1, 0, 10, 8), (1, 1, 12, 9), (1, 1, 12, 9)]
    assert reuse_runs(fetches) == {1: [0, 10, 8, 501, 1, 12, 9, 2], 2: [1, 5, 5, 1]}
