"""Offline `compactd compact` is repeatable: its placeholders are keyed by a key made once per user."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson

COMPACTD = str(Path(sys.executable).parent / "compactd")
SECRETS = [
    {"role": "user", "content": "cat .env please"},
    {
        "role": "assistant",
        "content": "DB_PASSWORD=admin\nSTRIPE_KEY=sk_live_51HxQ2Lk9vB7nR3tY8wZ0aC4dE6fG8hJ\n"
        "DATABASE_URL=postgres://app:p#ss@w0rd!@db.internal:5432/app",
    },
]


def _compact(
    session: Path, cwd: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [COMPACTD, "compact", str(session), *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )


def test_two_offline_runs_give_the_same_bytes(tmp_path: Path) -> None:
    """Two runs on a transcript with secrets print the same bytes; the key file made is mode 0600."""
    session = tmp_path / "s.json"
    session.write_bytes(orjson.dumps(SECRETS))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    first, second = _compact(session, tmp_path, env), _compact(session, tmp_path, env)
    assert first.returncode == 0 == second.returncode, first.stderr
    assert first.stdout == second.stdout
    out = first.stdout.decode()
    assert out.count("[REDACTED:") >= 3 and "admin" not in out and "p#ss" not in out
    key = tmp_path / "config" / "compactd" / "redaction.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_another_key_file_gives_other_placeholders(tmp_path: Path) -> None:
    """`--redaction-key-file` names the key: another key, other placeholders; a shared one is refused."""
    session = tmp_path / "s.json"
    session.write_bytes(orjson.dumps(SECRETS))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    mine = _compact(session, tmp_path, env)
    other = _compact(session, tmp_path, env, "--redaction-key-file", str(tmp_path / "other.key"))
    assert mine.returncode == 0 == other.returncode, other.stderr
    assert mine.stdout != other.stdout
    shared = tmp_path / "shared.key"
    shared.write_text("0123456789abcdef0123456789abcdef\n")
    shared.chmod(0o644)
    refused = _compact(session, tmp_path, env, "--redaction-key-file", str(shared))
    assert refused.returncode != 0 and b"readable by others" in refused.stderr
    assert b"Traceback" not in refused.stderr
