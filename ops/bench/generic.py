"""The generic layer (issue 42), measured the way it meets the world: before and after, one run.

- leave-one-family-out on the four secret corpora: each family scored without every rule tuned on
  it; `held_out` keeps Kingfisher's catalog, `ablation` also removes Kingfisher's rules of the
  family's vendor (the real ablation: no rule of the family at all); overall, per half of the
  families (`family_half`: the dev half was read while tuning, the held half never) and per
  family. False positives of the deployed rules on the crafted negatives are the in-sample ones;
- leave-the-formats-out on the config corpus (tests/data/configs): every file scored with the
  config-position pass removed, so no format keeps a rule of its own (a lower bound on leaving
  one format out at a time: the other formats' rules are gone too);
- the public-config corpus (tests/data/public_configs/{dev,held}, upstream example files with
  planted credentials; README.md there): credential lines caught, near-miss lines changed, per half;
- real transcripts: placeholders per MB of `<data>/transcripts` and every redaction the generic
  layer adds, for review.

"Before" is the same build with the generic rules left out (GENERIC_POSITIONS, GENERIC_TOKENS).
Run: python -m ops.bench generic   (reads ../shared/data or COMPACTD_DATA_DIR)
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ops.bench import configs
from ops.bench import families as families_of
from ops.bench.common import data_dir, table
from ops.bench.held_out import held_out_redactors, known_families
from ops.bench.secrets_scoring import CORPORA, load_rows, overall, score, score_corpus
from worker.redaction import Redactor
from worker.redaction.scanner import ALL, CONFIG_POSITIONS, GENERIC_POSITIONS, GENERIC_TOKENS, Ruleset

GENERIC = frozenset({GENERIC_POSITIONS, GENERIC_TOKENS})
BEFORE = Ruleset.without(GENERIC)
_PLACEHOLDER = re.compile(r"\[REDACTED:([a-z0-9_]+):[0-9a-f]{8}\]")


def family_half(family: str) -> str:
    """`dev` or `held`: the half of the families a family is in (sha256 of its name, first byte
    even: dev). Only dev families' samples were read while tuning the generic layer (TUNING.md)."""
    return "dev" if hashlib.sha256(family.encode()).digest()[0] % 2 == 0 else "held"


def _by_family(root: Path, redactors: dict[str, Redactor]) -> dict[str, dict[str, Any]]:
    """Each family's figures pooled over the four corpora, scored with its own redactor."""
    out: dict[str, dict[str, Any]] = {}
    for name in CORPORA:
        rows = load_rows(root / "secrets" / f"{name}.jsonl")
        for fam, redactor in redactors.items():
            mine = [r for r in rows if families_of.family(r) == fam]
            if mine:
                part = score(name, mine, redactor)
                out[fam] = overall([out[fam], part]) if fam in out else part
    return out


