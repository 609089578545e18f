"""Which Redis a one-shot command uses: COMPACTD_REDIS_URL, else a running `compactd up`'s own."""

from __future__ import annotations

from worker.settings import Settings


def with_redis(settings: Settings, command: str) -> Settings:
    """Settings with a Redis to use: COMPACTD_REDIS_URL, else the embedded one of a running
    `compactd up` (its socket in COMPACTD_VAR_DIR); else a one-line error, not a traceback."""
    if settings.redis_url:
        return settings
    sock = settings.var_dir / "redis.sock"
    if sock.exists():
        return settings.model_copy(update={"redis_url": f"unix://{sock.resolve()}"})
    raise SystemExit(
        f"{command}: needs Redis: set COMPACTD_REDIS_URL, or run it beside a running `compactd up` "
        f"(it uses {sock})"
    )
