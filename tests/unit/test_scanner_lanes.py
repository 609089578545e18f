"""A lane cut into parts finds what one RE2 alternation of all its detectors finds: at every
candidate, the same leftmost start, the same detector (the first in table order that matches
there) and the same groups (worker/redaction/scanner.py, `_Lane`).

The reference is the lane as it was scanned before: one alternation with every detector's groups,
the detector read off which group took part.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.test_planted_corpus import SAMPLES
from tests.strategies import PLANTED_SECRETS, pieced
from worker.redaction.rules import Detector
from worker.redaction.scanner import _detector_at, _Lane, _next_start, strict_rules

# every lane of both profiles (the strict profile's list starts with the standard lanes)
LANES = strict_rules().lanes
# (start, which detector, its groups' spans) at one candidate
Candidate = tuple[int, str, tuple[tuple[int, int], ...]]


@cache
def _one_alternation(k: int) -> tuple[re2._Regexp, list[tuple[int, Detector]]]:
    detectors = [d for part in LANES[k].parts for d in part.detectors]
    options = re2.Options()
    options.max_mem = 64 << 20
    regex = re2.compile("|".join(f"({d.pattern})" for d in detectors).encode(), options)
    owners, group = [], 1
    for detector in detectors:
        owners.append((group, detector))
        group += 1 + re2.compile(detector.pattern).groups
    return regex, owners


def _reference(k: int, data: bytes) -> list[Candidate]:
    regex, owners = _one_alternation(k)
    out: list[Candidate] = []
    pos = 0
    while (m := regex.search(data, pos)) is not None:
        base, detector = next((g, d) for g, d in owners if m.start(g) >= 0)
        spans = tuple(m.span(base + k) for k in range(re2.compile(detector.pattern).groups + 1))
        out.append((m.start(), f"{id(detector)}", spans))
        pos = m.start() + 1
    return out


def _parted(lane: _Lane, data: bytes) -> list[Candidate]:
    out: list[Candidate] = []
    starts: list[int | None] = [-1] * len(lane.parts)
    pos = 0
    while (start := _next_start(lane, data, pos, starts)) is not None:
        detector, _, groups = _detector_at(lane, data, start, starts, None)  # no reach: matches whole
        spans = tuple(groups[k] for k in range(re2.compile(detector.pattern).groups + 1))
        out.append((start, f"{id(detector)}", spans))
        pos = start + 1
    return out


def planted_texts() -> list[bytes]:
    """Every planted sample's text, whole and cut in two inside its (first) secret."""
    texts: list[bytes] = []
    for sample in SAMPLES:
        texts.append(sample.text.encode("utf-8", "surrogatepass"))
        at = sample.text.find(sample.secrets[0]) if sample.secrets else -1
        if at >= 0:
            cut = at + max(1, len(sample.secrets[0]) // 2)
            texts += [
                sample.text[:cut].encode("utf-8", "surrogatepass"),
                sample.text[cut:].encode("utf-8", "surrogatepass"),
            ]
    return texts


def _differences(texts: list[bytes]) -> list[tuple[int, bytes]]:
    return [
        (k, t[:120]) for t in texts for k, lane in enumerate(LANES) if _parted(lane, t) != _reference(k, t)
    ]


def test_every_lane_is_cut_into_parts_that_keep_table_order() -> None:
    """Lanes with many detectors are several parts, and their detectors stay in table order."""
    assert len(LANES[0].parts) > 1
    for lane in LANES:
        detectors = [d for part in lane.parts for d in part.detectors]
        assert len(set(map(id, detectors))) == len(detectors)


@pytest.mark.data
def test_parts_find_what_one_alternation_finds_on_the_secret_corpora(shared_data: Path) -> None:
    """On every planted sample, whole and cut in two inside its secret, every candidate matches."""
    texts = planted_texts()
    assert texts
    assert _differences(texts) == []


_PIECES = st.sampled_from(
    [
        *PLANTED_SECRETS,
        "password = ",
        "token: ",
        "\n",
        " ",
        '"',
        "'",
        "=",
        "https://user:",
        "@host/db",
        "-----BEGIN RSA PRIVATE KEY-----",
        "xoxb-",
        "glpat-",
        "eyJhbGciOiJIUzI1NiJ9.",
        "é",
        "\\n",
        "%40",
    ]
)


@settings(max_examples=150, deadline=None)
@given(pieced(_PIECES, noise=12, max_pieces=12))
def test_parts_find_what_one_alternation_finds_on_any_text(text: str) -> None:
    """On text pieced from secrets, keys, separators and noise, every candidate matches."""
    assert _differences([text.encode("utf-8", "surrogatepass")]) == []
