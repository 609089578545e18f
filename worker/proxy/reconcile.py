"""Reconcile: what a request's history means for the stored session (a pure plan).

A conversation has one record per session it has lived in (its branches): the session and the
chain of the client messages that session covers. A history that extends one of them is appended
there (nothing when it is the same); one that extends none (the client edited, truncated or
compacted its history, /clear, a fork) continues in a new session, linked to the newest branch,
that starts with the client's whole history. Because every branch keeps its record, two histories
that alternate under one key (two sub-agents with the same start, a fork retried) each keep
landing in their own session instead of forking a new one at every switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Record:
    """Where a conversation lives and how much of the client's history that session covers."""

    session_id: str
    messages: int
    chain: str  # fingerprints.chains(...)[messages]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to store: the client messages from `start` on go to `session_id`; `expected` is the
    branch record this plan moves (None: a new branch is recorded), `after` the record once stored."""

    kind: Literal["new", "same", "extend", "diverged"]
    session_id: str
    start: int
    expected: Record | None
    after: Record
    parent_session_id: str | None = None

    @property
    def fresh(self) -> bool:
        """The plan starts a session: it must not exist yet (or be empty)."""
        return self.kind in ("new", "diverged")


def plan(records: Sequence[Record], chains: list[str], key: str, attempt: int = 0) -> Plan:
    """The plan for a history whose chain values (after 0..N messages) are `chains`, given the
    conversation's branch records, newest first.

    `attempt` > 0 after the chosen fresh session turned out to exist already: another name.
    """
    n = len(chains) - 1
    covering = [r for r in records if r.messages <= n and chains[r.messages] == r.chain]
    if covering:
        record = max(covering, key=lambda r: r.messages)
        kind: Literal["same", "extend"] = "same" if record.messages == n else "extend"
        return Plan(kind, record.session_id, record.messages, record, Record(record.session_id, n, chains[n]))
    if not records:
        if attempt == 0:
            return Plan("new", key, 0, None, Record(key, n, chains[n]))
        # a session by that name holds turns compactd did not store (the turns API): linked to it
        name = _branch(key, chains[n], attempt - 1)
        return Plan("new", name, 0, None, Record(name, n, chains[n]), parent_session_id=key)
    name = _branch(key, chains[n], attempt)
    return Plan(
        "diverged", name, 0, None, Record(name, n, chains[n]), parent_session_id=records[0].session_id
    )


def restart(record: Record, chains: list[str], key: str, attempt: int = 0) -> Plan:
    """The plan when the record's session is gone (deleted): the whole history in a new session."""
    n = len(chains) - 1
    name = _branch(key, chains[n], attempt)
    return Plan("diverged", name, 0, record, Record(name, n, chains[n]))


def _branch(key: str, chain: str, attempt: int) -> str:
    """A new session's id for a history: derived from it, so retrying the same request names the same one."""
    suffix = f".{chain[:12]}" + (f".{attempt}" if attempt else "")
    return key[: 200 - len(suffix)] + suffix
