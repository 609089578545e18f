"""Observing: the compaction job's step that turns an agent's new turns into working memory."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import structlog

from worker.compaction.model import Turn
from worker.memory.observe import mentioned, observations
from worker.resources import Resources
from worker.store import memory

log = structlog.get_logger("compactd.observing")


def observe_memory(res: Resources, session_pk: int, turns: Sequence[Turn], seen: int) -> int:
    """Observe the turns after `seen` (earlier ones are context) into working memory, origin
    "observed", in groups that share a reason ("observed in turn N…"). The changes and the move of
    the watermark to the newest turn commit together (memory.record_observed): each turn is observed
    at most once, and a crash observes it again. A group refused (the agent changed the item, memory
    is full) is logged and skipped; the others apply. Items the turns mention are marked referenced.
    Returns how many items changed.

    Only memory is written: whether and when the change reaches the prompt is the job's concern."""
    through = max((t.seq for t in turns), default=seen)
    if through <= seen:
        return 0
    found = observations(turns, memory.load(res.engine, session_pk), observed_through=seen)
    groups = [(why, [o.change for o in group]) for why, group in groupby(found, key=lambda o: o.reason)]
    done = memory.record_observed(
        res.engine,
        session_pk,
        groups,
        seen=seen,
        through=through,
        mentioned=mentioned(turns, observed_through=seen),
    )
    if done is None:
        return 0  # another job observed these turns
    for why, error in done.refused:
        log.warning("memory.observation_refused", reason=why, error=error)
    if done.events:
        log.info("memory.observed", through_seq=through, items=len(done.events))
    return len(done.events)
