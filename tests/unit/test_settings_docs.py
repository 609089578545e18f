"""docs/configuration.md's table and `Settings` agree: the table is what ops/settings_table.py
generates from Settings, and read back it names every setting, its default, and nothing else."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from ops import settings_table
from tests.conftest import REPO
from worker.settings import Settings

# a default the table describes in words: what happens when the setting is unset
UNSET_WORDS = ("embedded", "generated", "unset", "same as")
NAME = re.compile(r"`([A-Z][A-Z0-9_]*)`")


def table_rows() -> list[tuple[list[str], list[str]]]:
    """(names, defaults) of each row of docs/configuration.md's table, in the table's own spelling."""
    section = (REPO / "docs" / "configuration.md").read_text().split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows]
    return [(NAME.findall(c[0]), [d.strip() for d in c[1].split(" / ")]) for c in cells]


def documented() -> dict[str, str]:
    out: dict[str, str] = {}
    for names, defaults in table_rows():
        assert len(names) == len(defaults), f"{names}: one default per setting, separated by ' / '"
        out |= dict(zip(names, defaults, strict=True))
    return out


def matches(text: str, default: Any) -> bool:
    """Whether the table's default cell says `default`."""
    value = re.sub(r"\s*\(.*\)$", "", text).strip("`")
    if default is None:
        return value.startswith(UNSET_WORDS)
    if isinstance(default, Path):
        return Path(value.replace("<venv>", sys.prefix)) == default
    if isinstance(default, int | float):
        number = value.replace(",", "").removesuffix(" MiB")
        scale = 1024**2 if value.endswith(" MiB") else 1
        return re.fullmatch(r"[0-9.]+", number) is not None and float(number) * scale == default
    return bool(value == default)


def test_every_setting_is_in_the_docs_and_nothing_else() -> None:
    """The table names exactly Settings' fields (COMPACTD_ prefix left off, as the table says)."""
    assert set(documented()) == {name.upper() for name in Settings.model_fields}


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_the_docs_state_each_default(name: str) -> None:
    """Each setting's documented default is its default in Settings."""
    cell = documented().get(name.upper(), "")
    assert matches(cell, Settings.model_fields[name].default), (
        f"{name.upper()}: docs/configuration.md says {cell!r}"
    )


def test_the_docs_table_is_the_generated_one() -> None:
    """The block between the markers is exactly what `python -m ops.settings_table` prints."""
    text = (REPO / "docs" / "configuration.md").read_text()
    assert settings_table.in_doc(text) == settings_table.block(), (
        "docs/configuration.md's settings table is stale: run `python -m ops.settings_table --write`"
    )


def test_a_hand_edited_default_is_caught() -> None:
    """The comparison can fail: a default changed by hand in the block no longer matches."""
    text = (REPO / "docs" / "configuration.md").read_text()
    edited = text.replace("| 200,000 / 8,192 |", "| 100,000 / 8,192 |")
    assert edited != text
    assert settings_table.in_doc(edited) != settings_table.block()


def test_every_setting_is_in_exactly_one_row() -> None:
    listed = [name for names, _ in settings_table.ROWS for name in names]
    assert sorted(listed) == sorted(Settings.model_fields)


def test_an_unset_default_needs_words() -> None:
    """A new setting defaulting to None must say in words what unset means."""
    with pytest.raises(ValueError, match="needs words"):
        settings_table.shown("new_setting", None)
