"""Redaction on the shared data: the labelled secret corpora and real Claude Code transcripts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ops.bench.held_out import held_out_redactors, known_families, score_held_out
from ops.bench.secrets_scoring import CORPORA, overall, score_corpus
from tests.conftest import data_params, transcript_files
from worker.redaction import Redactor

R = Redactor(b"corpus-key")
IDS = re.compile(
    r"\btoolu_[A-Za-z0-9]{10,}|\b[0-9a-f]{40}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
)
CLAUDE_CODE = [p for p in transcript_files() if "claude-code" in p.parts]


def test_secret_corpora_recall_and_false_positives(shared_data: Path) -> None:
    """Pooled over the four corpora, in-sample recall and false positives stay at the measured level.

    The floors sit just under what the rules reach today (`python -m ops.bench.secrets`), so a
    regression fails here. Most false positives are real-looking keys on upstream literal
    allow-lists, which stay redacted (`fp_rate_unlisted` leaves them out), and literal words in a
    credential position (`curl -u test:test`), redacted by policy.
    """
    rows = [score_corpus(shared_data, name, R) for name in CORPORA]
    total = overall(rows)
    assert total["recall"] >= 0.975, total
    # 0.092 since config positions (issue 25): detect-secrets' negative `password: real_key` is a weak
    # literal in a password position, a secret by policy; 0.103 since the generic layer (issue 42):
    # five negatives of other rules that are credentials by shape or position (`foo_wWPw5k4a…`,
    # a look-alike `sk-proj-…`, `Ldap password ---- H7IKC85R#@4$`; two token-shaped ones not read);
    # 0.108 since hex bodies after a vendor-style prefix are tokens (two sourcegraph negatives, not read);
    # 0.110 since a template is spared only when well formed (session 16): the keyword plugin's negative
    # `aws_secret_access_key = @'m{{h}o)p${e]nob(…}}'` (negative for some file types only) is a value in
    # a credential position, a secret by policy
    assert total["fp_rate"] <= 0.11, total
    # 0.047: the same `real_key`; 0.059 since the generic layer (the five above); 0.061 since hex
    # bodies; 0.063 since well-formed templates (the keyword negative above)
    assert total["fp_rate_unlisted"] <= 0.064, total


def test_family_held_out_figures_hold(shared_data: Path) -> None:
    """Scored without the rules tuned on each sample's family, recall and false positives hold.

    This is the figure that predicts secrets of kinds we never tuned on (BENCHMARKS.md); it is far
    from the in-sample one, and a change that only helps in-sample does not move it.
    """
    redactors = held_out_redactors(known_families(shared_data), strict=False, theirs="none")
    total = overall([score_held_out(shared_data, name, redactors) for name in CORPORA])
    # config positions (issue 25, a rule held out only for the families it was tuned on) took recall
    # from 0.70 to 0.73 and false positives from 0.023 to 0.028; the generic layer (issue 42) to
    # 0.755 and 0.040; hex bodies after a prefix and `[_-]` anywhere in a token's body (session 15) to
    # 0.755 and 0.047 (two sourcegraph and one google negative, not read)
    assert total["recall"] >= 0.75, total
    assert total["fp_rate"] <= 0.048, total


# corpus: (recall floor, false-positive ceiling), just past today's figures
PER_CORPUS = {
    # look-alike Anthropic keys are redacted on purpose; 0.123: two sourcegraph hex tokens (session 15)
    "gitleaks_rule_cases": (0.98, 0.125),
    # 0.098: a table's `Ldap password ---- H7IKC85R#@4$` and two token shapes (issue 42)
    "noseyparker_rule_examples": (0.96, 0.1),
    # `password: real_key`, a secret since issue 25; token shapes since issue 42 (`foo_wWPw5k4a…`);
    # 0.093: `aws_secret_access_key = @'m{{h}o)p${e]…'`, a credential position (session 16)
    "detect_secrets_plugin_cases": (0.955, 0.095),
    "detect_secrets_test_files": (0.96, 0.0),
}


@pytest.mark.parametrize("name", CORPORA)
def test_each_secret_corpus_holds_its_level(shared_data: Path, name: str) -> None:
    """No single corpus regresses behind a pooled figure that still looks fine."""
    recall_floor, fp_ceiling = PER_CORPUS[name]
    figures = score_corpus(shared_data, name, R)
    assert figures["recall"] >= recall_floor, figures["misses"]
    assert figures["fp_rate"] <= fp_ceiling, figures["false_positives"]


@pytest.mark.parametrize("path", data_params(CLAUDE_CODE), ids=lambda p: p.name[:40])
def test_ids_shas_and_uuids_in_real_transcripts_survive(path: Path) -> None:
    """No toolu_ id, 40-hex git SHA or UUID in a real Claude Code transcript is redacted."""
    for line in path.read_text(errors="replace").splitlines():
        ids = [m.span() for m in IDS.finditer(line)]
        if not ids:
            continue
        spans = [(f.start, f.end) for f in R.findings(line)]
        hit = [line[s:e] for s, e in ids if any(a < e and s < b for a, b in spans)]
        assert not hit, hit
