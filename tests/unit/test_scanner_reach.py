"""Long values are read by their head, and that finds what reading them whole finds.

The scanner matches a detector to `_MATCH_REACH` bytes first and searches `_NEAR` bytes ahead
first (worker/redaction/scanner.py), a long line's parts join up to `_LONGEST_PART`
(lines.py), and the config pairs judge a long unquoted value by its first `_JUDGED_HEAD`
characters (configs/pairs.py): in one long blank-free run of keys every value runs to the end of
the run, and reading it whole per key was quadratic (`python -m ops.bench worst`). These tests
hold the bounded reading to the unbounded one, and a secret longer than every bound to being
redacted whole.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.redaction import lines, scanner
from worker.redaction.configs import pairs
from worker.redaction.scanner import find_spans, scan_bytes

_FAR = 10**9


@contextmanager
def unbounded() -> Iterator[None]:
    """Every bound lifted: values matched, searched and judged whole."""
    with (
        patch.object(scanner, "_MATCH_REACH", _FAR),
        patch.object(scanner, "_NEAR", _FAR),
        patch.object(lines, "_LONGEST_PART", _FAR),
        patch.object(pairs, "_JUDGED_HEAD", _FAR),
        patch.object(pairs, "_CODE_READ", _FAR),
    ):
        yield


def _token(seed: int, size: int) -> str:
    rng = random.Random(seed)
    return "".join(
        rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(size)
    )


def _pem(seed: int, size: int) -> str:
    body = base64.b64encode(random.Random(seed).randbytes(size)).decode()
    rows = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{rows}\n-----END RSA PRIVATE KEY-----"


# pieces of text that make keys, long values, blank-free runs and key blocks
PIECES = st.one_of(
    st.sampled_from(
        [
            "token=",
            "a.key=",
            "secrets=(",
            "password: ",
            "--api-token=",
            '"secret":"',
            "encryption_key:\n",
            "\n  ",
            " ",
            "\n",
            ",",
            ";",
            "&",
            "x",
            "(",
        ]
    ),
    st.builds(lambda seed: random.Random(seed).randbytes(32).hex(), st.integers(0, 10**6)),
    st.builds(_token, st.integers(0, 10**6), st.integers(1, 3_000)),
    st.builds(_pem, st.integers(0, 10**6), st.sampled_from([600, 1_200, 2_400])),
)


def _covered(spans: list[tuple[str, int, int]]) -> set[int]:
    return {i for _, s, e in spans for i in range(s, e)}


@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=40))
def test_bounded_reading_redacts_all_that_whole_reading_does(pieces: list[str]) -> None:
    """Every byte whole reading redacts, bounded reading redacts (it may take more: a long value's
    head can read as a secret where its end reads as prose, `token=password: …password:`)."""
    data = "".join(pieces).encode()
    bounded = _covered(find_spans(data))
    with unbounded():
        whole = _covered(find_spans(data))
    assert whole <= bounded


def test_a_secret_longer_than_every_bound_is_redacted_whole() -> None:
    """A 5 KB token after `token=` inside a 60 KB blank-free run of keys, and an RSA-8192-sized key
    block: each found from its first byte to its last."""
    token = _token(1, 5_000)
    text = "a.key=b" * 4_000 + " token=" + token + " " + _pem(2, 4_800)
    data = text.encode()
    spans = find_spans(data)
    t = data.index(token.encode())
    assert any(s <= t and t + len(token) <= e for _, s, e in spans)
    begin = data.index(b"-----BEGIN RSA")
    assert any(s <= begin and len(data) <= e for _, s, e in spans)


def test_a_key_block_escaped_onto_one_line_is_one_secret() -> None:
    """A JSON string holding a 2 KB key block (`\\r\\n` escapes, no line break): its match runs past
    the reach and the pattern's own match is read on to the END line: the scanner finds one span,
    not a head (and a tail left to the other passes)."""
    key = _pem(3, 1_500).replace("\n", "\\r\\n")
    data = ('{"key": "' + key + '"}').encode()
    begin, end = data.index(b"-----BEGIN"), data.index(b'"}')
    assert [(s, e) for _, s, e in scan_bytes(data)] == [(begin, end)]


ROWS = [random.Random(n).randbytes(32).hex() for n in range(5)]  # hex: no other reader takes a row


def test_a_block_value_past_the_reach_is_read_whole() -> None:
    """An indented value of several lines (YAML, an INI continuation) whose lines pass the reach:
    its match ends at a line break before the cut, and is read on all the same (an independent
    review found the last rows left)."""
    for head in ("encryption_key:\n", "[crypto]\nmaster_key =\n"):
        data = (head + "".join(f"  {row}\n" for row in ROWS)).encode()
        out = data
        for _, s, e in reversed(find_spans(data)):
            out = out[:s] + b"X" + out[e:]
        assert not any(row.encode() in out for row in ROWS), out
