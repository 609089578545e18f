"""o200k_base (the GPT-4o and GPT-5 families' encoding) counted offline by quicktok: its vocabulary,
written as a .tiktoken file, is byte for byte the official one (the sha256 tiktoken checks), and its
counts equal tiktoken's on that vocabulary with tiktoken's own o200k_base definition, for real and
generated text. The OpenAI stand-in enforces windows with it (tests/fakes/openai_api.py)."""

from __future__ import annotations

import base64
import hashlib
from unittest import mock

import pytest
import quicktok
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from tests.conftest import data_dir, require

# tiktoken_ext/openai_public.py: the official file's sha256, checked by tiktoken when it loads it
OFFICIAL_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
COUNTER = quicktok.get_encoding("o200k_base")


@pytest.fixture(scope="module")
def ranks() -> dict[bytes, int]:
    """quicktok's vocabulary: ids 0 to 199,997 (the specials come after)."""
    return {COUNTER.decode_single_token_bytes(i): i for i in range(199_998)}


@pytest.fixture(scope="module")
def reference(ranks: dict[bytes, int]) -> tiktoken.Encoding:
    """tiktoken's own o200k_base definition (pattern, specials) over that vocabulary, no download."""
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value=ranks):
        spec = openai_public.o200k_base()
    return tiktoken.Encoding(**spec)


def test_the_vocabulary_is_the_official_file(ranks: dict[bytes, int]) -> None:
    """Written as a .tiktoken file (base64 token, rank, per line), it has the official sha256."""
    text = b"".join(base64.b64encode(t) + b" %d\n" % i for t, i in sorted(ranks.items(), key=lambda x: x[1]))
    assert len(ranks) == 199_998
    assert hashlib.sha256(text).hexdigest() == OFFICIAL_SHA256


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_counts_equal_tiktokens_on_generated_text(reference: tiktoken.Encoding, text: str) -> None:
    """For any text (lone surrogates aside: tiktoken repairs them first), the same count."""
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert COUNTER.count(text) == len(reference.encode_ordinary(text))


def test_counts_equal_tiktokens_on_the_shared_transcripts(reference: tiktoken.Encoding) -> None:
    """Every shared transcript file, whole and line by line: the same count."""
    root = data_dir() / "transcripts"
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
    require(bool(files), f"needs the shared transcripts under {root} (make data)")
    wrong = []
    for path in files:
        text = path.read_text(errors="replace")
        pieces = [text, *text.splitlines()[:400]]
        wrong += [path.name for p in pieces if COUNTER.count(p) != len(reference.encode_ordinary(p))][:1]
    assert wrong == []
