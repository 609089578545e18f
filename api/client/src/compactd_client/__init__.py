"""The Python client of compactd: `from compactd_client import Compactd, AsyncCompactd`.

Light on purpose: httpx and the standard library only (no FastAPI, SQL or Celery), so an agent
process can import it without the service. The loop helper for the `anthropic` SDK is in
`compactd_client.agent`; the LangGraph / LangChain integration in `compactd_client.langgraph` (extra `langgraph`).
"""

from compactd_client.client import AsyncCompactd, Compactd, new_idempotency_key
from compactd_client.errors import CompactdError, ProblemError, UnreachableError
from compactd_client.retry import RetryPolicy
from compactd_client.types import (
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
