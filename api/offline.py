"""Offline subcommands of `compactd` (no services): `compact` and `replay`. Registered by api/cli.py."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the offline subcommands to the CLI's subparsers."""
