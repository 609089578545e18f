"""One Redis client for the cache: short timeouts, a key prefix, and a circuit breaker around calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from worker.cache.breaker import Breaker
from worker.settings import Settings

log = structlog.get_logger("compactd.cache")
T = TypeVar("T")


def make_redis(
    url: str, timeout_seconds: float = Settings.model_fields["redis_socket_timeout_seconds"].default
) -> redis.Redis:
    """A client that fails fast: short timeouts, no retries (redis-py's defaults take seconds)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        health_check_interval=0,
    )


class GuardedRedis:
    """A client, its key prefix and a circuit breaker shared by every part of the cache.

    Calls on the request path go through the breaker: a failed call (dead, frozen or unreachable
    Redis, each failing within the client's short timeout) makes the next `cooldown_seconds` of
    calls skip Redis at once, then one call probes it again. Callers get their "nothing cached"
    answer meanwhile and read the database.
    """

    def __init__(self, client: redis.Redis, prefix: str, cooldown_seconds: float = 1.0) -> None:
        self.client = client
        self.prefix = prefix
        self.breaker = Breaker(cooldown_seconds, on_change=_log_circuit)

    def call(self, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` when the breaker is open or Redis fails (unreachable or timing
        out opens it)."""
        if not self.breaker.allow():
            return default
        try:
            value = call()
        except (redis.ConnectionError, redis.TimeoutError):
            self.breaker.failed()
            return default
        except redis.RedisError:
            # the server answered (a script or type error): no reason to skip it
            self.breaker.succeeded()
            return default
        self.breaker.succeeded()
        return value


def _log_circuit(closed: bool) -> None:
    if closed:
        log.info("redis.circuit_closed")
    else:
        log.warning("redis.circuit_opened")
