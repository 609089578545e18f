"""The Redis cache, by job: prompt entries, pending summaries, locks and claims, counters, /compact
requests; one client, key prefix and circuit breaker shared by all. Short timeouts throughout."""

from __future__ import annotations

import redis

from worker.cache.claims import Claims
from worker.cache.client import GuardedRedis
from worker.cache.compact_requests import CompactRequests
from worker.cache.counters import Counters
from worker.cache.pending import PendingSummaries
from worker.cache.prompts import PromptEntries
from worker.settings import Settings


class Cache:
    """Everything compactd keeps in Redis for a session, under one key prefix."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = Settings.model_fields["redis_prefix"].default,
        cooldown_seconds: float = 1.0,
    ):
        self.r = GuardedRedis(client, prefix, cooldown_seconds)
        self.client, self.prefix, self.breaker = client, prefix, self.r.breaker
        self.pks: dict[tuple[int, str], int] = {}  # (tenant, client session id) -> session pk
        self.prompts = PromptEntries(self.r)
        self.pending = PendingSummaries(self.r)
        self.claims = Claims(self.r)
        self.counters = Counters(self.r)
        self.compact_requests = CompactRequests(client, prefix)

    @property
    def available(self) -> bool:
        """False while the breaker skips Redis (it failed less than a cool-down ago)."""
        return self.breaker.closed

    def drop(self, session_pk: int) -> None:
        kinds = ("force", "compact", "shared", "reuse", "usage", "pending", "job", "switches", "version")
        keys = [self.prompts.key(session_pk), *(f"{self.prefix}{k}:{session_pk}" for k in kinds)]
        self.r.call(lambda: self.r.client.delete(*keys), 0)

    def invalidate(self, session_pk: int) -> None:
        """Forget the cached prompt and any prepared summary (the memory block changed); the
        session's counters, claim and /compact request stay."""
        keys = (self.prompts.key(session_pk), f"{self.prefix}pending:{session_pk}")
        self.r.call(lambda: self.r.client.delete(*keys), 0)
