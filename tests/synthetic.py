"""Generated Claude Code sessions: what tests run on where the shared data's real transcripts are absent.

A fresh clone has no `../shared/data`. The tests that need a realistic coding session (long, tool
heavy, a few huge outputs, errors and fixes, file paths, a secret to redact) but not a particular
real one run on these instead, written as Claude Code session JSONL so the importer reads them as
it reads the real ones. Deterministic: the same seed gives the same bytes. Under CI=true the shared
data is required and these are never used (tests/integration/realdata.py).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

MODEL = "claude-sonnet-4-6"
FILES = (
    "src/app/server.py",
    "src/app/routes/users.py",
    "src/app/models.py",
    "src/app/db.py",
    "tests/test_users.py",
    "tests/test_server.py",
    "README.md",
    "pyproject.toml",
)
WORDS = [
    "request",
    "handler",
    "session",
    "user",
    "token",
    "cache",
    "index",
    "query",
    "row",
    "column",
    "retry",
    "timeout",
    "config",
    "parse",
    "value",
    "field",
    "schema",
    "migration",
    "commit",
    "branch",
    "build",
    "deploy",
    "worker",
    "queue",
    "event",
    "stream",
    "buffer",
]
# name -> (bytes, assistant turns): sizes spread like the shared data's (20 KB to 3 MB)
SESSIONS = {
    "small-fix": (18_000, 12),
    "feature": (70_000, 40),
    "refactor": (120_000, 60),
    "tests-red": (180_000, 80),
    "migration": (250_000, 100),
    "long-debug": (1_000_000, 160),
    "marathon": (2_300_000, 260),
}


def generated_dir(root: Path) -> Path:
    """`root/transcripts/claude-code/generated/*.jsonl`, written once (kept while their bytes match)."""
    out = root / "transcripts" / "claude-code" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    for seed, (name, (size, turns)) in enumerate(SESSIONS.items()):
        path = out / f"{name}.jsonl"
        data = claude_code_session(seed, turns, size)
        if not path.exists() or path.read_bytes() != data:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
    return out


def claude_code_session(seed: int, turns: int, size_bytes: int) -> bytes:
    """A coding session of about `size_bytes` with `turns` tool rounds, as Claude Code writes it."""
    rng = random.Random(seed)
    session = str(uuid.UUID(int=rng.getrandbits(128)))
    at = datetime(2026, 11, 1, 9, 0, tzinfo=UTC) + timedelta(days=seed)
    lines: list[dict[str, Any]] = []
    parent: list[str | None] = [None]

    def line(kind: str, message: dict[str, Any], **extra: Any) -> None:
        nonlocal at
        at += timedelta(seconds=rng.randint(2, 40))
        me = str(uuid.UUID(int=rng.getrandbits(128)))
        lines.append(
            {
                "parentUuid": parent[0],
                "isSidechain": False,
                "userType": "external",
                "cwd": "/home/USER/projects/demo",
                "sessionId": session,
                "version": "2.1.328",
                "type": kind,
                "message": message,
                "uuid": me,
                "timestamp": at.isoformat().replace("+00:00", "Z"),
                **extra,
            }
        )
        parent[0] = me

    task = f"Fix the failing tests in {rng.choice(FILES[4:6])} and keep the API unchanged."
    line("user", {"role": "user", "content": task})
    # most rounds small, a few huge (offloaded at ingest), the rest medium: spread to reach the size
    budget = size_bytes - 400 * turns
    weights = [rng.choice((1, 1, 1, 2, 3, 5)) for _ in range(turns)]
    for k in rng.sample(range(turns), max(1, turns // 25)):
        weights[k] = 40
    unit = max(200, budget // sum(weights))
    for i in range(turns):
        name, tool_input = _call(rng, i)
        tid = f"toolu_{seed:02d}{i:05d}{rng.getrandbits(40):010x}"
        msg_id = f"msg_{seed:02d}{i:05d}{rng.getrandbits(40):010x}"
        say = f"Now I'll {rng.choice(('check', 'look at', 'run', 'fix', 'read'))} {tool_input.get('file_path', 'the tests')}."
        line(
            "assistant",
            {"id": msg_id, "role": "assistant", "model": MODEL, "content": [{"type": "text", "text": say}]},
        )
        line(
            "assistant",
            {
                "id": msg_id,
                "role": "assistant",
                "model": MODEL,
                "content": [{"type": "tool_use", "id": tid, "name": name, "input": tool_input}],
            },
        )
        failed = name == "Bash" and rng.random() < 0.15
        output = _output(rng, name, tool_input, unit * weights[i], failed, i)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": output}
        if failed:
            result["is_error"] = True
        line("user", {"role": "user", "content": [result]})
        if i and i % 30 == 0:
            note = f"Also keep the changelog up to date (round {i})."
            line("user", {"role": "user", "content": note})
    done = "All tests pass now; the fix is in src/app/routes/users.py and the API is unchanged."
    line(
        "assistant",
        {
            "id": f"msg_{seed:02d}end",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": done}],
        },
    )
    return b"".join(orjson.dumps(v) + b"\n" for v in lines)


def _call(rng: random.Random, i: int) -> tuple[str, dict[str, Any]]:
    path = rng.choice(FILES)
    kind = rng.choice(("Bash", "Bash", "Read", "Read", "Edit", "Grep"))
    if kind == "Bash":
        return kind, {
            "command": rng.choice(
                ("pytest -q", "pytest -x tests", "git diff --stat", "ls -R src", "make lint")
            ),
            "description": f"step {i}",
        }
    if kind == "Read":
        return kind, {"file_path": f"/home/USER/projects/demo/{path}"}
    if kind == "Grep":
        return kind, {"pattern": rng.choice(WORDS), "path": "src"}
    old = " ".join(rng.choices(WORDS, k=6))
    return kind, {
        "file_path": f"/home/USER/projects/demo/{path}",
        "old_string": old,
        "new_string": old.upper(),
    }


def _output(
    rng: random.Random, name: str, tool_input: dict[str, Any], size: int, failed: bool, i: int
) -> str:
    rows: list[str] = []
    n = 0
    while sum(len(r) + 1 for r in rows) < size:
        n += 1
        words = " ".join(rng.choices(WORDS, k=rng.randint(4, 12)))
        if name == "Read":
            rows.append(f"{n:>6}\u2192    {words} = {rng.randint(0, 9999)}")
        else:
            rows.append(f"{tool_input.get('pattern', 'src')}/{rng.choice(FILES)}:{n}: {words}")
    if failed:
        rows.append(f"FAILED tests/test_users.py::test_case_{i} - AssertionError: expected 200, got 500")
        rows.append("1 failed, 41 passed")
    if i == 3:
        # a credential in a tool output, as real sessions have them: compactd must redact it
        rows.append("export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLZ")
    return "\n".join(rows)
