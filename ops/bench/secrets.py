"""Secret redaction benchmark: recall and false positives per corpus, in-sample and
family-held-out, and throughput. What is counted how: ops/bench/secrets_scoring.py (scoring),
ops/bench/held_out.py and ops/bench/tuning.py (which rules count for which family).

Run: python -m ops.bench.secrets  (reads ../shared/data or COMPACTD_DATA_DIR)
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from ops.bench.common import data_dir, table
from ops.bench.held_out import HELD_OUT, held_out_redactors, known_families, score_held_out
from ops.bench.secrets_scoring import CORPORA, _caught, _false_positive, _secrets_of, overall, score_corpus
from worker.redaction import Redactor
from worker.redaction.scanner import ALL, strict_rules

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


_PLACEHOLDER = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")


def _rows(root: Path) -> list[dict[str, Any]]:
    return [
        orjson.loads(line)
        for name in CORPORA
        if (root / "secrets" / f"{name}.jsonl").exists()
        for line in (root / "secrets" / f"{name}.jsonl").read_bytes().splitlines()
    ]


def profiles(root: Path) -> list[dict[str, Any]]:
    """Standard against strict (COMPACTD_REDACTION=strict): recall over every positive sample, out
    of policy ones included; the share of negatives flagged; and what each replaces in the real
    agent transcripts under transcripts/ (placeholders per MB of transcript file, by kind), and
    throughput per block as in `throughput`."""
    rows = _rows(root)
    positives = [r for r in rows if r.get("label") == "positive" and _secrets_of(r)]
    negatives = [r for r in rows if r.get("label") == "negative"]
    files = sorted(p for p in (root / "transcripts").rglob("*") if p.suffix in (".json", ".jsonl"))
    texts = [p.read_text(errors="replace") for p in files]
    size_mb = sum(len(t.encode()) for t in texts) / 1e6
    out = []
    for name, rules in (("standard", ALL), ("strict", strict_rules())):
        redactor = Redactor(b"bench", rules)
        caught = sum(_caught(r["text"], redactor.redact_text(r["text"]), _secrets_of(r)) for r in positives)
        flagged = sum(_false_positive(r, redactor) for r in negatives)
        kinds: Counter[str] = Counter()
        for text in texts:
            kinds.update(_PLACEHOLDER.findall(redactor.redact_text(text)))
        out.append(
            {
                "profile": name,
                "positives": len(positives),
                "recall_all": round(caught / max(1, len(positives)), 3),
                "negatives": len(negatives),
                "fp_rate": round(flagged / max(1, len(negatives)), 3),
                "transcript_mb": round(size_mb, 1),
                "replaced_per_mb": round(sum(kinds.values()) / max(size_mb, 1e-9), 1),
                "blocks_mb_s": throughput(root / TRANSCRIPT, redactor)["blocks_mb_s"],
                "kinds": ", ".join(f"{k} {n}" for k, n in kinds.most_common(6)),
            }
        )
    return out


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
    compared = profiles(root)
    print("\nprofiles (in-sample: the strict rules were written against these samples)")
    print(table(compared, list(compared[0])))
    return {"corpora": rows, "throughput": speed, "profiles": compared}


if __name__ == "__main__":
    main()
