"""Replay benchmark, offline: the two long Claude Code sessions at 200k, 64k and 32k windows,
appended every 0.25 s with the worker simulated on the same clock (jobs take their measured time).

Run: python -m ops.bench.replay [--plots DIR]   (over HTTP against the real service: ops.bench.paced)
Per session and window: fetches over budget, epochs, switches, fallbacks, the largest prompt vs the
budget, the share of consecutive fetches reading a prefix from the provider's cache and reading
the previous fetch's whole prefix, and the cost under its cache prices against the uncompacted
history (`cost_ratio`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ops.bench.common import data_dir, table
from ops.bench.policy import reading_previous
from worker.compaction.formats import load_transcript
from worker.compaction.model import Policy
from worker.flows.simulate import Pace, plot, replay

SESSIONS = ("fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
WINDOWS = (200_000, 64_000, 32_000)


def main(plots: Path | None = None) -> dict[str, Any]:
    root = data_dir() / "transcripts" / "claude-code" / "spotter"
    rows = []
    for name in SESSIONS:
        imported = load_transcript(root / name)
        for window in WINDOWS:
            report = replay(imported.system, imported.messages, Policy().for_window(window), pace=Pace(0.25))
            rows.append(
                {
                    "session": name[:8],
                    "window": window,
                    **report.summary(),
                    "fetches_reading_previous": reading_previous(report.fetches),
                }
            )
            if plots:
                plots.mkdir(parents=True, exist_ok=True)
                plot(
                    report,
                    str(plots / f"replay-{name[:8]}-{window // 1000}k.png"),
                    f"{name[:8]} at {window:,} tokens",
                )
    columns = [
        "session",
        "window",
        "fetches",
        "over_budget",
        "all_valid",
        "epochs",
        "quiet_switches",
        "deadline_switches",
        "fallbacks_pending",
        "fallbacks_fit",
        "max_prompt_tokens",
        "budget_tokens",
        "fetches_reading_cache",
        "fetches_reading_previous",
        "cache_read_share",
        "cost_usd",
        "cost_usd_uncompacted",
        "cost_ratio",
    ]
    print(table(rows, columns))
    return {"rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--plots", type=Path)
    main(parser.parse_args().plots)
