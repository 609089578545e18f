"""`make bench`: every benchmark in turn, figures printed (copy them into BENCHMARKS.md).

Run one part with: python -m ops.bench [engine|fidelity|replay|paced|memory|secrets|configs|generic|service|load|proxy|startup|worst]
"""

from __future__ import annotations

import importlib
import sys
import time

PARTS = (
    "engine",
    "fidelity",
    "replay",
    "paced",
    "memory",
    "secrets",
    "configs",
    "generic",
    "service",
    "load",
    "proxy",
    "startup",
    "worst",
)


def main(argv: list[str]) -> None:
    for part in argv or PARTS:
        if part not in PARTS:
            raise SystemExit(f"unknown benchmark {part!r}; choose from {', '.join(PARTS)}")
        print(f"\n=== {part} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"ops.bench.{part}").main()
        print(f"({part}: {time.perf_counter() - started:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
