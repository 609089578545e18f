"""Observing: the compaction job's step that turns an agent's new turns into working memory."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import structlog

from worker.compaction.model import Turn
from worker.memory.model import MemoryOpError
from worker.memory.observe import observations
from worker.resources import Resources
from worker.store import memory, sessions
from worker.store.memory import MemoryOverCap

log = structlog.get_logger("compactd.observing")


def observe_memory(res: Resources, session_pk: int, turns: Sequence[Turn], seen: int) -> int:
    """Observe the turns after `seen` (earlier ones are context) into working memory, origin
    "observed": claim the range first so a turn is observed at most once, then apply the changes
    in groups that share a reason ("observed in turn N…"). Returns how many items changed.

    Only memory is written: whether and when the change reaches the prompt is the job's concern."""
    through = max((t.seq for t in turns), default=seen)
    if through <= seen or not sessions.claim_observed(res.engine, session_pk, seen, through):
        return 0
    found = observations(turns, memory.load(res.engine, session_pk), observed_through=seen)
    changed = 0
    for why, group in groupby(found, key=lambda o: o.reason):
        try:
            _, events = memory.change(
                res.engine, session_pk, [o.change for o in group], origin="observed", reason=why
            )
        except (MemoryOpError, MemoryOverCap) as exc:
            # the agent changed the same item meanwhile, or memory is full: skip, never block compaction
            log.warning("memory.observation_refused", reason=why, error=str(exc))
            continue
        changed += len(events)
    if changed:
        log.info("memory.observed", through_seq=through, items=changed)
    return changed
