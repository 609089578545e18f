"""The drop-in endpoint's held compaction jobs: sent once the upstream call is under way, none lost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.flows.held_jobs import HeldJobs

JOB = st.tuples(st.integers(1, 5), st.integers(1, 50), st.integers(1, 9))


@given(st.lists(JOB, max_size=5), st.lists(JOB, max_size=5))
def test_held_jobs_are_sent_once_in_order_then_passed_through(
    before: list[tuple[int, int, int]], after: list[tuple[int, int, int]]
) -> None:
    """Every job asked for is sent exactly once, in order: the held ones at release, later ones at once."""
    sent: list[tuple[int, int, int]] = []
    jobs = HeldJobs(lambda *job: sent.append(job))
    for job in before:
        jobs(*job)
    assert sent == [] and jobs.holding == bool(before)
    jobs.release()
    assert sent == before
    for job in after:
        jobs(*job)
    assert sent == before + after
    jobs.release()
    assert sent == before + after


def test_a_failing_enqueue_is_not_the_callers_failure() -> None:
    """An enqueue that raises at release is logged and the other held jobs are still sent."""
    sent: list[int] = []

    def enqueue(tenant: int, pk: int, version: int) -> None:
        if pk == 1:
            raise ConnectionError("broker down")
        sent.append(pk)

    jobs = HeldJobs(enqueue)
    jobs(1, 1, 1)
    jobs(1, 2, 1)
    jobs.release()
    assert sent == [2]
