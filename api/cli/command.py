"""The `compactd` command: up (everything on one machine), api, worker, beat, prune, flower, tenant, and offline tools.

Each group of subcommands is a module of its own that registers its parsers: processes (up, api,
worker, prewarm, beat, flower), prune, tenant, offline (compact, replay), stats, transfer (import,
export). This module only assembles them and runs the chosen one.
"""

from __future__ import annotations

import argparse
import os
import sys

from api.cli import offline, processes, prune, stats, tenant, transfer


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValidationError as exc:
        # a bad COMPACTD_* variable: name it, in one line each, without the value it had
        for error in exc.errors():
            field = ".".join(str(p) for p in error.get("loc", ())) or "settings"
            print(f"compactd: COMPACTD_{field.upper()}: {error.get('msg', 'invalid')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before the command handles it itself (a process still importing when `compactd up`
        # is stopped: the whole group gets it): a quiet stop, with the shell's code for it
        return 130
    except BrokenPipeError:
        # the reader went away (`compactd stats demo | head`): no traceback, but not a success
        # either (an export cut short must not look complete): the shell's code for SIGPIPE. The
        # output still buffered goes nowhere, so Python's own flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand, every option with its help text."""
    parser = argparse.ArgumentParser(prog="compactd", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    processes.register(sub)
    prune.register(sub)
    tenant.register(sub)
    offline.register(sub)
    stats.register(sub)
    transfer.register(sub)
    return parser


if __name__ == "__main__":
    sys.exit(main())
