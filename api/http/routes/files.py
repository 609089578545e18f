"""Virtual files: list them, read them back by line range, byte range or RE2 pattern; the tools that do it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query

from api.http.deps import ResourcesDep, TenantDep
from api.http.errors import NotFound
from api.http.routes.paths import SessionId
from worker.compaction.reading import grep, read_bytes, read_lines
from worker.compaction.tools import tool_definitions
from worker.memory.tool import memory_tool_definitions
from worker.store import files, sessions
from worker.store.db import read_tx

router = APIRouter(tags=["files"])


@router.get("/v1/tools")
async def get_tools(_tenant: TenantDep) -> list[dict[str, Any]]:
    """Tool definitions an agent passes to messages.create: read_file and grep recover clipped content;
    update_working_memory's input is forwarded as is as the PATCH /v1/sessions/{sid}/memory body."""
    return tool_definitions() + memory_tool_definitions()


@router.get("/v1/sessions/{sid}/files")
def list_files(sid: SessionId, res: ResourcesDep, tenant: TenantDep) -> dict[str, Any]:
    """The session's virtual files and what has been read of each."""
    row = sessions.get_session(res.engine, tenant, sid)
    if row is None:
        raise NotFound("no such session")
    with read_tx(res.engine) as conn:
        infos = files.file_infos(conn, row.id)
    return {
        "session_id": sid,
        "files": [
            {"ref": f.ref, "kind": f.kind, "lines": f.lines, "read_ranges": list(f.read_ranges)}
            for f in infos
        ],
    }


@router.get("/v1/sessions/{sid}/files/{ref}")
def read_file(
    sid: SessionId,
    res: ResourcesDep,
    tenant: TenantDep,
    ref: str = Path(min_length=1, max_length=200),
    start_line: int | None = Query(default=None, ge=1),
    end_line: int | None = Query(default=None, ge=1),
    start_byte: int | None = Query(default=None, ge=0),
    end_byte: int | None = Query(default=None, ge=0),
    pattern: str | None = Query(default=None, min_length=1, max_length=1000),
    context_lines: int = Query(default=0, ge=0, le=20),
    max_matches: int = Query(default=50, ge=1, le=500),
    log_read: bool = Query(
        default=True,
        description="false: a person's look (the inspector), not logged: the agent's reads stay the agent's",
    ),
) -> dict[str, Any]:
    """An excerpt of a file: lines (default), bytes, or lines matching an RE2 pattern. Each read is
    logged (the agent's reads, listed in its memory note) unless `log_read=false`."""
    row = sessions.get_session(res.engine, tenant, sid)
    found = None if row is None else files.read_file(res.engine, row.id, ref)
    if row is None or found is None:
        raise NotFound("no such file in this session")
    file_id, kind, text = found
    if pattern is not None:
        excerpt = grep(text, pattern, max_matches=max_matches, context_lines=context_lines)
        logged = "grep"
    elif start_byte is not None or end_byte is not None:
        excerpt = read_bytes(text, start_byte, end_byte)
        logged = excerpt.description
    else:
        excerpt = read_lines(text, start_line, end_line)
        logged = excerpt.description.rsplit(" of ", 1)[0]
    if log_read:
        files.log_read(res.engine, file_id, row.id, logged)
    return {
        "ref": ref,
        "kind": kind,
        "text": excerpt.text,
        "description": excerpt.description,
        "total_lines": excerpt.total_lines,
        "truncated": excerpt.truncated,
    }
