"""Every positive sample of ../shared/data/secrets, cut in two at several points of its secret, is
gone from both halves: within one append (two consecutive messages) and across two appends (the
first half stored, redacted alone, before the second arrives), under both redaction profiles.

The planted-corpus test (tests/integration/test_planted_corpus.py) sends each sample through the
HTTP API cut at one point, where the store, the cache and the service's other places are searched.
This one runs the same redaction steps offline (pipeline.ingest, `after=` for the stored message,
as appending.py calls it) at four points of every secret, and searches the two
stored halves, alone and joined, for the same needles (`windows`). Under the standard profile the
samples it does not redact when planted whole (the planted test's listed `plain` leaks) are left out:
cut in two, they are no more found than whole.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import data_dir, require
from tests.integration.test_planted_corpus import (
    KNOWN_LEAKS,
    SAMPLES,
    _hits,
    context_windows,
    needle_secret,
    windows,
)
from worker.compaction.model import Block, Policy
from worker.ingest import ingest
from worker.redaction import Redactor
from worker.redaction.scanner import ALL, strict_rules

pytestmark = [pytest.mark.data, pytest.mark.slow]  # ~20 s per case

POINTS = 4  # cuts per secret, at 1/5 .. 4/5 of it


def _cuts(secret: str) -> list[int]:
    return sorted({max(1, len(secret) * k // (POINTS + 1)) for k in range(1, POINTS + 1)})


def _one_append(left: str, right: str, redactor: Redactor) -> list[tuple[Block, ...]]:
    msgs = [{"role": "user", "content": left}, {"role": "assistant", "content": right}]
    return [t.content for t in ingest(msgs, first_seq=1, redactor=redactor, policy=Policy()).turns]


def _two_appends(left: str, right: str, redactor: Redactor) -> list[tuple[Block, ...]]:
    stored = ingest([{"role": "user", "content": left}], first_seq=1, redactor=redactor, policy=Policy())
    first = stored.turns[0].content
    then = ingest(
        [{"role": "assistant", "content": right}],
        first_seq=2,
        redactor=redactor,
        policy=Policy(),
        after=("user", first),
    )
    # the store writes back the stored message as the ingest rewrote it (appending.py)
    return [then.after if then.after is not None else first, then.turns[0].content]


def _leaks(profile: str, split: Any) -> dict[str, list[int]]:
    redactor = Redactor(b"split-corpus-key", strict_rules() if profile == "strict" else ALL)
    known = json.loads(KNOWN_LEAKS.read_text()) if KNOWN_LEAKS.exists() else {}
    undetected = set(known.get("standard", {}).get("plain", {})) if profile == "standard" else set()
    context = context_windows(SAMPLES)
    out: dict[str, list[int]] = {}
    for s in SAMPLES:
        at = s.text.find(s.secrets[0])
        if at < 0 or s.id in undetected:
            continue
        needles = windows(needle_secret(s), s.text, context)
        for cut in _cuts(s.secrets[0]):
            halves = [json.dumps(list(c)) for c in split(s.text[: at + cut], s.text[at + cut :], redactor)]
            if _hits({"first": halves[0], "second": halves[1], "joined": "".join(halves)}, needles):
                out.setdefault(s.id, []).append(cut)
    return out


@pytest.mark.parametrize("split", [_one_append, _two_appends], ids=["one-append", "two-appends"])
@pytest.mark.parametrize("profile", ["standard", "strict"])
def test_a_secret_cut_anywhere_is_gone_from_both_halves(profile: str, split: Any) -> None:
    require(bool(SAMPLES), f"needs the shared data: no secret samples under {data_dir() / 'secrets'}")
    assert _leaks(profile, split) == {}
