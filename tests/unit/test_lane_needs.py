"""A lane is skipped where its prefilter finds none of the strings its detectors need
(worker/redaction/needs.py): every text any detector of the lane matches holds one of them, so
skipping changes no finding."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import PLANTED_SECRETS, pieced
from tests.unit.test_scanner_lanes import planted_texts
from worker.redaction.needs import PREFILTER_STRINGS, prefilter, required
from worker.redaction.scanner import ALL, Ruleset, scan_bytes, strict_rules
from worker.redaction.search import leftmost

STRICT = strict_rules()
LANES = STRICT.lanes
B = "\ue000"  # how required() writes a `\b` inside a string


@pytest.mark.parametrize(
    ("pattern", "needs"),
    [
        ("key=", {"key="}),
        ("(?i:Pass|pwd)x", {"passx", "pwdx"}),
        ("p(?:ass|wd)", {"pass", "pwd"}),
        ("a?bc", {"bc"}),
        (r"\bpw\b", {f"{B}pw{B}"}),
        ("ab[cd]", {"abc", "abd"}),
        ("[A-Za-z]+=x", {"=x"}),
        ("(?:foo)+|bar", {"foo", "bar"}),
        ("ab|c*", None),
        ("x*", None),
        ("[A-Z]{2,}", None),
        ("[[:alpha:]]x", None),
        (r"\Qa\E", None),
    ],
)
def test_what_a_pattern_needs(pattern: str, needs: set[str] | None) -> None:
    """Runs of literals joined through small alternations; what is optional or a class needs nothing."""
    assert required(pattern) == (None if needs is None else frozenset(needs))


@cache
def _needs(k: int) -> re2._Regexp | None:
    return LANES[k].needs


def _detectors(k: int) -> list[tuple[str, re2._Regexp]]:
    return [(d.name, _own(d.pattern)) for part in LANES[k].parts for d in part.detectors]


@cache
def _own(pattern: str) -> re2._Regexp:
    options = re2.Options()
    options.max_mem = 64 << 20
    return re2.compile(pattern.encode(), options)


def _unneeded(texts: list[bytes]) -> list[tuple[int, str, bytes]]:
    """(lane, detector, text) where a detector matches a text its lane's prefilter passes over."""
    return [
        (k, name, t[:80])
        for t in texts
        for k in range(len(LANES))
        if (needs := _needs(k)) is not None and leftmost(needs, t) is None
        for name, own in _detectors(k)
        if own.search(t) is not None
    ]


def test_lanes_with_few_needed_strings_have_a_prefilter() -> None:
    """The keyword lanes have one; the vendor lane, whose detectors need hundreds, has none."""
    assert [lane.needs is not None for lane in ALL.lanes] == [False, True, True]
    assert prefilter(["a", "b"], re2.Options()) is not None
    assert prefilter([f"x{i}" for i in range(PREFILTER_STRINGS + 1)], re2.Options()) is None
    assert prefilter(["a", "b*"], re2.Options()) is None


@pytest.mark.data
def test_no_detector_matches_where_its_lane_needs_nothing_found(shared_data: Path) -> None:
    """Every planted sample, whole and cut in two inside its secret: a detector matches only texts
    its lane's prefilter finds a string in (and the lanes with a prefilter match many samples)."""
    texts = planted_texts()
    matched = {k for t in texts for k in range(len(LANES)) for _, own in _detectors(k) if own.search(t)}
    assert {k for k in range(len(LANES)) if _needs(k) is not None} <= matched
    assert _unneeded(texts) == []


_PIECES = st.sampled_from(
    [
        *PLANTED_SECRETS,
        "password = ",
        "PASSWD: ",
        "pa\u017fsword=",  # a long s, which RE2's (?i) reads as an s
        "\u212aey = ",  # the Kelvin sign, a k to RE2's (?i)
        "token: ",
        "Bearer ",
        "login(",
        "user=",
        "value=",
        "--pat ",
        "\n",
        " ",
        '"',
        "'",
        "=",
        ",",
        "->",
        "(",
        "é",
        "\\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(pieced(_PIECES, noise=10, max_pieces=12))
def test_no_detector_matches_where_its_lane_needs_nothing_found_on_any_text(text: str) -> None:
    """On text pieced from secrets, keys (in any case), separators and noise."""
    assert _unneeded([text.encode("utf-8", "surrogatepass")]) == []


def _without_prefilters(rules: Ruleset) -> Ruleset:
    return replace(rules, lanes=tuple(replace(lane, needs=None) for lane in rules.lanes))


@settings(max_examples=150, deadline=None)
@given(pieced(_PIECES, noise=10, max_pieces=12), st.sampled_from([ALL, STRICT]))
def test_the_scan_is_the_same_without_prefilters(text: str, rules: Ruleset) -> None:
    """scan_bytes finds the same spans with the lanes' prefilters as without them."""
    data = text.encode("utf-8", "surrogatepass")
    assert scan_bytes(data, rules) == scan_bytes(data, _without_prefilters(rules))
