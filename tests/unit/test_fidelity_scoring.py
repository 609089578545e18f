"""The fidelity scorer the policy and fidelity benches use (ops/bench/fidelity.py): a path counts as
kept when the prompt shows it, whole or relative to a root a handoff note states."""

from __future__ import annotations

from ops.bench.fidelity import kept_share

ITEMS = {
    "files": ["/home/u/proj/app/lib/router.ex", "/home/u/proj/app/test/helper.exs"],
    "commands": ["mix test"],
    "instructions": [],
    "errors": [],
}


def test_whole_paths_and_commands_are_found() -> None:
    """Items found verbatim count as kept, per kind and overall."""
    text = "ran mix test; edited /home/u/proj/app/lib/router.ex"
    assert kept_share(ITEMS, text) == {
        "files": "1/2",
        "commands": "1/1",
        "instructions": "0/0",
        "errors": "0/0",
        "all": 0.667,
    }


def test_a_path_written_under_the_root_a_note_states_is_kept() -> None:
    """Paths a handoff note writes relative to the root it states count as kept."""
    note = "File paths below are relative to /home/u/proj/\n## Files edited\n- app/lib/router.ex\n- app/test/helper.exs"
    assert kept_share(ITEMS, note + "\nmix test")["all"] == 1.0


def test_a_relative_path_without_its_root_stated_is_not_kept() -> None:
    """A relative path counts only under a stated root that holds it: no root, or another one, is not
    kept."""
    assert kept_share(ITEMS, "- app/lib/router.ex\n- app/test/helper.exs\nmix test")["files"] == "0/2"
    other_root = "File paths below are relative to /srv/other/\n- app/lib/router.ex"
    assert kept_share(ITEMS, other_root)["files"] == "0/2"
