"""Shared test plumbing: where the shared data lives, skip-or-fail for missing prerequisites, and the
block at the end of a run that says what was skipped and why."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """../shared/data beside the checkout, or COMPACTD_DATA_DIR."""
    env = os.environ.get("COMPACTD_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data"


DATA_HOW = (
    "the third-party transcripts and secret samples the project reads from ../shared/data (or "
    "COMPACTD_DATA_DIR); `make data` fetches the transcripts from their upstream repositories at "
    "pinned commits and checks each file's sha256 (ops/data/manifest.json); the secret samples "
    "(extracted from upstream rule tests) come only with the project's shared data, so their tests "
    "stay skipped after `make data`"
)


def data_params(values: list[Any]) -> list[Any]:
    """`values` to parametrize over, or, when the shared data holds none, one case that skips
    locally and under CI=true runs, to fail (the `shared_data` fixture the test takes, else on None):
    pytest would skip an empty parametrization even there."""
    why = f"needs the shared data: none of the files this test reads under {data_dir()}"
    return values or [
        pytest.param(None, id="no-shared-data", marks=pytest.mark.skipif(not IN_CI, reason=why))
    ]


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
    "test_codex.py",  # ~50 s
    "test_openai_proxy.py",  # ~35 s
    "test_claude_code.py",  # ~55 s
    "test_openai_agents.py",  # ~20 s
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
    require(path.is_dir(), f"needs the shared data: not found at {path} (set COMPACTD_DATA_DIR)")
    return path


def transcript_files() -> list[Path]:
    """Every transcript in the shared data (empty when it is absent)."""
    root = data_dir() / "transcripts"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".traj"))


# what a skip reason names -> why, and how to get it; the first match wins
SKIP_KINDS = (
    ("needs the shared data", "need the shared data, absent here: " + DATA_HOW),
    ("Claude Code", "need the pinned Claude Code CLI: `make claude-code` (npm) installs it"),
    ("Chromium", "need headless Chromium and chromedriver: apt-get install chromium chromium-driver"),
    ("not answering", "need Redis / PostgreSQL on loopback: `make services` starts (and installs) them"),
    ("not installed", "need a tool that is not installed (named in the reason)"),
)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One block at the end of a run: how many tests skipped, grouped by why, with what to do, and
    the files they are in; also which tests ran on generated transcripts."""
    skipped = terminalreporter.stats.get("skipped", [])
    generated = not data_dir().is_dir() and not IN_CI
    if not skipped and not generated:
        return
    groups: dict[str, Counter[str]] = {}
    reasons: dict[str, set[str]] = {}
    for report in skipped:
        longrepr = getattr(report, "longrepr", None)
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        kind = next((why for key, why in SKIP_KINDS if key in reason), reason)
        groups.setdefault(kind, Counter())[report.nodeid.split("::")[0]] += 1
        reasons.setdefault(kind, set()).add(reason)
    write = terminalreporter.write_line
    terminalreporter.section("what was skipped, and why", sep="=")
    for kind, files in sorted(groups.items(), key=lambda g: -sum(g[1].values())):
        count = sum(files.values())
        # "2 tests need …", "1 test needs …"
        said = kind if count != 1 or not kind.startswith("need ") else "needs " + kind.removeprefix("need ")
        write(f"{count} test{'s' if count != 1 else ''} {said}")
        if kind in dict(SKIP_KINDS).values() and len(reasons[kind]) <= 4:
            for reason in sorted(reasons[kind]):
                write(f"    reason: {reason}")
        write("    in: " + ", ".join(f"{Path(f).name} ({n})" for f, n in sorted(files.items())))
    if generated:
        write(
            f"The shared data is absent ({data_dir()}): the tests that need a long Claude Code session "
            "(the inspector, stats, worker, faults, `compactd up`, import) ran on generated ones "
            "(tests/synthetic.py). Under CI=true the shared data is required and every test that "
            "needs it fails without it."
        )
