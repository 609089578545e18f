"""`compactd compact` leaves exactly its own run's virtual files in the output folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO

STALE = "f_0123456789abcdef"


def transcript(path: Path, runs: int) -> Path:
    """An agent session whose `runs` long build logs are offloaded to virtual files."""
    log = "\n".join(f"line {i}: compiling module {i * 7919 % 1000}" for i in range(20_000))
    messages: list[dict] = [{"role": "user", "content": "run the build"}]
    for k in range(runs):
        call = {"type": "tool_use", "id": f"t{k}", "name": "bash", "input": {"command": f"make {k}"}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"{log}\nrun {k}"}
        messages.append({"role": "user", "content": [result]})
    messages.append({"role": "assistant", "content": "done"})
    path.write_bytes(orjson.dumps({"system": "You are a coding agent.", "messages": messages}))
    return path


def compact(cwd: Path, *args: str, window: str = "32000") -> subprocess.CompletedProcess[str]:
    """`compactd compact` run in cwd with args at a context window, as a user runs it; it must succeed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")} | {"PYTHONPATH": str(REPO)}
    env["XDG_CONFIG_HOME"] = str(cwd / ".config")  # the offline redaction key, not the user's
    done = subprocess.run(
        [sys.executable, "-m", "api.cli.command", "compact", *args, "--context-window", window],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("out", [None, "files"])
def test_each_run_replaces_the_files_an_earlier_run_wrote(tmp_path: Path, out: str | None) -> None:
    """A second run removes the first run's (and any older) virtual files, keeps other files, and says so."""
    folder = tmp_path / (out or "compactd-files/session")
    extra = ["--out", out] if out else []
    compact(tmp_path, str(transcript(tmp_path / "session.json", runs=3)), *extra)
    (folder / STALE).write_text("from an older run")
    (folder / "notes.txt").write_text("mine")
    second = compact(tmp_path, str(transcript(tmp_path / "session.json", runs=1)), *extra)
    written = sorted(p.name for p in folder.iterdir() if p.name != "notes.txt")
    assert len(written) == 1 and written[0].startswith("f_")
    assert (folder / "notes.txt").read_text() == "mine"
    assert f"1 file in {folder.relative_to(tmp_path)} (replacing 4 from an earlier run)" in second.stderr


def test_a_run_without_files_still_clears_the_earlier_ones(tmp_path: Path) -> None:
    """When nothing is offloaded, the folder keeps no earlier run's files (and --json says how many went)."""
    folder = tmp_path / "compactd-files/session"
    compact(tmp_path, str(transcript(tmp_path / "session.json", runs=2)))
    done = compact(tmp_path, str(transcript(tmp_path / "session.json", runs=0)), "--json")
    stats = orjson.loads(done.stdout)["stats"]
    assert (stats["files_written"], stats["files_dir"], stats["files_replaced"]) == (0, None, 2)
    assert list(folder.iterdir()) == []
