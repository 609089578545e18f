"""Secret redaction benchmark: recall and false positives per corpus, in-sample and
family-held-out, and throughput. What is counted how: ops/bench/secrets_scoring.py (scoring),
ops/bench/held_out.py and ops/bench/tuning.py (which rules count for which family).

Run: python -m ops.bench.secrets  (reads ../shared/data or COMPACTD_DATA_DIR)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from ops.bench.common import data_dir, table
from ops.bench.held_out import HELD_OUT, held_out_redactors, known_families, score_held_out
from ops.bench.secrets_scoring import CORPORA, overall, score_corpus
from worker.redaction import Redactor

TRANSCRIPT = "transcripts/claude-code/spotter/fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl"


def _blocks(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        message = record.get("message") if isinstance(record, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            out.append({"type": "text", "text": content})
        elif isinstance(content, list):
            out += [b for b in content if isinstance(b, dict)]
    return out


def throughput(path: Path, redactor: Redactor) -> dict[str, float]:
    """MB/s of the transcript file through redact_block on each block and redact_text on the file."""
    size_mb = path.stat().st_size / 1e6
    blocks = _blocks(path)
    for block in blocks[:50]:
        redactor.redact_block(block)  # warm: Kingfisher loads its compiled rules on first use (~0.5 s)
    started = time.process_time()
    for block in blocks:
        redactor.redact_block(block)
    per_block = time.process_time() - started
    text = path.read_text()
    started = time.process_time()
    redactor.redact_text(text)
    raw = time.process_time() - started
    return {
        "blocks_mb_s": round(size_mb / max(per_block, 1e-9), 1),
        "raw_mb_s": round(size_mb / max(raw, 1e-9), 1),
    }


def main() -> dict[str, Any]:
    root = data_dir()
    redactor = Redactor(b"bench")
    rows = []
    for name in CORPORA:
        figures = score_corpus(root, name, redactor)
        rows.append({"corpus": name, **figures})
    speed = throughput(root / TRANSCRIPT, redactor)
    total = overall(rows)
    rows.append({"corpus": "overall", **total})
    known = known_families(root)
    for label, (strict, theirs) in HELD_OUT.items():
        redactors = held_out_redactors(known, strict, theirs)
        parts = [score_held_out(root, name, redactors) for name in CORPORA]
        for row, part in zip(rows, [*parts, overall(parts)], strict=True):
            row[f"{label}_recall"], row[f"{label}_fp"] = part["recall"], part["fp_rate"]
    held = list(HELD_OUT)
    print(table(rows, ["corpus", "positives", "out_of_policy", "recall", *(f"{h}_recall" for h in held)]))
    print()
    print(table(rows, ["corpus", "negatives", "fp_rate", "fp_rate_unlisted", *(f"{h}_fp" for h in held)]))
    print(
        f"\nthroughput on {Path(TRANSCRIPT).name}: {speed['blocks_mb_s']} MB/s per block, "
        f"{speed['raw_mb_s']} MB/s raw file"
    )
    for row in rows:
        for label in ("misses", "false_positives"):
            if row[label]:
                print(f"{row['corpus']} {label}: {', '.join(row[label])}")
    return {"corpora": rows, "throughput": speed}


if __name__ == "__main__":
    main()
