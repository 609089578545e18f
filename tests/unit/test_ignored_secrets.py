"""`.env` (where deployments keep their passwords) never reaches git or a Docker build context."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO


def test_git_ignores_dot_env() -> None:
    """`git check-ignore` says `.env` is ignored, and `.env.example` is not."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "check-ignore", ".env", ".env.example"], cwd=REPO, capture_output=True, text=True
    )
    assert ignored.stdout.split() == [".env"]


def test_docker_build_context_leaves_dot_env_out() -> None:
    """The .dockerignore lists `.env` (and any `.env.*` but the example)."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert ".env" in lines and ".env.*" in lines and "!.env.example" in lines
