"""Epochs: when a compaction result is worth publishing, and what the agent is served between them.

Between epochs the served prompt only grows at the end (the same prefix bytes, so a provider's
prompt cache keeps hitting). A new epoch rewrites the middle, so it must save enough to pay for
the cache it throws away: at least `worth_it_tokens` and `worth_it_share` of the prompt, or the
prompt must be over the summarization trigger (it has to shrink, whatever the cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from worker.compaction.assemble import add_status, assemble, merge_roles
from worker.compaction.model import Policy, Transcript, Turn, canonical_json


class Decision(StrEnum):
    NEW_EPOCH = "new_epoch"  # publish the compacted transcript: the prefix changes
    EXTEND = "extend"  # nothing was rewritten: the snapshot just covers the new turns
    SKIP = "skip"  # a rewrite that saves too little; keep serving the old prefix plus the tail


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    tokens_before: int
    tokens_after: int

    @property
    def saved_tokens(self) -> int:
        return self.tokens_before - self.tokens_after


def decide(current: Transcript, compacted: Transcript, policy: Policy) -> Verdict:
    """Compare the served state (snapshot + tail, as a transcript) with a compaction of it."""
    before, after = current.tokens(), compacted.tokens()
    if compacted.turns == current.turns and compacted.handoff == current.handoff:
        return Verdict(Decision.EXTEND, before, after)
    saved = before - after
    must_shrink = before > policy.summarize_trigger_tokens and saved > 0
    worth_it = saved >= policy.worth_it_tokens and saved >= policy.worth_it_share * before
    return Verdict(Decision.NEW_EPOCH if (must_shrink or worth_it) else Decision.SKIP, before, after)


def extend(snapshot: Transcript, tail: Sequence[Turn]) -> Transcript:
    """The snapshot state plus turns appended after it."""
    return replace(snapshot, turns=snapshot.turns + tuple(tail), files=())


def served_request(snapshot: Transcript, tail: Sequence[Turn], note: str = "") -> dict[str, Any]:
    """What a fetch returns as {system, messages}: the snapshot, the tail merged on, the status note last."""
    request = assemble(snapshot)
    messages = merge_roles([*request["messages"], *(t.as_message() for t in tail)])
    return {"system": request["system"], "messages": add_status(messages, note)}


def shared_prefix_share(previous: bytes, current: bytes) -> float:
    """Share of `current` that repeats `previous` byte for byte from the start (what a cache reuses)."""
    return common_prefix_bytes(previous, current) / len(current) if current else 1.0


def common_prefix_bytes(previous: bytes, current: bytes) -> int:
    """How many leading bytes two byte strings share."""
    n = min(len(previous), len(current))
    lo, hi = 0, n
    while lo < hi:  # binary search on the common prefix: bytes compare in C
        mid = (lo + hi + 1) // 2
        if previous[:mid] == current[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def request_bytes(request: dict[str, Any]) -> bytes:
    """The request as a provider reads it for caching: system first, then messages, in order."""
    return (
        b'{"system":'
        + canonical_json(request["system"])
        + b',"messages":'
        + canonical_json(request["messages"])
        + b"}"
    )
