"""Locks and claims in Redis: one compaction at a time per session (`lock:`), and at most one job
waiting per session (`job:`)."""

from __future__ import annotations

import secrets
from typing import Any

from worker.cache.client import GuardedRedis

# A claim outlives any wait in the queue it guards; if its message is lost, the next append after
# it expires sends another (and the beat sweep finds the session before that).
JOB_CLAIM_SECONDS = 30.0

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Claims:
    """Per-session compaction locks and job claims."""

    def __init__(self, r: GuardedRedis) -> None:
        self.r = r
        self._release = r.client.register_script(_RELEASE)

    def lock(self, session_pk: int, ttl_seconds: float) -> str | None:
        """A per-session lock token, or None if someone else holds it."""
        token = secrets.token_hex(8)
        ok = self.r.client.set(
            f"{self.r.prefix}lock:{session_pk}", token, nx=True, px=int(ttl_seconds * 1000)
        )
        return token if ok else None

    def unlock(self, session_pk: int, token: str) -> bool:
        """Release only if still the owner (the lock may have expired and been taken)."""
        return bool(self._release(keys=[f"{self.r.prefix}lock:{session_pk}"], args=[token]))

    def claim_job(self, session_pk: int, ttl_seconds: float) -> bool | None:
        """True when no compaction job is pending for the session (the caller then sends one).

        At most one job waits per session: appends while it waits add nothing; the job compacts
        the latest version when it runs. The claim expires, so a lost message costs at most
        `ttl_seconds` (and the beat sweep finds the session anyway). None: Redis is unreachable.
        """
        key = self._job_key(session_pk)
        return self.r.call(lambda: bool(self.r.client.set(key, 1, nx=True, px=int(ttl_seconds * 1000))), None)

    def claim_job_command(self, session_pk: int, ttl_seconds: float) -> tuple[Any, ...]:
        """claim_job as one Redis command, for a caller that sends it on a connection of its own (the
        API's event loop: api/http/guard.py); its reply is OK when claimed, nil when a job waits."""
        return ("SET", self._job_key(session_pk), 1, "NX", "PX", int(ttl_seconds * 1000))

    def _job_key(self, session_pk: int) -> str:
        return f"{self.r.prefix}job:{session_pk}"

    def release_job_claim(self, session_pk: int) -> None:
        """A job has started: the next append must send a new one (it would see a newer version)."""
        self.r.call(lambda: self.r.client.delete(self._job_key(session_pk)), 0)
