"""The config-format corpus (tests/data/configs): every credential line caught under standard."""

from __future__ import annotations

from ops.bench.configs import BEFORE, load, score
from worker.redaction.scanner import ALL


def test_every_credential_line_of_every_format_is_caught() -> None:
    """Under the standard profile no credential in a credential position is left, in any format."""
    files = load()
    assert len(files) >= 40
    rows = score(ALL, files)
    missed = [line for row in rows for line in row["missed"]]
    assert not missed, f"{len(missed)} credential lines missed:\n" + "\n".join(missed)


def test_config_positions_change_no_near_miss() -> None:
    """References, placeholders, key ids, paths and code lines come through as the other rules leave them."""
    files = load()
    before = {line for row in score(BEFORE, files) for line in row["changed_lines"]}
    now = [line for row in score(ALL, files) for line in row["changed_lines"]]
    added = [line for line in now if line not in before]
    assert not added, f"{len(added)} near-miss lines changed:\n" + "\n".join(added)
