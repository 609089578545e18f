"""`compactd import` / `compactd export` as processes, against a real store (SQLite file, Redis)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.http.app import create_app
from tests.conftest import require
from tests.integration.conftest import flush_prefix, make_settings, run_cli
from tests.integration.realdata import claude_code_files
from worker.compaction.formats import load_transcript
from worker.compaction.profiles import known_profile
from worker.compaction.validate import request_problems
from worker.ingest import ingest
from worker.redaction import Redactor
from worker.resources import Resources
from worker.settings import Settings
from worker.store.sessions import get_session
from worker.store.tenants import T, create_tenant

pytestmark = [pytest.mark.services]

SECRET = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.fixture
def settings(tmp_path: Path, redis_url: str) -> Iterator[Settings]:
    s = make_settings(tmp_path, f"sqlite:///{tmp_path / 'compactd.db'}", redis_url)
    res = Resources.build(s)
    create_tenant(res.engine, "acme")
    res.close()
    yield s
    flush_prefix(redis_url, s.redis_prefix)


def compactd(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(settings, *args, timeout=120)


def stored(settings: Settings, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the service stores them: normalized, redacted, offloaded (its redaction key)."""
    redactor = Redactor((settings.redaction_key or "").encode())
    turns = ingest(messages, first_seq=1, redactor=redactor, policy=settings.policy()).turns
    return json.loads(orjson.dumps([t.as_message() for t in turns]))


def version(settings: Settings, sid: str) -> int:
    res = Resources.build(settings, run_migrations=False)
    try:
        with res.engine.connect() as conn:
            tenant = conn.execute(T.select().where(T.c.name == "acme")).one().id
        row = get_session(res.engine, tenant, sid)
        return 0 if row is None else row.version
    finally:
        res.close()


def test_an_import_is_counted_on_metrics(settings: Settings, tmp_path: Path) -> None:
    """Each imported chunk counts on /metrics as an append would (its turns, its redactions by
    kind); a re-run that adds nothing counts nothing."""
    path = tmp_path / "t.json"
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}"} for i in range(5)]
    messages[2]["content"] += f" export GITHUB_TOKEN={SECRET}"
    path.write_bytes(orjson.dumps(messages))

    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with TestClient(create_app(settings, enqueue=lambda *_: None)) as client:
            text = client.get("/metrics").text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    for _ in range(2):  # the second run replays every chunk
        run = compactd(settings, "import", str(path), "--session", "m", "--tenant", "acme", "--chunk", "2")
        assert run.returncode == 0, run.stderr
        samples = counted()
        assert samples[("compactd_appends_total", ())] == 3  # chunks of 2, 2 and 1
        assert samples[("compactd_turns_appended_total", ())] == 5
        assert samples[("compactd_redactions_total", (("kind", "github_token"),))] == 1


@pytest.mark.data
def test_a_real_transcript_imports_once_and_exports_back(settings: Settings, tmp_path: Path) -> None:
    """A real Claude Code session imports in chunks with a progress bar from the first moment, under the
    model it recorded; a re-run adds nothing; the archive export is exactly the stored (redacted)
    messages, its text form one block per turn, and the prompt export is a valid Messages request."""
    files = [p for p in claude_code_files() if 60_000 < p.stat().st_size < 400_000]
    require(bool(files), "needs the shared data: a Claude Code transcript of 60-400 KB")
    path = files[0]
    loaded = load_transcript(path)
    messages = loaded.messages
    model = loaded.meta["model"]
    profile = known_profile(model)
    require(profile is not None, f"the transcript's model {model!r} has no known window")
    assert profile is not None
    first = compactd(settings, "import", str(path), "--session", "real", "--tenant", "acme", "--progress")
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"compactd import: reading {path}")  # something shows at once
    assert f"model {model} (recorded)" in first.stderr
    assert f"{len(messages)}/{len(messages)}" in first.stderr and "[" + "#" * 30 + "]" in first.stderr
    assert f"a {profile.context_window:,}-token window" in first.stderr
    assert version(settings, "real") == len(messages)

    again = compactd(settings, "import", str(path), "--session", "real", "--tenant", "acme")
    assert again.returncode == 0, again.stderr
    assert "0 new turns (already imported)" in again.stderr and "#" not in again.stderr
    assert version(settings, "real") == len(messages)

    out = tmp_path / "archive.json"
    archive = compactd(settings, "export", "real", "--tenant", "acme", "-o", str(out))
    assert archive.returncode == 0, archive.stderr
    exported = orjson.loads(out.read_bytes())
    assert exported["messages"] == stored(settings, messages)

    text = compactd(settings, "export", "real", "--tenant", "acme", "--format", "text")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("\n=== #") == len(messages) - 1 and text.stdout.count("=== #1 user ===") == 1
    assert "→ " in text.stdout and "← result" in text.stdout  # tool calls and results spelled out

    prompt = compactd(settings, "export", "real", "--tenant", "acme", "--what", "prompt")
    assert prompt.returncode == 0, prompt.stderr
    request = orjson.loads(prompt.stdout)
    assert set(request) == {"system", "messages"}
    assert request_problems(request, allow_pending_tool_use=True) == []


def test_an_exported_archive_is_redacted_and_imports_again(settings: Settings, tmp_path: Path) -> None:
    """A secret in an imported file never leaves in the export, and the archive re-imports into a new session unchanged."""
    source = tmp_path / "session.json"
    source.write_text(
        json.dumps(
            {
                "system": "You are a coding agent.",
                "messages": [
                    {"role": "user", "content": f"deploy with token {SECRET}"},
                    {"role": "assistant", "content": "Deploying."},
                    {"role": "user", "content": "thanks"},
                ],
            }
        )
    )
    assert compactd(settings, "import", str(source), "--session", "a", "--tenant", "acme").returncode == 0
    archive = compactd(settings, "export", "a", "--tenant", "acme")
    assert archive.returncode == 0, archive.stderr
    assert SECRET not in archive.stdout and "[REDACTED:github_token:" in archive.stdout
    copy = tmp_path / "archive.json"
    copy.write_text(archive.stdout)
    assert compactd(settings, "import", str(copy), "--session", "b", "--tenant", "acme").returncode == 0
    again = compactd(settings, "export", "b", "--tenant", "acme")
    assert orjson.loads(again.stdout) == orjson.loads(archive.stdout)


@pytest.mark.parametrize(
    "args, says",
    [
        (["import", "{bad}", "--session", "s", "--tenant", "acme"], "cannot import"),
        (["import", "{missing}", "--session", "s", "--tenant", "acme"], "cannot import"),
        (["import", "{good}", "--session", "s", "--tenant", "nobody"], "no tenant named 'nobody'"),
        (["export", "nope", "--tenant", "acme"], "no session 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_a_failure(
    settings: Settings, tmp_path: Path, args: list[str], says: str
) -> None:
    """A file that is not a transcript, a missing file, an unknown tenant or session: one line on stderr, exit code 1, no traceback."""
    (tmp_path / "bad.jsonl").write_bytes(b"\x00\x01 not a transcript {")
    (tmp_path / "good.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    paths = {
        "bad": tmp_path / "bad.jsonl",
        "missing": tmp_path / "missing.json",
        "good": tmp_path / "good.json",
    }
    done = compactd(settings, *(a.format(**paths) for a in args))
    assert done.returncode == 1
    assert says in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
