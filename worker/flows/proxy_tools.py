"""compactd's own tools answered inside a proxied call: read_file and grep read a virtual file,
update_working_memory patches memory. The client never sees these calls (worker/proxy/sse.py)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from worker.compaction.reading import BadRead, grep, read_lines
from worker.contracts import MemoryPatch
from worker.flows.memory import redacted_change, republish
from worker.memory.model import MemoryOpError
from worker.resources import Resources
from worker.store import files, memory, sessions
from worker.store.memory import MemoryOverCap


def answer_calls(
    res: Resources, tenant_id: int, sid: str, calls: list[dict[str, Any]], enqueue: Any
) -> list[dict[str, Any]]:
    """One tool_result block per call, in order (errors told to the model, never raised)."""
    return [_result(res, tenant_id, sid, call, enqueue) for call in calls]


def _result(res: Resources, tenant_id: int, sid: str, call: dict[str, Any], enqueue: Any) -> dict[str, Any]:
    given = call.get("input")
    args: dict[str, Any] = given if isinstance(given, dict) else {}
    try:
        text = answer(res, tenant_id, sid, str(call.get("name")), args, enqueue)
        error = False
    except (BadRead, MemoryOpError, MemoryOverCap, LookupError, ValidationError, ValueError) as exc:
        text, error = f"{call.get('name')} failed: {_reason(exc)}", True
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.get("id"), "content": text}
    if error:
        block["is_error"] = True
    return block


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        # field paths and rules only: never the values the model sent
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
    return str(exc)[:300]


def answer(res: Resources, tenant_id: int, sid: str, name: str, args: dict[str, Any], enqueue: Any) -> str:
    """The tool's answer as text for the model; raises what _result turns into an error result."""
    row = sessions.get_session(res.engine, tenant_id, sid)
    if row is None:
        raise LookupError("no such session")
    if name == "update_working_memory":
        patch = MemoryPatch.model_validate({"ops": args.get("ops") or []})
        changes = [redacted_change(res.redactor, op) for op in patch.ops]
        version, events = memory.change(
            res.engine, row.id, changes, origin="agent", hard_cap_tokens=res.settings.memory_hard_cap_tokens
        )
        if events:
            republish(res, tenant_id, sid, row, enqueue)
        return f"working memory updated (version {version})"
    ref = str(args.get("ref", ""))
    found = files.read_file(res.engine, row.id, ref)
    if found is None:
        raise LookupError(f"no virtual file {ref[:40]!r} in this session")
    file_id, _, text = found
    if name == "grep":
        excerpt = grep(text, str(args.get("pattern", "")), max_matches=int(args.get("max_matches") or 50))
        logged = "grep"
    else:
        excerpt = read_lines(text, _int(args.get("start_line")), _int(args.get("end_line")))
        logged = excerpt.description.rsplit(" of ", 1)[0]
    files.log_read(res.engine, file_id, row.id, logged)
    more = " (truncated: read a narrower range)" if excerpt.truncated else ""
    return f"[{ref}: {excerpt.description}{more}]\n{excerpt.text}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
