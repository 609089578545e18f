"""The quiet point: when a summary may be switched in. One rule for the job and the simulator."""

from __future__ import annotations

from worker.compaction.model import Transcript


def why_not_quiet(t: Transcript, *, busy: bool = False) -> str:
    """Why `t` is not at a quiet point ("" when it is): a tool call waiting for its result (the last
    turn is the assistant's and calls tools), or the client declared itself busy."""
    last = t.turns[-1] if t.turns else None
    if last is not None and last.role == "assistant" and last.tool_use_ids():
        return "waiting for a quiet point: a tool call is waiting for its result"
    return "waiting for a quiet point: the client declared itself busy" if busy else ""


def is_quiet(t: Transcript, *, busy: bool = False) -> bool:
    """A quiet point: no tool call waiting for its result and the client not busy."""
    return not why_not_quiet(t, busy=busy)
