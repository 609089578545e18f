"""The `compactd` command line: every option explained, --host/--port over the environment."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from api.cli.command import build_parser
from api.cli.processes import settings_of

ROOT = Path(__file__).resolve().parents[2]


def subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every (nested) subcommand parser under it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(subparsers(child))
    return found


def test_every_option_and_argument_has_a_help_text() -> None:
    """`compactd <cmd> --help` explains every option and positional argument of every subcommand."""
    missing = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for p in subparsers(build_parser())
        for a in p._actions
        if not isinstance(a, argparse._SubParsersAction) and not a.help
    ]
    assert missing == []


@pytest.mark.parametrize("command", ["up", "api"])
def test_host_and_port_options_override_the_environment(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--host/--port win over COMPACTD_HOST/COMPACTD_PORT, which stay the defaults without them."""
    monkeypatch.setenv("COMPACTD_HOST", "127.0.0.2")
    monkeypatch.setenv("COMPACTD_PORT", "9001")
    given = settings_of(build_parser().parse_args([command, "--host", "0.0.0.0", "--port", "9100"]))
    default = settings_of(build_parser().parse_args([command]))
    assert (given.host, given.port) == ("0.0.0.0", 9100)
    assert (default.host, default.port) == ("127.0.0.2", 9001)


@pytest.mark.parametrize("port", ["0", "65536", "http", "-1"])
def test_a_port_out_of_range_is_a_usage_error(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A --port that is not 1-65535 is refused by the parser, naming the value."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["api", "--port", port])
    assert f"'{port}' is not a port" in capsys.readouterr().err


def test_prune_without_a_redis_says_what_to_do(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No COMPACTD_REDIS_URL and no running `compactd up`: one line naming the setting, no traceback."""
    from api.cli.command import main

    monkeypatch.delenv("COMPACTD_REDIS_URL", raising=False)
    monkeypatch.setenv("COMPACTD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("COMPACTD_DATABASE_URL", f"sqlite:///{tmp_path / 'c.db'}")
    with pytest.raises(SystemExit) as exc:
        main(["prune", "--dry-run"])
    assert "COMPACTD_REDIS_URL" in str(exc.value) and "compactd up" in str(exc.value)


def test_ctrl_c_before_a_command_handles_it_stops_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C that reaches a command before it has its own handling (`compactd up`'s beat still
    importing when the group is stopped) ends it with the shell's code for it, 130, and no traceback."""
    from api.cli.command import main
    from worker.redaction import kingfisher

    def interrupted(*_: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(kingfisher, "prewarm", interrupted)
    assert main(["prewarm"]) == 130
    assert capsys.readouterr().err == ""


def test_output_cut_short_by_its_reader_ends_quietly() -> None:
    """`compactd … | head`: the reader leaves after a line; the command ends with the shell's code
    for SIGPIPE (141: an export cut short is no success) and no BrokenPipeError traceback
    (neither from the command nor from Python's flush at exit)."""
    code = (
        "import sys\n"
        "from api.cli.command import main\n"
        "from worker.redaction import kingfisher\n"
        "kingfisher.prewarm = lambda *a: [print('x' * 80) for _ in range(200_000)] and ''\n"
        "sys.exit(main(['prewarm']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"x" * 80 + b"\n"
    proc.stdout.close()  # as head does after its line
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err
