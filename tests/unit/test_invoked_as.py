"""`compactd up`'s hint names the command as the user can type it again (after `make up` it is
`.venv/bin/compactd`: not on the PATH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.cli.up import invoked_as


def test_the_hint_names_the_command_as_it_can_be_typed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / ".venv" / "bin" / "compactd"
    # as under `make up`: uv run puts the venv first on the command's own PATH
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin")
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert invoked_as(str(exe), str(tmp_path)) == ".venv/bin/compactd"
    assert invoked_as(str(exe), "/somewhere/else") == "compactd"
    assert invoked_as("compactd", str(tmp_path)) == "compactd"
    assert invoked_as(str(tmp_path / "runpy.py"), str(tmp_path)) == "compactd"
