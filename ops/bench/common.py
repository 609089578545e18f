"""Shared bits of the benchmark drivers: where the data is, and a plain-text table."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def data_dir() -> Path:
    env = os.environ.get("COMPACTD_DATA_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"
    if not path.is_dir():
        raise SystemExit(f"benchmark data not found at {path}: set COMPACTD_DATA_DIR")
    return path


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A fixed-width text table (numbers right-aligned, thousands separated)."""

    def cell(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    widths = {c: max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(c.rjust(widths[c]) for c in columns)]
    lines += ["  ".join(cell(r.get(c, "")).rjust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)
