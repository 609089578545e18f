"""Replay benchmark: the two long Claude Code sessions fed turn by turn at 200k and 64k windows.

Run: python -m ops.bench.replay [--plots DIR]
Per session and window: fetches, epochs, the largest prompt served vs the budget, the share of
fetches reusing >= 90% of the previous prompt byte for byte, and input cost with and without.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ops.bench.common import data_dir, table
from worker.compaction.formats import load_transcript
from worker.compaction.model import Policy
from worker.replay import plot, replay

SESSIONS = ("fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
WINDOWS = (200_000, 64_000)


def main(plots: Path | None = None) -> dict[str, Any]:
    root = data_dir() / "transcripts" / "claude-code" / "spotter"
    rows = []
    for name in SESSIONS:
        imported = load_transcript(root / name)
        for window in WINDOWS:
            report = replay(imported.system, imported.messages, Policy(context_window=window))
            rows.append({"session": name[:8], "window": window, **report.summary()})
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
        "epochs",
        "max_prompt_tokens",
        "budget_tokens",
        "all_under_budget",
        "all_valid",
    ]
    columns += [
        "fetches_reusing_90pct",
        "mean_reused_share",
        "input_cost_usd_compacted",
        "input_cost_usd_uncompacted",
    ]
    print(table(rows, columns))
    return {"rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--plots", type=Path)
    main(parser.parse_args().plots)
