"""SQLModel tables: tenants, API keys, sessions, turns, appends, snapshots (and their log), files, file reads, memory entries and events."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Column, DateTime, Index, LargeBinary, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    # sha256 hex of the tenant's first key; auth reads api_keys (this column predates it)
    api_key_hash: str = Field(index=True, unique=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class ApiKey(SQLModel, table=True):
    """One bearer key of a tenant: stored as a sha256, listed by its public id and prefix."""

    __tablename__ = "api_keys"

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    key_hash: str = Field(index=True, unique=True)  # sha256 hex of the bearer key
    key_id: str = Field(index=True)  # public: the hash's first 12 hex digits
    prefix: str = ""  # public: the key's first 12 characters ('' for keys migrated from tenants)
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)
    expires_at: datetime | None = Field(default=None, sa_type=DateTime)  # the end of a rotation's overlap
    revoked_at: datetime | None = Field(default=None, sa_type=DateTime)


class Session(SQLModel, table=True):
    __tablename__ = "sessions"
    __table_args__ = (UniqueConstraint("tenant_id", "client_id"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    client_id: str  # the {sid} in the URL, unique per tenant
    system: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    model: str | None = None
    context_window: int | None = None
    output_reserve: int | None = None
    activity: str = "idle"  # busy | idle, declared by the client
    last_append_at: datetime = Field(default_factory=utcnow, index=True, sa_type=DateTime)
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)
    version: int = 0  # the last seq
    epoch: int = 0  # the published snapshot's epoch
    compacted_through: int = 0  # the published snapshot's through_seq
    memory_version: int = 0  # bumped by every change to the prompt's head: memory or system prompt
    snapshot_memory_version: int = 0  # the memory_version the published snapshot rendered
    memory_observed_through: int = 0  # the last seq the worker observed into working memory
    # the memory version the served prompt shows: its pinned block, or the last memory note a
    # user turn carries since (an append notes the changes after it: worker/store/sessions.py),
    # what the worker observed counting as shown by the turns it came from
    noted_memory_version: int = 0
    # a summary archived turns since the block: the next note says what was observed too
    notes_restate: bool = False
    # how long the provider keeps the prompt cache (None: Settings.cache_ttl_seconds, its default)
    cache_ttl_seconds: int | None = None
    tokens: int = 0  # sum of the stored turns' tokens
    parent_session_id: int | None = None
    parent_tool_use_id: str | None = None


class Turn(SQLModel, table=True):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("session_id", "seq"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id")
    seq: int
    role: str
    content: str = Field(sa_column=Column(Text, nullable=False))  # JSON array of content blocks
    content_hash: str
    tokens: int
    idempotency_key: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class Append(SQLModel, table=True):
    """One idempotent append: a retry with the same key returns the same seqs."""

    __tablename__ = "appends"
    __table_args__ = (UniqueConstraint("session_id", "idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id")
    idempotency_key: str
    request_hash: str
    first_seq: int
    last_seq: int
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class Snapshot(SQLModel, table=True):
    __tablename__ = "snapshots"
    __table_args__ = (Index("ix_snapshots_session_epoch", "session_id", "epoch", "through_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int = Field(foreign_key="sessions.id")
    epoch: int
    through_seq: int
    tokens: int
    memory_version: int = 0
    pinned_memory_version: int = 0  # the memory version rendered into the pinned block (prefix)
    state: str = Field(sa_column=Column(Text, nullable=False))  # codec.transcript_to_json
    prompt: str = Field(sa_column=Column(Text, nullable=False))  # assemble(): {"system", "messages"}
    report: str = Field(sa_column=Column(Text, nullable=False))  # stage reports
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class SnapshotLog(SQLModel, table=True):
    """One line per published snapshot, kept after the snapshot itself is pruned: the inspector's
    history of prompt sizes and epochs."""

    __tablename__ = "snapshot_log"
    __table_args__ = (Index("ix_snapshot_log_session", "session_id", "through_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: int
    epoch: int
    through_seq: int
    tokens: int
    kind: str  # structural | summary | extend (worker/session_stats.py snapshot_kind)
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class File(SQLModel, table=True):
    """Offloaded payloads, clip originals and archives: content-addressed per tenant and session, zstd."""

    __tablename__ = "files"
    __table_args__ = (UniqueConstraint("tenant_id", "session_id", "ref"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    session_id: int = Field(index=True)
    ref: str
    kind: str
    media_type: str = "text/plain"
    size_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    lines: int = 0
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class FileRead(SQLModel, table=True):
    __tablename__ = "file_reads"

    id: int | None = Field(default=None, primary_key=True)
    file_id: int = Field(foreign_key="files.id", index=True)
    session_id: int | None = None
    range: str  # e.g. "lines 1-200"
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class MemoryEntry(SQLModel, table=True):
    """One working-memory item. A session's own rows have scope ''; shared rows (scope 'tenant' or
    'key:<name>') have session_id 0, so one unique constraint covers both on every backend."""

    __tablename__ = "memory_entries"
    __table_args__ = (UniqueConstraint("tenant_id", "session_id", "scope", "section", "key"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    session_id: int = Field(default=0, index=True)  # 0: a shared scope's row
    scope: str = ""
    section: str
    key: str = Field(sa_column=Column(Text, nullable=False))
    value: str = Field(sa_column=Column(Text, nullable=False))
    origin: str
    source_seq: int | None = None
    status: str = "open"
    pinned: bool = False
    tokens: int = 0
    written_by: int | None = None  # the session whose change wrote it (provenance of shared rows)
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)
    referenced_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class MemoryEvent(SQLModel, table=True):
    """What one change did to one memory item, under the memory version it produced."""

    __tablename__ = "memory_events"
    __table_args__ = (Index("ix_memory_events_owner", "tenant_id", "session_id", "scope", "version"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    session_id: int = 0  # 0: a shared scope's event
    scope: str = ""
    version: int
    at: datetime = Field(default_factory=utcnow, sa_type=DateTime)
    op: str
    section: str
    key: str = Field(sa_column=Column(Text, nullable=False))
    before: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    after: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    status: str = "open"
    origin: str
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    source_seq: int | None = None
    pinned: bool = False
    written_by: int | None = None


class ProxyConversation(SQLModel, table=True):
    """A session a conversation proxied through POST /v1/messages lives in (one row per branch) and
    the keyed chain hash of the client messages it covers (worker/proxy/fingerprints.py)."""

    __tablename__ = "proxy_conversations"
    __table_args__ = (UniqueConstraint("tenant_id", "key", "session_client_id"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    key: str  # the conversation's key (worker/proxy/conversations.py)
    session_client_id: str
    messages: int = 0
    chain: str = ""
    updated_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class ProxyResponse(SQLModel, table=True):
    """A response the Responses API drop-in answered (`store` not false), so a later request's
    `previous_response_id` resolves from compactd's own store: the conversation and the record of
    its client history once that response was appended (worker/proxy/reconcile.py Record)."""

    __tablename__ = "proxy_responses"

    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True)
    response_id: str = Field(primary_key=True)
    key: str  # the conversation's key
    session_client_id: str
    messages: int
    chain: str
    created_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class TenantUpstream(SQLModel, table=True):
    """Where a tenant's drop-in calls go instead of the deployment's upstream (an operator's
    setting: `compactd tenant upstream`), per provider."""

    __tablename__ = "tenant_upstreams"

    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True)
    provider: str = Field(primary_key=True)
    url: str
    updated_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class ProviderKey(SQLModel, table=True):
    """A provider key compactd holds for a tenant, per provider (`anthropic` for POST /v1/messages,
    `openai` for /v1/responses and /v1/chat/completions), sealed (worker/proxy/provider_keys.py):
    never stored in plain text."""

    __tablename__ = "provider_keys"

    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True)
    provider: str = Field(primary_key=True)
    sealed: str
    key_id: str  # public: a keyed hash's first 12 hex digits
    updated_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class TenantProviderKey(SQLModel, table=True):
    """Before schema 9: the Anthropic key compactd held for a tenant (copied to provider_keys by
    migration 9; no longer read or written)."""

    __tablename__ = "tenant_provider_keys"

    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True)
    sealed: str
    key_id: str  # public: a keyed hash's first 12 hex digits
    updated_at: datetime = Field(default_factory=utcnow, sa_type=DateTime)


class SchemaVersion(SQLModel, table=True):
    __tablename__ = "schema_version"

    id: int = Field(default=1, primary_key=True)
    version: int = 0
