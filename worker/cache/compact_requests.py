"""/compact requests in Redis: the pending request a job carries out, and its outcome for GET session.

`{prefix}force:<pk>` holds the pending request's redacted focus until a job serves it;
`{prefix}compact:<pk>` its status (pending, done, skipped), the epoch, why, and when it was asked.
Both expire after a day.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

TTL_SECONDS = 24 * 3600

# Record an outcome only for the request the job read: one made meanwhile stays pending.
_FINISH = """
if (redis.call('HGET', KEYS[2], 'requested_at') or '') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'epoch', ARGV[3], 'reason', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""


@dataclass(frozen=True, slots=True)
class CompactRequest:
    focus: str  # redacted; "" for none
    requested_at: str  # ISO time; "" for a request stored before outcomes were recorded


class CompactRequests:
    """Per-session /compact requests and their outcomes under one key prefix."""

    def __init__(self, client: redis.Redis, prefix: str):
        self.client = client
        self.prefix = prefix
        self._finish = client.register_script(_FINISH)

    def keys(self, session_pk: int) -> list[str]:
        return [f"{self.prefix}force:{session_pk}", f"{self.prefix}compact:{session_pk}"]

    def request(self, session_pk: int, focus: str, now: datetime) -> None:
        """Remember a user-driven compaction until a job carries it out; its status is pending."""
        force, status = self.keys(session_pk)
        pipe = self.client.pipeline()
        pipe.set(force, focus, ex=TTL_SECONDS)
        pipe.delete(status)
        pipe.hset(status, mapping={"status": "pending", "requested_at": now.isoformat()})
        pipe.expire(status, TTL_SECONDS)
        pipe.execute()

    def pending(self, session_pk: int) -> CompactRequest | None:
        """The request waiting for a job, or None (also when Redis is unreachable)."""
        force, status = self.keys(session_pk)
        with contextlib.suppress(redis.RedisError):
            pipe = self.client.pipeline()
            pipe.get(force)
            pipe.hget(status, "requested_at")
            focus, requested_at = pipe.execute()
            if focus is None:
                return None
            return CompactRequest(focus.decode(), (requested_at or b"").decode())
        return None

    def wait(self, session_pk: int, reason: str) -> None:
        """The request is still pending, and why (not yet a quiet point)."""
        with contextlib.suppress(redis.RedisError):
            self.client.hset(self.keys(session_pk)[1], "reason", reason)

    def finish(self, session_pk: int, request: CompactRequest, status: str, epoch: int, reason: str) -> bool:
        """Served: clear `request` and record its outcome; False when a newer request replaced it."""
        with contextlib.suppress(redis.RedisError):
            args: list[str | int] = [request.requested_at, status, epoch, reason, TTL_SECONDS]
            return bool(self._finish(keys=self.keys(session_pk), args=args))
        return False

    def status(self, session_pk: int) -> dict[str, Any] | None:
        """{status, epoch, reason, requested_at} of the latest request, or None."""
        try:
            raw = self.client.hgetall(self.keys(session_pk)[1])
        except redis.RedisError:
            return None
        if not raw:
            return None
        values = {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]
        epoch = values.get("epoch")
        return {
            "status": values.get("status", "pending"),
            "epoch": int(epoch) if epoch else None,
            "reason": values.get("reason") or None,
            "requested_at": values.get("requested_at") or None,
        }
