"""`make test`'s file order: the longest files first (tests/conftest.py LONGEST_FIRST)."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, REPO


def test_every_file_named_longest_first_exists_once() -> None:
    """A renamed or removed file would silently drop out of the order: it must be named anew."""
    files = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    assert [n for n in LONGEST_FIRST if n not in files] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
