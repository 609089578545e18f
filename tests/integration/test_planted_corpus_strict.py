"""The planted corpus under the strict profile: every sample, every encoding, found nowhere.

The check is test_planted_corpus.py's; this file only gives the strict profile a file of its own, so
that `make test` (pytest-xdist, a file per worker at a time) runs the two profiles side by side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_planted_corpus import ENCODINGS, check_planted


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_strict_planted_samples_appear_nowhere(tmp_path: Path, encoding: str) -> None:
    """The strict profile lists no leak (test_the_strict_profile_lists_no_leak): none is allowed."""
    check_planted(tmp_path, "strict", encoding)
