"""The client distribution on its own: its wheel built from this repository (`uv build --package
compactd-client`), installed into a fresh venv that holds nothing else, and the README's example
agent run from there against a real compactd and FakeMessagesAPI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.conftest import Service
from tests.integration.test_client_readme import run_readme_example

pytestmark = [pytest.mark.services, pytest.mark.slow]

# what the service needs and the client must not bring along
SERVICE_ONLY = (
    "api",
    "worker",
    "fastapi",
    "celery",
    "sqlmodel",
    "redis",
    "matplotlib",
    "tiktoken",
    "quicktok",
)


def uv() -> str:
    """The uv the Makefile uses: on PATH, else the one `make` installed in .tools."""
    return shutil.which("uv") or str(REPO / ".tools" / "bin" / "uv")


def run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=180, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def fresh_venv_with_client(tmp: Path) -> Path:
    """Build the client's wheel and install it (extra `anthropic`) into a new venv; its python.

    Its dependencies are the versions uv.lock pins (exported as a pylock.toml, whose wheel URLs
    uv's cache already holds after `make sync`), so the install is offline: the test downloads
    nothing."""
    run(
        uv(),
        "build",
        "--package",
        "compactd-client",
        "--wheel",
        "--offline",
        "--out-dir",
        tmp / "dist",
        cwd=REPO,
    )
    (wheel,) = (tmp / "dist").glob("compactd_client-*-py3-none-any.whl")
    pins = tmp / "pylock.toml"
    run(uv(), "export", "--frozen", "--package", "compactd-client", "--extra", "anthropic", "--no-emit-workspace",
        "--format", "pylock.toml", "-o", pins, cwd=REPO)  # fmt: skip
    venv = tmp / "venv"
    # from the interpreter under the test's venv: the new venv inherits none of its packages
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(uv(), "pip", "install", "--offline", "--python", python, "-r", pins, cwd=tmp)
    run(uv(), "pip", "install", "--offline", "--no-deps", "--python", python, wheel, cwd=tmp)
    # the wheel's own requirements are met by what the lock pinned
    run(uv(), "pip", "check", "--python", python, cwd=tmp)
    return python


def test_the_client_wheel_installs_alone_and_runs_the_readme_example(
    service: Service, tmp_path: Path
) -> None:
    """The built wheel installs into an empty venv without the service's packages, and the README's example agent runs from it."""
    python = fresh_venv_with_client(tmp_path)
    probe = "import importlib.util, sys; print(*[m for m in sys.argv[1:] if importlib.util.find_spec(m)])"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMPACTD_", "ANTHROPIC_", "PYTHON", "VIRTUAL_ENV"))
    }
    work = tmp_path / "work"
    work.mkdir()
    found = run(
        python, "-c", probe, "compactd_client", "httpx", "anthropic", *SERVICE_ONLY, cwd=work, env=env
    )
    assert found.stdout.split() == ["compactd_client", "httpx", "anthropic"]
    run_readme_example(service, tmp_path, python, env)
