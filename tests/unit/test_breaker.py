"""The Redis circuit breaker's state machine: skip after a failure, one probe per cool-down, close on success."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.cache.breaker import CLOSED, Breaker, Circuit, admit, failed, succeeded

COOL = 1.0


@pytest.mark.parametrize(
    ("state", "now", "allowed", "after"),
    [
        (CLOSED, 0.0, True, CLOSED),  # all is well: every call goes through
        (Circuit(5.0), 4.99, False, Circuit(5.0)),  # cooling down: skipped
        (Circuit(5.0), 5.0, True, Circuit(6.0)),  # cool-down over: this call probes, holding a lease
        (Circuit(5.0), 9.0, True, Circuit(10.0)),  # a late probe leases from when it runs
    ],
)
def test_admit(state: Circuit, now: float, allowed: bool, after: Circuit) -> None:
    """admit() lets calls through when closed, skips them while cooling down, then lets one probe."""
    assert admit(state, now, COOL) == (allowed, after)


def test_failure_opens_and_success_closes() -> None:
    """A failure opens the circuit for one cool-down from now; a success closes it."""
    assert failed(CLOSED, 3.0, COOL) == Circuit(4.0)
    assert failed(Circuit(10.0), 3.0, COOL) == Circuit(4.0)
    assert succeeded(Circuit(4.0)) == CLOSED


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breaker_skips_then_probes_then_recovers() -> None:
    """After a failure the breaker skips Redis, lets exactly one probe through per cool-down, and
    closes when a probe answers; transitions are reported once each."""
    clock, changes = Clock(), []
    b = Breaker(COOL, clock=clock, on_change=changes.append)
    assert b.allow()
    b.failed()
    assert not b.closed and changes == [False]
    clock.now = 0.5
    assert not b.allow()
    clock.now = 1.0
    assert b.allow()  # the probe
    assert not b.allow()  # concurrent callers keep skipping while it runs
    b.failed()  # the probe failed: another cool-down, no second "opened"
    assert changes == [False]
    clock.now = 2.0
    assert b.allow()
    b.succeeded()
    assert b.closed and b.allow() and changes == [False, True]


@given(
    st.lists(
        st.tuples(st.sampled_from(["allow", "ok", "fail"]), st.floats(0, 10, allow_nan=False)), max_size=60
    )
)
def test_never_more_than_one_probe_per_cooldown(events: list[tuple[str, float]]) -> None:
    """Whatever happens, while open the breaker admits at most one call per cool-down window, and
    it never skips a call for longer than one cool-down after the last failure or probe."""
    clock = Clock()
    b = Breaker(COOL, clock=clock)
    last_admitted_while_open: float | None = None
    last_mark = 0.0  # the last failure or probe
    for kind, step in events:
        clock.now += step
        if kind == "fail":
            b.failed()
            last_mark = clock.now
        elif kind == "ok":
            b.succeeded()
        else:
            was_open = not b.closed
            ok = b.allow()
            if was_open and ok:
                if last_admitted_while_open is not None:
                    assert clock.now - last_admitted_while_open >= COOL
                last_admitted_while_open = clock.now
                last_mark = clock.now
            if not ok:
                assert clock.now < last_mark + COOL
