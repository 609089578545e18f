"""Config files of formats no rule was written for: the config corpus with its format rules out, and
the public-config corpus (fetched upstream example files with planted credentials, issue 42)."""

from __future__ import annotations

import pytest

from ops.bench import configs
from worker.redaction.scanner import ALL, CONFIG_POSITIONS, Ruleset

WITHOUT_FORMATS = Ruleset.without(frozenset({CONFIG_POSITIONS}))
# half: (credential lines caught at least, near-miss lines changed at most): today's figures
# (BENCHMARKS.md, Sessions 15 to 18); `held` was never read
PUBLIC = {"dev": (408, 14), "held": (319, 42)}


def _totals(rows: list[dict]) -> tuple[int, int, int]:
    return (
        sum(r["caught"] for r in rows),
        sum(r["credentials"] for r in rows),
        sum(r["changed"] for r in rows),
    )


def test_config_corpus_without_its_formats_rules_is_mostly_caught() -> None:
    """With every format's own rules out, the generic layer still takes 95% of the credential lines."""
    rows = configs.score(WITHOUT_FORMATS)
    caught, total, changed = _totals(rows)
    missed = [line for row in rows for line in row["missed"]]
    assert caught >= 0.95 * total, f"{caught}/{total}:\n" + "\n".join(missed)
    assert changed <= 3, [line for row in rows for line in row["changed_lines"]]


@pytest.mark.parametrize("half", sorted(PUBLIC))
def test_public_config_corpus_holds_its_level(half: str) -> None:
    """The fetched example files with planted credentials keep today's catch and near-miss figures."""
    folder = configs.PUBLIC_CONFIGS / half
    caught, total, changed = _totals(configs.score(ALL, configs.load(folder)))
    least, most = PUBLIC[half]
    assert caught >= least, f"{caught}/{total} credential lines caught"
    assert changed <= most, f"{changed} near-miss lines changed"
