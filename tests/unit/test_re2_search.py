"""RE2 searches without the wrapper (worker/redaction/search.py) answer what google-re2's own
`search` and `finditer` answer, for every regex the scanner runs them with."""

from __future__ import annotations

import re

import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import pieced
from worker.redaction import configs, encoded, scanner
from worker.redaction.search import group, leftmost, match_at, match_spans

REGEXES = {
    "keyword": configs._KEYWORD,
    "one_line": configs._ONE_LINE,
    "markers": configs._MARKERS,
    "escape_hint": encoded._HINT,
    "base64_run": scanner._BASE64_RUN,
    "base64_run_strict": scanner._BASE64_RUN_STRICT,
    **{
        f"lane {i} part {j}": part.regex
        for i, lane in enumerate(scanner.strict_rules().lanes)
        for j, part in enumerate(lane.parts)
    },
}

# what the regexes look for, and what breaks their runs
_PIECES = st.sampled_from(
    ["password", "Token", "auth", "key=", "pw ", ":", "::", "@", "://u:p@h", "\n", " ", "\t", "=", "==",
     "+/", "-_", "AKIA", "ghp_", "eyJ", "0123456789", "QWxhZGRpbjpvcGVuIHNlc2FtZQ", "é", "\u2192", "中",
     "%2F", "%4", "%zz", "\\n", "\\\\", "\\u00e9", "\\x", "master.key", "stringData:"]
)  # fmt: skip
_TEXTS = pieced(_PIECES, noise=5, max_pieces=40).map(lambda text: text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(REGEXES)), _TEXTS, st.integers(0, 200))
def test_the_searches_answer_as_the_wrapper(name: str, data: bytes, pos: int) -> None:
    """Every match's span, and the first match from any position, as finditer and search give them."""
    regex: re2._Regexp = REGEXES[name]
    pos = min(pos, len(data))
    found = regex.search(data, pos)
    assert match_spans(regex, data) == [m.span() for m in regex.finditer(data)]
    assert leftmost(regex, data, pos) == (None if found is None else found.start())


def test_no_match_and_a_match_at_the_end() -> None:
    """A text without a match gives none; a match that ends the text is found, once."""
    assert match_spans(configs._KEYWORD, b"nothing here") == []
    assert leftmost(configs._KEYWORD, b"nothing here") is None
    assert match_spans(configs._KEYWORD, b"a token") == [(2, 7)]
    assert leftmost(configs._KEYWORD, b"a token", 3) is None


_PYTHON_HINT = re.compile(rb"%[0-9A-Fa-f]{2}|\\[\"\\/bfnrtu]")


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_the_escape_hint_answers_as_pythons_re(data: bytes) -> None:
    """may_hide_secrets (RE2) says what the hint said when Python's re searched for it."""
    assert encoded.may_hide_secrets(data) == (_PYTHON_HINT.search(data) is not None)


OWN = {
    f"{d.name} {i}": own
    for lane in scanner.strict_rules().lanes
    for part in lane.parts
    for i, (d, own) in enumerate(zip(part.detectors, part.own, strict=True))
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(OWN)), _TEXTS, st.integers(0, 200), st.booleans())
def test_a_match_at_a_position_answers_as_the_wrappers_match(
    name: str, data: bytes, pos: int, at_a_match: bool
) -> None:
    """Every group's span and bytes, as `match(data, pos)` gives them (None: no match there); at
    any position, and where the regex's first match in the text starts."""
    regex = OWN[name]
    found = regex.search(data) if at_a_match else None
    pos = found.start() if found is not None else min(pos, len(data))
    m = regex.match(data, pos)
    spans = match_at(regex, data, pos)
    if m is None:
        assert spans is None
    else:
        assert found is None or spans[0][0] == found.start()
        assert spans == [m.span(k) for k in range(regex.groups + 1)]
        assert [group(data, s) for s in spans] == [m.group(k) for k in range(regex.groups + 1)]
