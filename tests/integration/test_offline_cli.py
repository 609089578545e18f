"""`compactd compact` and `compactd replay` as a user runs them: a subprocess on a real transcript."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from worker.compaction.validate import request_problems

COMPACTD = str(Path(sys.executable).parent / "compactd")
pytestmark = [pytest.mark.data]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / ".config")}  # the offline key, not the user's
    return subprocess.run(
        [COMPACTD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_compact_prints_a_valid_request_and_writes_the_files(shared_data: Path, tmp_path: Path) -> None:
    """At a 32k window a long session comes back valid, under budget, with stats and its virtual files on disk."""
    session = shared_data / "transcripts/claude-code/spotter/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"
    out = run(
        "compact",
        str(session),
        "--context-window",
        "32000",
        "--json",
        "--out",
        str(tmp_path / "files"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    payload = orjson.loads(out.stdout)
    stats = payload["stats"]
    assert request_problems(payload["request"]) == []
    assert stats["format"] == "claude_code" and stats["valid"]
    assert stats["request_tokens"] <= stats["budget_tokens"] < stats["tokens_before"]
    written = {p.name for p in (tmp_path / "files").iterdir()}
    assert len(written) == stats["files_written"] > 0
    assert any(name.startswith("h_") for name in written)  # the archive of the summarized span


def test_compact_redaction_profile(tmp_path: Path) -> None:
    """`--redaction strict` also takes a reference in a credential's place; standard keeps it."""
    session = tmp_path / "s.json"
    session.write_bytes(
        orjson.dumps(
            [
                {"role": "user", "content": "deploy with DB_PASSWORD=$DB_PASS and user deployer"},
                {"role": "assistant", "content": "Done: resolver 9.9.9.9 answered."},
            ]
        )
    )
    standard = run("compact", str(session), "--json", cwd=tmp_path)
    strict = run("compact", str(session), "--json", "--redaction", "strict", cwd=tmp_path)
    assert standard.returncode == strict.returncode == 0, standard.stderr + strict.stderr
    assert "$DB_PASS" in standard.stdout and "9.9.9.9" in standard.stdout
    assert "$DB_PASS" not in strict.stdout and "9.9.9.9" not in strict.stdout
    assert "[REDACTED:ip_address:" in strict.stdout


def test_replay_redaction_profile(tmp_path: Path) -> None:
    """`replay --redaction strict` replays what the strict profile stores: the reference and the IP
    address become placeholders, which the served prompt counts (the report holds no text)."""
    session = tmp_path / "s.json"
    turns = [
        {"role": "user", "content": "deploy with DB_PASSWORD=$DB_PASS\nresolver 9.9.9.9"},
        {"role": "assistant", "content": "Deployed."},
    ]
    session.write_bytes(orjson.dumps(turns))
    reports = {}
    for profile in ("standard", "strict"):
        out = run("replay", str(session), "--pace", "0.1", "--json", "--redaction", profile, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        reports[profile] = orjson.loads(out.stdout)["fetches"]
    assert reports["strict"][-1]["request_tokens"] > reports["standard"][-1]["request_tokens"]
    refused = run(
        "replay",
        str(session),
        "--http",
        "http://127.0.0.1:9",
        "--key",
        "k",
        "--redaction",
        "strict",
        cwd=tmp_path,
    )
    assert refused.returncode != 0 and "offline only" in refused.stderr


def test_replay_reports_every_fetch_and_plots(shared_data: Path, tmp_path: Path) -> None:
    """Replay reports per-fetch rows and a summary, stays under budget, and writes the PNG plot."""
    session = (
        shared_data / "transcripts/claude-code/claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    )
    plot = tmp_path / "replay.png"
    out = run(
        "replay",
        str(session),
        "--context-window",
        "16000",
        "--pace",
        "recordedx0.1",
        "--json",
        "--plot",
        str(plot),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    payload = orjson.loads(out.stdout)
    assert payload["summary"]["all_valid"] and payload["summary"]["over_budget"] == 0
    assert len(payload["fetches"]) == payload["summary"]["fetches"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    """A file in no known format exits non-zero with a one-line reason, not a traceback."""
    bad = tmp_path / "notes.txt"
    bad.write_text("just some prose, not a transcript")
    out = run("compact", str(bad), cwd=tmp_path)
    assert out.returncode != 0
    assert "cannot import" in out.stderr and "Traceback" not in out.stderr


BLOCK_MATPLOTLIB = """
import sys
from importlib.abc import MetaPathFinder


class NoMatplotlib(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoMatplotlib())
from api.cli.command import main

sys.exit(main(sys.argv[1:]))
"""


def test_replay_plot_without_matplotlib_says_how_to_install_it(tmp_path: Path) -> None:
    """Without the `plot` extra, `replay --plot` stops at once in one line naming the extra, no traceback."""
    transcript = tmp_path / "t.json"
    transcript.write_bytes(orjson.dumps([{"role": "user", "content": "hello"}]))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCK_MATPLOTLIB,
            "replay",
            str(transcript),
            "--plot",
            str(tmp_path / "p.png"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 1
    assert "uv sync --extra plot" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "p.png").exists()
