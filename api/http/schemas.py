"""Wire models of the HTTP API (never table classes). The append request (shared with the
`compactd.append` task) and the memory patch (shared with the proxy's tools) are in
worker/contracts.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from worker.contracts import DB_INT_MAX, Activity


class AppendResponse(BaseModel):
    session_id: str
    first_seq: int
    last_seq: int
    version: int
    context_window: int  # the session's window: its own, or the deployment's default
    window_assumed: bool = False  # an unknown model name and no window given: the default is a guess
    warnings: list[str] = Field(default_factory=list)


class ActivityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Activity


class ActivityResponse(BaseModel):
    session_id: str
    activity: Activity


class PromptResponse(BaseModel):
    """Documentation only: the route returns these fields as stored JSON bytes."""

    session_id: str
    version: int
    epoch: int
    compacted_through: int
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    token_count: int
    budget_tokens: int
    fallback: str | None = None  # "pending" or "fit" when the published snapshot + tail would not fit
    # the messages end with an assistant message (an imported history cut after the model's turn):
    # the model is asked to continue it, which some models refuse; append the next user turn first
    prefill: bool = False


class Profile(BaseModel):
    model: str | None
    context_window: int | None
    output_reserve: int | None


class Counts(BaseModel):
    turns: int
    files: int
    memory_items: int


class CompactRequest(BaseModel):
    """POST /v1/sessions/{sid}/compact: summarize now (at the next quiet point), like /compact."""

    focus: str | None = Field(
        default=None, max_length=4_000, description="What the summary should keep in focus."
    )


class CompactResponse(BaseModel):
    session_id: str
    status: str
    version: int


class CompactRequestStatus(BaseModel):
    status: Literal["pending", "done", "skipped"]
    epoch: int | None  # the epoch published when it was served
    reason: str | None  # why it is still pending, or why it was skipped
    requested_at: str | None


class SessionInfo(BaseModel):
    session_id: str
    version: int
    epoch: int
    compacted_through: int
    activity: Activity
    tokens: int
    snapshot_tokens: int | None
    profile: Profile
    counts: Counts
    parent_session_id: str | None
    parent_tool_use_id: str | None
    created_at: str
    last_append_at: str
    cache_reuse: dict[str, float] | None = None
    summarizer_usage: dict[str, float] | None = None
    switches: dict[str, int] | None = (
        None  # prepared summaries switched in, by reason (quiet, deadline, forced)
    )
    compact_request: CompactRequestStatus | None = None  # the latest /compact, kept for a day


class MemoryItemIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=200)
    value: str = Field(max_length=20_000)
    pinned: bool = False


class MemoryPut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryItemIn] = Field(min_length=1, max_length=500)


class MemoryItemOut(BaseModel):
    """A `notes` item in the original flat shape."""

    key: str
    value: str
    pinned: bool
    tokens: int
    updated_at: str


class MemoryEntryOut(BaseModel):
    section: str
    key: str
    value: str
    origin: str
    source_seq: int | None
    status: str
    pinned: bool
    tokens: int
    created_at: str
    updated_at: str


class MemoryResponse(BaseModel):
    session_id: str
    scope: str = ""
    version: int
    sections: dict[str, list[MemoryEntryOut]]
    rendered: str
    items: list[MemoryItemOut]  # the notes section, as before sections existed
    tokens: int  # of the rendered block
    budget_tokens: int
    hard_cap_tokens: int


class MemoryRestore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: int = Field(ge=1, le=DB_INT_MAX)


class MemoryEventOut(BaseModel):
    id: int
    at: str
    op: str
    section: str
    key: str
    before: str | None
    after: str | None
    status: str
    origin: str
    reason: str
    written_by: str | None = None  # the session that wrote it (shared scopes)


class MemoryVersionOut(BaseModel):
    version: int
    events: list[MemoryEventOut]


class MemoryHistory(BaseModel):
    session_id: str
    scope: str = ""
    version: int
    versions: list[MemoryVersionOut]


class MemoryChangedOut(BaseModel):
    section: str
    key: str
    before: MemoryEntryOut
    after: MemoryEntryOut


class MemoryDiffOut(BaseModel):
    session_id: str
    scope: str = ""
    from_version: int
    to_version: int
    added: list[MemoryEntryOut]
    removed: list[MemoryEntryOut]
    changed: list[MemoryChangedOut]
