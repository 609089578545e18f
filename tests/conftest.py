"""Shared test plumbing: where the shared data lives, and skip-or-fail for missing prerequisites."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """../shared/data beside the checkout, or COMPACTD_DATA_DIR."""
    env = os.environ.get("COMPACTD_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data"


def require(ok: bool, why: str) -> None:
    """Skip when a prerequisite is missing locally; fail under CI=true, where everything must run."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"required under CI=true: {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = data_dir()
    require(path.is_dir(), f"shared data not found at {path} (set COMPACTD_DATA_DIR)")
    return path


def transcript_files() -> list[Path]:
    """Every transcript in the shared data (empty when it is absent)."""
    root = data_dir() / "transcripts"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))
