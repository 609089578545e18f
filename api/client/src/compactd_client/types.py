"""What the client returns: plain typed values decoded from the API's JSON, nothing that talks HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict


class MessagesKwargs(TypedDict):
    """Keyword arguments for `anthropic.Anthropic().messages.create(**kwargs)`, exactly as served."""

    model: str
    max_tokens: int
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tools: NotRequired[list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed; `idempotency_key` is the key sent (generated when not given)."""

    session_id: str
    first_seq: int
    last_seq: int
    version: int
    context_window: int
    window_assumed: bool
    warnings: list[str]
    idempotency_key: str

    @classmethod
    def from_json(cls, body: dict[str, Any], idempotency_key: str) -> AppendResult:
        return cls(
            session_id=body["session_id"],
            first_seq=body["first_seq"],
            last_seq=body["last_seq"],
            version=body["version"],
            context_window=body["context_window"],
            window_assumed=bool(body.get("window_assumed", False)),
            warnings=list(body.get("warnings", [])),
            idempotency_key=idempotency_key,
        )


@dataclass(frozen=True, slots=True)
class ServedPrompt:
    """GET /v1/sessions/{sid}/prompt: the ready request plus what compactd says about it."""

    session_id: str
    version: int
    epoch: int
    compacted_through: int
    token_count: int
    budget_tokens: int
    fallback: str | None
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ServedPrompt:
        return cls(
            session_id=body["session_id"],
            version=body["version"],
            epoch=body["epoch"],
            compacted_through=body["compacted_through"],
            token_count=body["token_count"],
            budget_tokens=body["budget_tokens"],
            fallback=body.get("fallback"),
            system=body["system"],
            messages=body["messages"],
        )

    def kwargs(
        self, *, model: str, max_tokens: int, tools: list[dict[str, Any]] | None = None
    ) -> MessagesKwargs:
        """The request for messages.create: the served system and messages untouched (their
        cache_control breakpoints are where the next fetch finds the same bytes)."""
        out = MessagesKwargs(model=model, max_tokens=max_tokens, system=self.system, messages=self.messages)
        if tools:
            out["tools"] = tools
        return out


@dataclass(frozen=True, slots=True)
class FileExcerpt:
    """A read of a virtual file: the text and a description of the range (or matches) it covers."""

    ref: str
    kind: str
    text: str
    description: str
    total_lines: int
    truncated: bool

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> FileExcerpt:
        return cls(
            ref=body["ref"],
            kind=body["kind"],
            text=body["text"],
            description=body["description"],
            total_lines=body["total_lines"],
            truncated=bool(body["truncated"]),
        )


@dataclass(frozen=True, slots=True)
class MemoryItem:
    section: str
    key: str
    value: str
    origin: str
    source_seq: int | None
    status: str
    pinned: bool
    tokens: int


@dataclass(frozen=True, slots=True)
class Memory:
    """A session's working memory: items by section, the block rendered into prompts, its version."""

    session_id: str
    scope: str
    version: int
    sections: dict[str, list[MemoryItem]]
    rendered: str
    tokens: int
    budget_tokens: int
    hard_cap_tokens: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Memory:
        fields = MemoryItem.__dataclass_fields__
        return cls(
            session_id=body["session_id"],
            scope=body.get("scope", ""),
            version=body["version"],
            sections={
                name: [MemoryItem(**{k: v for k, v in i.items() if k in fields}) for i in items]
                for name, items in body["sections"].items()
            },
            rendered=body["rendered"],
            tokens=body["tokens"],
            budget_tokens=body["budget_tokens"],
            hard_cap_tokens=body["hard_cap_tokens"],
        )


@dataclass(frozen=True, slots=True)
class CompactAccepted:
    """POST /compact was queued; its outcome shows later in `session(sid)["compact_request"]`."""

    session_id: str
    status: str
    version: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CompactAccepted:
        return cls(session_id=body["session_id"], status=body["status"], version=body["version"])


@dataclass(frozen=True, slots=True)
class Call:
    """One API request, described as data so the sync and async clients send the same thing.

    `retry_unsent_only`: the request is not idempotent, so after a failure that may have reached
    the server (a read timeout, a dropped response) it is not sent again; 429/503 answers and
    connection failures (nothing was sent) are still retried."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    retry_unsent_only: bool = False
