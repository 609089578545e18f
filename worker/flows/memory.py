"""A client's or an agent's change to working memory: redacted like turns, applied, republished.

Shared by the memory routes (api/http/routes/memory.py) and the proxy's update_working_memory tool
(worker/flows/proxy_tools.py).
"""

from __future__ import annotations

from typing import Any, cast

from worker.memory.model import Change, Op
from worker.redaction import Redactor
from worker.resources import Resources


def redacted_item(redactor: Redactor, key: str, value: str) -> tuple[str, str]:
    """(key, value) redacted like a tool argument: both scanned, the value also judged by its key."""
    ((red_key, red_value),) = redactor.redact_value({key: value}).items()
    return red_key, red_value


def redacted_change(redactor: Redactor, op: Any) -> Change:
    """A MemoryOpIn (worker/contracts.py) as a Change, its key and value redacted."""
    key, value = op.key, op.value
    if value is not None:
        key, value = redacted_item(redactor, key or op.section, value)
        key = key if op.key is not None else None
    elif key is not None:
        key = redactor.redact_text(key)
    # an unknown op is refused by the model, naming ops[i].op
    return Change(cast(Op, op.op), op.section, value, key=key, seq=op.seq, pinned=op.pinned)


def republish(res: Resources, tenant: int, sid: str, row: object, enqueue: object) -> None:
    """Memory changed: the served prompt stays as it is (its pinned block; the session's next user
    turn carries a note of the change: worker/store/sessions.py, noted), and a compaction is sent
    to catch the snapshot up."""
    enqueue(tenant, row.id, row.version)  # type: ignore[attr-defined,operator]
