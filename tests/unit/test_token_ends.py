"""A text's tokens split at a newline before a visible ASCII character: the tokens of the two parts
are the tokens of the whole, so `end_ids` (Clip's head and tail) equals slicing the whole's ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import transcript_files
from tests.strategies import pieced
from worker.compaction.formats import load_transcript
from worker.compaction.model import block_text
from worker.compaction.tokens import _cut_after, encoding, end_ids, head_text


def _ids(text: str) -> list[int]:
    return encoding().encode_ordinary(text)


def _split_problems(text: str, most: int = 1_000) -> list[int]:
    """Cut points (`most` of them, spread over the text) where the parts' tokens differ from the
    whole's."""
    cuts, at = [], 0
    while (cut := _cut_after(text, at)) is not None:
        cuts.append(cut)
        at = cut
    whole = _ids(text)
    return [c for c in cuts[:: max(1, len(cuts) // most)] if _ids(text[:c]) + _ids(text[c:]) != whole]


def _ends_problem(text: str, head: int, tail: int) -> bool:
    ends, ids = end_ids(text, head, tail), _ids(text)
    whole_head = text if len(ids) <= head else encoding().decode(ids[:head])
    return (ends is not None and ends != (ids[:head], ids[-tail:])) or head_text(text, head) != whole_head


_PIECES = st.sampled_from(
    ["\n", "\r\n", " \n", "\n\n", "  ", "\t", "x", "Word", "'s", "'LL", "123456", "é", "\u00a0", "\u2028",
     "\u3000", "\x0b", "\x85", "!", "}", "#", "-", "\u4e2d\u6587", "\U0001f600", ".\n", "\n ", "\n\t"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(pieced(_PIECES, noise=6, max_pieces=40))
def test_tokens_split_at_every_cut_point(text: str) -> None:
    """Newlines, every kind of space, letters, digits, contractions and symbols around the cut."""
    assert _split_problems(text) == []


@settings(max_examples=100, deadline=None)
@given(pieced(_PIECES, noise=8, min_pieces=50, max_pieces=400), st.integers(1, 40))
def test_end_ids_and_head_text_are_the_whole_texts(text: str, n: int) -> None:
    """Whenever end_ids answers, it answers what slicing the whole text's ids answers; head_text
    is the whole's first ids decoded."""
    assert not _ends_problem(text, n, n + 3)


@pytest.mark.data
def test_end_ids_on_every_long_output_of_the_shared_transcripts(shared_data: Path) -> None:
    """Every text of 2,000+ characters in the shared transcripts: split, ends and head as for the whole."""
    texts = [
        block_text(b)
        for path in transcript_files()
        for m in load_transcript(path).messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict)
    ]
    long = [t for t in texts if len(t) >= 2_000]
    assert len(long) > 50
    assert not [t[:80] for t in long if _split_problems(t, most=10) or _ends_problem(t, 300, 200)]
