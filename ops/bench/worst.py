"""Redaction's worst inputs: seconds to redact texts built to make it slow, at growing sizes.

Run: python -m ops.bench worst   [--sizes 25,50,100] (KB)

Each input repeats one short unit: most are runs without a blank in which every unit is a
credential key, so every key's value runs on to the end of the run (the scanner's judges, the
config positions' pairs and RE2's search each read the rest of the run per key: quadratic before
the reach in worker/redaction/scanner.py and the bounded line parts in lines.py). `growth` is the
time at the largest size over the time at half of it: 2 is linear, 4 quadratic. Wall-clock
seconds on this machine, one process, the rules loaded before the clock starts.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ops.bench.common import table
from worker.redaction import Redactor

# name -> the unit repeated; a realistic dense input last (a JSONL record of many pairs, minified)
UNITS = {
    "secrets=(": "secrets=(",
    "token=(": "token=(",
    "a.key=b": "a.key=b",
    "pass:": "pass:",
    "--token=": "--token=",
    "JSON pairs": '"api_token":"Zq8xW3vN7pL2","n":1,',
    "query string": "access_token=Zq8xW3vN7pL2aB&",
    "blanks then key": " " * 60 + "password",
    "password: (blank)": "password: ",
    # the readers of what a text says about itself (generic/tables.py): a header or a template on
    # every other line, each followed by a row of its form
    "header, row": "# client server secret IP addresses\nalice * Tr0ub4dor9X *\n",
    "template, row": "# <username>: <password>\nalice: Tr0ub4dor9X\n",
    "upper-case headers": "TOKEN TTL EXPIRES USAGES\n",
}


def seconds(redactor: Redactor, text: str) -> float:
    started = time.perf_counter()
    redactor.redact_text(text)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.worst")
    parser.add_argument("--sizes", default="25,50,100", help="KB, comma-separated, ascending")
    args = parser.parse_args(argv or [])
    sizes = [int(s) for s in args.sizes.split(",")]
    redactor = Redactor(b"worst-bench")
    redactor.redact_text("warm up: token=Zq8xW3vN7pL2aBc9")
    rows = []
    for name, unit in UNITS.items():
        row: dict[str, Any] = {"input": name}
        for kb in sizes:
            text = unit * (kb * 1000 // len(unit))
            row[f"{kb} KB s"] = round(seconds(redactor, text), 2)
        last = sizes[-1]
        if last // 2 in sizes:
            row["growth"] = round(row[f"{last} KB s"] / max(row[f"{last // 2} KB s"], 1e-3), 1)
        rows.append(row)
        print(row, flush=True)
    print(table(rows, list(rows[0])))
    return {"rows": rows}


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