def families(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Leave-one-family-out recall and false positives, before and after: overall, per half of the
    families, and per family (the real ablation)."""
    known = known_families(root)
    rows: list[dict[str, Any]] = []
    per_family: dict[str, dict[str, Any]] = {}
    for label, theirs in (("held_out", "none"), ("ablation", "vendor")):
        for when, extra in (("before", GENERIC), ("after", frozenset())):
            redactors = held_out_redactors(known, strict=False, theirs=theirs, also_left_out=extra)
            figures = _by_family(root, redactors)
            for half in ("all", "dev", "held"):
                mine = [f for fam, f in figures.items() if half == "all" or family_half(fam) == half]
                total = overall(mine)
                rows.append(
                    {
                        "figure": f"{label} {when}",
                        "families": half,
                        "positives": total["positives"],
                        "recall": total["recall"],
                        "negatives": total["negatives"],
                        "fp_rate": total["fp_rate"],
                    }
                )
            if label == "ablation":
                for fam, f in figures.items():
                    row = per_family.setdefault(
                        fam, {"family": fam, "half": family_half(fam), "positives": f["positives"]}
                    )
                    row[f"caught_{when}"] = f["caught"]
                    row[f"fps_{when}"] = f"{f['fps']}/{f['negatives']}"
    for when, rules in (("before", BEFORE), ("after", ALL)):
        total = overall([score_corpus(root, name, Redactor(b"bench", rules)) for name in CORPORA])
        rows.append(
            {
                "figure": f"in-sample {when}",
                "families": "all",
                "positives": total["positives"],
                "recall": total["recall"],
                "negatives": total["negatives"],
                "fp_rate": total["fp_rate"],
            }
        )
    return rows, sorted(per_family.values(), key=lambda r: (r["half"], r["family"]))


def _corpus_row(name: str, rules: Ruleset, files: list[configs.ConfigFile]) -> dict[str, Any]:
    scored = configs.score(rules, files)
    creds = sum(r["credentials"] for r in scored)
    nears = sum(r["near_misses"] for r in scored)
    caught = sum(r["caught"] for r in scored)
    changed = sum(r["changed"] for r in scored)
    return {
        "corpus": name,
        "files": len(scored),
        "credential_lines": creds,
        "caught": caught,
        "caught_share": round(caught / max(1, creds), 3),
        "files_whole": sum(r["caught"] == r["credentials"] for r in scored),
        "near_misses": nears,
        "changed": changed,
        "changed_share": round(changed / max(1, nears), 3),
        "missed": [m for r in scored for m in r["missed"]],
        "changed_lines": [m for r in scored for m in r["changed_lines"]],
    }


def config_corpora() -> list[dict[str, Any]]:
    """The config corpus with its formats' rules out, and the public-config corpus, before/after."""
    rows = []
    files = configs.load()
    for when, extra in (("before", GENERIC), ("after", frozenset())):
        rules = Ruleset.without(frozenset({CONFIG_POSITIONS}) | extra)
        rows.append(_corpus_row(f"configs, format rules out, {when}", rules, files))
    for half in ("dev", "held"):
        public = configs.load(configs.PUBLIC_CONFIGS / half)
        for when, rules in (("before", BEFORE), ("after", ALL)):
            rows.append(_corpus_row(f"public {half}, {when}", rules, public))
    return rows


def transcripts(root: Path) -> dict[str, Any]:
    """Placeholders per MB of the real transcripts (each file redacted whole, escaped copies
    included, as `ops.bench secrets` counts them), before and after, and each line the generic
    layer changes, with what it took."""
    files = sorted(p for p in (root / "transcripts").rglob("*") if p.suffix in (".json", ".jsonl", ".traj"))
    counts: Counter[str] = Counter()
    added: list[str] = []
    size = 0
    before_r, after_r = Redactor(b"bench", BEFORE), Redactor(b"bench", ALL)
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            size += len(line.encode()) + 1
            before, after = before_r.redact_text(line), after_r.redact_text(line)
            counts["before"] += len(_PLACEHOLDER.findall(before))
            counts["after"] += len(_PLACEHOLDER.findall(after))
            if before != after:
                added += [f"{path.name[:24]}: {taken}" for taken in _taken(before, after)]
    size_mb = size / 1e6
    per_mb = {k: round(v / size_mb, 1) for k, v in counts.items()}
    return {"mb": round(size_mb, 1), "per_mb": per_mb, "added": added}


def _taken(before: str, after: str) -> list[str]:
    """Each placeholder the after text has and the before text has not, with what it replaced:
    the text between the context on its left and on its right, found in the before text."""
    out = []
    kept = Counter(_PLACEHOLDER_TEXT.findall(before))
    for m in _PLACEHOLDER_TEXT.finditer(after):
        if kept[m.group()] > 0:
            kept[m.group()] -= 1
            continue
        left = _PLACEHOLDER_TEXT.split(after[max(0, m.start() - 40) : m.start()])[-1]
        right = _PLACEHOLDER_TEXT.split(after[m.end() : m.end() + 20])[0]
        at = before.find(left) + len(left) if left else 0
        stop = before.find(right, at) if right else len(before)
        out.append(f"…{left}«{before[at:stop] if stop >= at else '?'}»{right}…")
    return out


_PLACEHOLDER_TEXT = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")


def main() -> dict[str, Any]:
    root = data_dir()
    fams, per_family = families(root)
    print(table(fams, list(fams[0])))
    print()
    print(
        table(
            per_family,
            ["family", "half", "positives", "caught_before", "caught_after", "fps_before", "fps_after"],
        )
    )
    corpora = config_corpora()
    cols = [k for k in corpora[0] if k not in ("missed", "changed_lines")]
    print()
    print(table(corpora, cols))
    for row in corpora:
        # the held half's lines are not printed: it stays untouched by whoever tunes on this output
        if row["corpus"].endswith("after") and "held" not in row["corpus"]:
            for line in row["missed"]:
                print(f"{row['corpus']} missed   {line[:160]}")
            for line in row["changed_lines"]:
                print(f"{row['corpus']} changed  {line[:160]}")
    seen = transcripts(root)
    print(f"\ntranscripts: {seen['mb']} MB, placeholders per MB {seen['per_mb']}")
    for line in seen["added"]:
        print(f"added  {line}")
    return {"families": fams, "per_family": per_family, "corpora": corpora, "transcripts": seen}


if __name__ == "__main__":
    main()
