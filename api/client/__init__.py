"""The Python client of compactd: `from api.client import Compactd, AsyncCompactd`.

Light on purpose: httpx and the standard library only (no FastAPI, SQL or Celery), so an agent
process can import it without the service. The loop helper for the `anthropic` SDK is in
`api.client.agent`; the LangGraph / LangChain integration in `api.client.langgraph` (extra `langgraph`).
"""

from api.client.client import AsyncCompactd, Compactd, new_idempotency_key
from api.client.errors import CompactdError, ProblemError, UnreachableError
from api.client.retry import RetryPolicy
from api.client.types import (
    AppendResult,
    CompactAccepted,
    FileExcerpt,
    Memory,
    MemoryItem,
    MessagesKwargs,
    ServedPrompt,
)

__all__ = [
    "AppendResult",
    "AsyncCompactd",
    "CompactAccepted",
    "Compactd",
    "CompactdError",
    "FileExcerpt",
    "Memory",
    "MemoryItem",
    "MessagesKwargs",
    "ProblemError",
    "RetryPolicy",
    "ServedPrompt",
    "UnreachableError",
    "new_idempotency_key",
]
