"""Pending summaries in Redis: a summarized next epoch prepared ahead (`{prefix}pending:<pk>`), its
state for the job that switches it in and its prompt fragments for a fetch past the budget."""

from __future__ import annotations

from worker.cache.client import GuardedRedis
from worker.cache.prompts import _MISSING, FIELDS, Entry, entry_of, entry_values


class PendingSummaries:
    """The prepared next epoch of each session, if any."""

    def __init__(self, r: GuardedRedis) -> None:
        self.r = r

    def put(self, session_pk: int, state: bytes, entry: Entry) -> None:
        """Keep a summarized next epoch prepared ahead: its state (for the job that switches it in)
        and its prompt fragments (for a fetch that would otherwise pass the budget)."""
        key = f"{self.r.prefix}pending:{session_pk}"
        mapping = {"state": state, **dict(zip(FIELDS, entry_values(entry), strict=True))}

        def write() -> None:
            pipe = self.r.client.pipeline()
            pipe.delete(key)
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.execute()

        self.r.call(write, None)

    def exists(self, session_pk: int) -> bool:
        return bool(self.r.call(lambda: self.r.client.exists(f"{self.r.prefix}pending:{session_pk}"), 0))

    def state(self, session_pk: int) -> bytes | None:
        key = f"{self.r.prefix}pending:{session_pk}"
        return self.r.call(lambda: self.r.client.hget(key, "state"), None)  # type: ignore[arg-type,return-value]

    def entry(self, session_pk: int) -> Entry | None:
        """The prepared epoch's prompt fragments; None when there is none or Redis is down."""
        key = f"{self.r.prefix}pending:{session_pk}"
        return entry_of(self.r.call(lambda: self.r.client.hmget(key, FIELDS), _MISSING))

    def drop(self, session_pk: int) -> None:
        self.r.call(lambda: self.r.client.delete(f"{self.r.prefix}pending:{session_pk}"), 0)
