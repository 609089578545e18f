"""Engine benchmark: compaction ratio per shared transcript at two windows, and throughput.

Run: python -m ops.bench.engine  (reads ../shared/data or COMPACTD_DATA_DIR)
Throughput is MB of transcript file per second on one core: import + ingest (normalize, redact,
offload, count) + compact, the whole offline pipeline; the tokenizer and the redaction rules are
loaded before the clock starts (one-time start-up costs of a process).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ops.bench.common import data_dir, table
from worker.compaction.assemble import assemble
from worker.compaction.formats import load_transcript
from worker.compaction.model import Policy, Transcript
from worker.compaction.pipeline import compact
from worker.compaction.tokens import count_request, encoding
from worker.compaction.validate import request_problems
from worker.ingest import ingest
from worker.redaction import Redactor

WINDOWS = (200_000, 32_000)


def transcripts(root: Path) -> list[Path]:
    return sorted(
        p
        for p in (root / "transcripts").rglob("*")
        if p.suffix in (".jsonl", ".json", ".traj") and p.is_file()
    )


def run_one(path: Path, window: int, redactor: Redactor) -> dict[str, Any]:
    started = time.process_time()
    imported = load_transcript(path)
    policy = Policy(context_window=window)
    ingested = ingest(imported.messages, first_seq=1, redactor=redactor, policy=policy)
    t = Transcript(system=imported.system, turns=ingested.turns)
    out = compact(t, policy, summarize=True)
    cpu = time.process_time() - started
    request = assemble(out.transcript)
    served = count_request(request)
    return {
        "file": path.name[:40],
        "window": window,
        "turns": len(t.turns),
        "tokens_before": t.tokens(),
        "tokens_after": out.tokens,
        "served_tokens": served,
        "ratio": round(out.tokens / max(1, t.tokens()), 3),
        "fits": served <= policy.budget_tokens,
        "valid": not request_problems(request, allow_pending_tool_use=True),
        "cpu_s": round(cpu, 3),
        "mb_s": round(path.stat().st_size / 1e6 / max(cpu, 1e-6), 1),
    }


def main() -> dict[str, Any]:
    root = data_dir()
    encoding().encode_ordinary("")  # load the counter and the tokenizer outside the timed region
    redactor = Redactor(b"bench")
    # and the rule catalogs (Kingfisher's loads in ~0.5 s on first use): a process pays it once at
    # start-up (`compactd prewarm`, the API's and the worker's first request), not per transcript
    redactor.redact_text("warm up: AKIAIOSFODNN7EXAMPLE")
    rows = [run_one(p, w, redactor) for p in transcripts(root) for w in WINDOWS]
    total_bytes = sum(p.stat().st_size for p in transcripts(root))
    total_cpu = sum(r["cpu_s"] for r in rows if r["window"] == WINDOWS[0])
    print(
        table(
            rows,
            [
                "file",
                "window",
                "turns",
                "tokens_before",
                "tokens_after",
                "served_tokens",
                "ratio",
                "fits",
                "valid",
                "cpu_s",
                "mb_s",
            ],
        )
    )
    figures = {
        "rows": rows,
        "throughput_mb_s_per_core": round(total_bytes / 1e6 / max(total_cpu, 1e-6), 1),
        "all_valid": all(r["valid"] for r in rows),
        "all_fit": all(r["fits"] for r in rows),
    }
    print(
        f"\nthroughput (all files, {WINDOWS[0]:,} window): {figures['throughput_mb_s_per_core']} MB/s per core"
    )
    return figures


if __name__ == "__main__":
    main()
