"""Cheap checks in front of costlier searches say no only where the search would find nothing:
each is a necessary condition of the pattern it guards (worker/redaction)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import pieced
from worker.redaction import manifests, redact
from worker.redaction.configs import pairs

_MANIFEST_PIECES = st.sampled_from(
    [
        "kind: Secret",
        "KIND: SECRET",
        "Kind:\t'secret'",
        "kind: ConfigMap",
        "secret",
        "data:",
        "\n",
        "  ",
        '"}',
        "ſecret",
        "K",
    ]
)


@settings(max_examples=300, deadline=None)
@given(pieced(_MANIFEST_PIECES, noise=6, max_pieces=12))
def test_the_manifest_guard_passes_every_text_the_kind_pattern_matches(text: str) -> None:
    """A text where `kind: Secret` is found (any ASCII case) holds `kind` and `secret`."""
    data = text.encode("utf-8", "surrogatepass")
    if manifests._KIND_SECRET.search(data) is not None:
        assert manifests._may_name_a_secret(data)
    assert not manifests._may_name_a_secret(b"kind: ConfigMap\ndata:\n")


_NETRC_PIECES = st.sampled_from(
    [
        "machine h ",
        "login ",
        "user ",
        "username ",
        "password ",
        "passwd ",
        "PASSWORD ",
        "'p w'",
        "x",
        " ",
        "\t",
    ]
)


@settings(max_examples=300, deadline=None)
@given(pieced(_NETRC_PIECES, noise=6, max_pieces=10))
def test_the_netrc_guard_passes_every_line_the_netrc_pattern_matches(line: str) -> None:
    """A line the netrc pattern matches names `password` or `passwd`; the guard never hides one."""
    if pairs._NETRC.search(line) is not None:
        assert "passw" in line


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.sampled_from(["type", "file_path", "tool_use_id", "AKIAIOSFODNN7EXAMPLE", "a b", ""]),
        st.text(max_size=12),
    )
)
def test_word_keys_are_what_the_word_pattern_says_and_only_they_are_kept(key: str) -> None:
    """The remembered answer is the pattern's; a key that is no word is never kept."""
    assert redact._is_word_key(key) == (redact._WORD_KEY.fullmatch(key) is not None)
    assert redact._is_word_key(key) == (redact._WORD_KEY.fullmatch(key) is not None)
    assert all(redact._WORD_KEY.fullmatch(k) for k in redact._word_keys)
