"""Family-held-out scoring: each family's samples scored without the rules tuned on it.

The variants (HELD_OUT) differ in what counts as tuned; ops/bench/tuning.py holds the attribution
and the docstring of ops/bench/secrets_scoring.py says what each figure means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ops.bench import families, tuning
from ops.bench.secrets_scoring import CORPORA, load_rows, overall, score
from worker.redaction import Redactor
from worker.redaction.scanner import Ruleset

# figure -> (our generic rules from before the log count as tuned on every family,
#            which of Kingfisher's rules are left out: none, the sample's own vendor's, all)
HELD_OUT = {
    "held_out": (False, "none"),
    "strict": (True, "none"),
    "new_vendor": (False, "vendor"),
    "ours_only": (False, "all"),
    "strict_new_vendor": (True, "vendor"),
}


def held_out_redactors(
    known: frozenset[str], strict: bool, theirs: str, also_left_out: frozenset[str] = frozenset()
) -> dict[str, Redactor]:
    """Per family, a redactor without the rules tuned on that family (and without also_left_out:
    the bench's "before" of a new rule)."""
    out: dict[str, Redactor] = {}
    for name in known:
        fam = frozenset({name})
        skip = _kingfisher_skipped(fam, known, theirs)
        left_out = tuning.left_out(fam, known, strict) | also_left_out
        out[name] = Redactor(b"bench", Ruleset.without(left_out, skip))
    return out


def _kingfisher_skipped(fam: frozenset[str], known: frozenset[str], theirs: str) -> frozenset[str]:
    """Kingfisher's rules left out for a family: none, its vendor's, or all (only the one asked for
    is worked out)."""
    if theirs == "none":
        return frozenset()
    return tuning.kingfisher_left_out(fam if theirs == "vendor" else frozenset({tuning.EVERY}), known)


def score_held_out(root: Path, name: str, redactors: dict[str, Redactor]) -> dict[str, Any]:
    """One corpus scored family by family, each with its own redactor, pooled."""
    rows = load_rows(root / "secrets" / f"{name}.jsonl")
    parts = []
    for fam, redactor in redactors.items():
        mine = [r for r in rows if families.family(r) == fam]
        if mine:
            parts.append(score(name, mine, redactor))
    return overall(parts)


def known_families(root: Path) -> frozenset[str]:
    return frozenset(
        families.family(r) for name in CORPORA for r in load_rows(root / "secrets" / f"{name}.jsonl")
    )
