"""A circuit breaker for the Redis cache: after a failure, skip Redis for a cool-down, then probe.

The transitions are pure functions of (state, now) so they can be tested without a clock or a
server; `Breaker` only adds a lock and the monotonic clock for the threads of one process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Circuit:
    """Closed when `open_until` is None; else calls are skipped until then (monotonic seconds)."""

    open_until: float | None = None

    @property
    def closed(self) -> bool:
        return self.open_until is None


CLOSED = Circuit()


def admit(c: Circuit, now: float, cooldown_seconds: float) -> tuple[bool, Circuit]:
    """Whether a call may go to the server now, and the state after deciding.

    Past the cool-down one call is let through as the probe; it takes a fresh cool-down as its
    lease, so concurrent callers keep skipping while it runs (and if it never reports, the next
    caller probes after that lease).
    """
    if c.open_until is None:
        return True, c
    if now < c.open_until:
        return False, c
    return True, Circuit(now + cooldown_seconds)


def succeeded(_: Circuit) -> Circuit:
    """A call answered: the server is back."""
    return CLOSED


def failed(_: Circuit, now: float, cooldown_seconds: float) -> Circuit:
    """A call failed: skip the server for a cool-down from now."""
    return Circuit(now + cooldown_seconds)


class Breaker:
    """The circuit of one process, shared by its threads; `on_change(closed)` sees each transition."""

    def __init__(
        self,
        cooldown_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.cooldown_seconds = cooldown_seconds
        self.clock = clock
        self.on_change = on_change
        self.state = CLOSED
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self.state.closed

    def allow(self) -> bool:
        """True when a call may go to the server (closed, or this call is the probe)."""
        state = self.state
        if state.closed:
            # the hot path: no lock while all is well
            return True
        with self._lock:
            ok, self.state = admit(self.state, self.clock(), self.cooldown_seconds)
        return ok

    def succeeded(self) -> None:
        if self.state.closed:
            return
        with self._lock:
            self.state = succeeded(self.state)
        if self.on_change is not None:
            self.on_change(True)

    def failed(self) -> None:
        with self._lock:
            was_closed = self.state.closed
            self.state = failed(self.state, self.clock(), self.cooldown_seconds)
        if was_closed and self.on_change is not None:
            self.on_change(False)
