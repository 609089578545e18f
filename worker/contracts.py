"""Contracts shared by every way in (the HTTP route and the `compactd.append` task): the append
request, the session-id rule and the client's activity; the memory patch (PATCH …/memory and the
proxy's update_working_memory tool). Pydantic only: no FastAPI, no Celery."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# a session id: what a path segment, a Redis key and a log field all hold safely
SESSION_ID_PATTERN = r"^[A-Za-z0-9._:@-]+$"
SESSION_ID_MAX_LENGTH = 200
SessionId = Annotated[str, Field(min_length=1, max_length=SESSION_ID_MAX_LENGTH, pattern=SESSION_ID_PATTERN)]

# the largest number the database's integer columns hold (a sequence number, an event id)
DB_INT_MAX = 2**63 - 1

# enqueue(tenant id, session pk, version): make sure one compaction job is pending (worker/enqueue.py)
Enqueue = Callable[[int, int, int], object]


class Activity(StrEnum):
    busy = "busy"
    idle = "idle"


# every message is stored and hashed as orjson writes it: integers from -2**63 to 2**64 - 1
_JSON_INTS = range(-(2**63), 2**64)


def _ints_in_range(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages, if every integer in them can be stored; else a ValueError naming the first
    message that holds one that cannot (its keys are the client's: not echoed)."""
    for i, message in enumerate(messages):
        stack: list[Any] = [message]
        while stack:
            value = stack.pop()
            if isinstance(value, int) and not isinstance(value, bool) and value not in _JSON_INTS:
                raise ValueError(
                    f"messages[{i}] holds an integer outside the 64-bit range: send it as a string"
                )
            if isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
    return messages


class AppendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: Annotated[list[dict[str, Any]], AfterValidator(_ints_in_range)] = Field(
        min_length=1, max_length=10_000
    )
    model: str | None = Field(default=None, max_length=200)
    context_window: int | None = Field(default=None, ge=1_000, le=10_000_000)
    output_reserve: int | None = Field(default=None, ge=0, le=1_000_000)
    system: str | None = None
    parent_session_id: str | None = Field(default=None, max_length=200)
    parent_tool_use_id: str | None = Field(default=None, max_length=200)
    # how long the provider keeps the session's prompt cache (300: its default; 3600: `ttl: "1h"`)
    cache_ttl_seconds: int | None = Field(default=None, ge=60, le=86_400)


class MemoryOpIn(BaseModel):
    """One operation, as the update_working_memory tool sends it."""

    model_config = ConfigDict(extra="forbid")

    op: str = Field(max_length=20, description="set, add, remove or resolve")
    section: str = Field(max_length=40)
    key: str | None = Field(default=None, min_length=1, max_length=500)
    value: str | None = Field(default=None, max_length=20_000)
    seq: int | None = Field(default=None, ge=0, le=DB_INT_MAX)
    pinned: bool | None = None


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ops: list[MemoryOpIn] = Field(min_length=1, max_length=100)
    origin: Literal["agent", "user"] = "agent"
    reason: str = Field(default="", max_length=500)
