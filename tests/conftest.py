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


# The files that take longest, longest first (seconds of test time in an idle `make test`, docs/
# testing.md). `make test` runs several pytest processes, a file each at a time in collection order
# (--dist loadfile --no-loadscope-reorder): these start first, so the short files fill the gaps at
# the end instead of one process running a long file alone while the others are idle.
LONGEST_FIRST = (
    "test_schemathesis.py",  # ~200 s
    "test_faults_worker.py",  # ~190 s
    "test_planted_corpus_strict.py",  # ~150 s
    "test_planted_corpus.py",  # ~130 s
    "test_split_corpus.py",  # ~105 s
    "test_enqueue.py",  # ~100 s
    "test_keys.py",  # ~60 s
    "test_worker.py",  # ~50 s
    "test_scale_out.py",  # ~50 s
    "test_claude_code.py",  # ~30 s
    "test_faults_api.py",
    "test_proxy.py",
    "test_prune.py",
    "test_concurrent_appends.py",
    "test_redact_corpora.py",
    "test_ui.py",
    "test_metrics.py",
    "test_offline_cli.py",
    "test_import_export.py",
    "test_compose.py",
    "test_up.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files in LONGEST_FIRST first, in that order; every other file after them, as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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


def public_configs() -> Path:
    """The public-config corpus (issue 42: fetched upstream config files with planted credentials),
    `<data>/public_configs`. Fetched files may live only in the steering repository's shared/, not
    in this repository, and the corpus is not staged there yet: its tests skip while it is absent,
    under CI=true too (a `require` once it is staged)."""
    root = data_dir() / "public_configs"
    if not root.is_dir():
        pytest.skip(f"the public-config corpus is not at {root} (issue 42 report: where to stage it)")
    return root
