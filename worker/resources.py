"""Resources a process builds once (engine, Redis, redactor) from Settings, and what they derive."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import structlog
from sqlalchemy import Engine

from worker.cache.cache import Cache
from worker.cache.client import make_redis
from worker.compaction.model import Policy
from worker.compaction.ports import Summarizer
from worker.keyfile import redaction_key
from worker.redaction import Redactor, kingfisher
from worker.redaction.scanner import ALL, strict_rules
from worker.settings import Settings
from worker.store.db import engine_for as engine_for  # where callers have always found it
from worker.store.db import migrate

log = structlog.get_logger("compactd.resources")


def redactor_for(settings: Settings) -> Redactor:
    """The deployment's Redactor: its key, and the strict rules when COMPACTD_REDACTION=strict."""
    return Redactor(redaction_key(settings), strict_rules() if settings.redaction == "strict" else ALL)


def redis_url(settings: Settings) -> str:
    if not settings.redis_url:
        raise RuntimeError("COMPACTD_REDIS_URL is not set (compactd up starts an embedded Redis and sets it)")
    return settings.redis_url


def broker_url(settings: Settings) -> str:
    url = settings.broker_url or redis_url(settings)
    # kombu spells a Unix-socket Redis "redis+socket://"; redis-py spells it "unix://"
    return "redis+socket://" + url[len("unix://") :] if url.startswith("unix://") else url


@dataclass
class Resources:
    settings: Settings
    engine: Engine
    cache: Cache
    redactor: Redactor
    _base_policy: Policy | None = None
    _summarizer: Summarizer | None = None
    _summarizer_built: bool = False

    @classmethod
    def build(cls, settings: Settings, *, run_migrations: bool = True, warm_rules: bool = True) -> Resources:
        """warm_rules=False: Kingfisher's catalog loads on the first redaction instead (~0.5 s of
        CPU), for a process that may never redact or that inherits it loaded (a pool process)."""
        rules = kingfisher.prewarm(settings.rule_cache_dir)
        if rules.startswith("unusable"):
            log.warning("kingfisher.rule_cache_unusable", dir=str(settings.rule_cache_dir), status=rules)
        if warm_rules:
            kingfisher.warm()
        engine = engine_for(settings)
        if run_migrations:
            migrate(engine)
        client = make_redis(redis_url(settings), settings.redis_socket_timeout_seconds)
        return cls(settings, engine, Cache(client, settings.redis_prefix), redactor_for(settings))

    def policy_for(self, context_window: int | None, output_reserve: int | None) -> Policy:
        return _policy(self.base_policy, context_window, output_reserve)

    @property
    def base_policy(self) -> Policy:
        if self._base_policy is None:
            self._base_policy = self.settings.policy()
        return self._base_policy

    @property
    def summarizer(self) -> Summarizer | None:
        """The configured summarizer (None: the extractive default), built on first use (workers only)."""
        if not self._summarizer_built:
            from worker.summarizers import build_summarizer

            self._summarizer = build_summarizer(self.settings, self.redactor)
            self._summarizer_built = True
        return self._summarizer

    def close(self) -> None:
        self.engine.dispose()
        self.cache.client.close()
        close = getattr(self._summarizer, "close", None)  # an AnthropicSummarizer's pooled connections
        if close is not None:
            close()


def policy_for(settings: Settings, context_window: int | None, output_reserve: int | None) -> Policy:
    """The settings' policy with the session's window; the output reserve never exceeds a quarter of it."""
    return _policy(settings.policy(), context_window, output_reserve)


@lru_cache(maxsize=1024)
def _policy(base: Policy, context_window: int | None, output_reserve: int | None) -> Policy:
    return base.for_window(context_window, output_reserve)
