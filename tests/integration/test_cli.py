"""The `compactd tenant` commands print keys that authenticate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from worker.store.db import make_engine
from worker.store.tenants import tenant_for_key


def compactd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    env.update({"COMPACTD_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}", "PYTHONPATH": str(REPO)})
    return subprocess.run(
        [sys.executable, "-m", "api.cli.command", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_tenant_create_and_reset_key_print_working_keys(tmp_path: Path) -> None:
    """`tenant create` prints a key for the new tenant; `tenant reset-key` replaces it; unknown tenants fail."""
    created = compactd(tmp_path, "tenant", "create", "acme")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    tid = tenant_for_key(engine, key)
    assert tid is not None
    reset = compactd(tmp_path, "tenant", "reset-key", "acme")
    new = reset.stdout.strip()
    assert tenant_for_key(engine, new) == tid and tenant_for_key(engine, key) is None
    assert compactd(tmp_path, "tenant", "reset-key", "nobody").returncode == 1
    engine.dispose()


def test_help_lists_every_process_subcommand(tmp_path: Path) -> None:
    """`compactd --help` names up, api, worker, beat, flower, tenant and the offline tools."""
    out = compactd(tmp_path, "--help").stdout
    for name in ("up", "api", "worker", "beat", "flower", "tenant", "compact", "replay"):
        assert name in out
