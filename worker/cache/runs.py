"""Scheduled runs in Redis: claim a period once across every beat and worker, and record each run."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
import redis

KEEP_RUNS = 1_000  # the newest records kept per job


class Runs:
    """Claims and records of one periodic job (e.g. "prune") under the deployment's key prefix."""

    def __init__(self, client: redis.Redis, prefix: str, job: str) -> None:
        self.client, self.prefix, self.job = client, prefix, job

    def claim_key(self, period_start: datetime) -> str:
        return f"{self.prefix}{self.job}:{period_start.isoformat()}"

    def claim(self, period_start: datetime, period: timedelta) -> bool:
        """True for the first caller in this period, False for every other (a second beat's message,
        a redelivery). The key outlives the period, so a late duplicate cannot claim it again."""
        ttl_ms = int(2 * period.total_seconds() * 1000) + 60_000
        return bool(self.client.set(self.claim_key(period_start), "1", nx=True, px=ttl_ms))

    def release(self, period_start: datetime) -> None:
        """Give a claimed period back (the run failed): a redelivery or the other beat may run it."""
        self.client.delete(self.claim_key(period_start))

    def record(self, run: dict[str, Any]) -> None:
        """Append a run's record (newest first, the newest KEEP_RUNS kept)."""
        key = f"{self.prefix}{self.job}:runs"
        pipe = self.client.pipeline()
        pipe.lpush(key, orjson.dumps(run, option=orjson.OPT_NAIVE_UTC))
        pipe.ltrim(key, 0, KEEP_RUNS - 1)
        pipe.execute()

    def skipped(self) -> None:
        """Count a message that found its period already claimed."""
        self.client.incr(f"{self.prefix}{self.job}:skipped")

    def history(self) -> list[dict[str, Any]]:
        """Every recorded run, oldest first."""
        raw = self.client.lrange(f"{self.prefix}{self.job}:runs", 0, -1)
        return [orjson.loads(r) for r in reversed(raw)]  # type: ignore[arg-type]

    def skipped_count(self) -> int:
        return int(self.client.get(f"{self.prefix}{self.job}:skipped") or 0)  # type: ignore[arg-type]
