"""The working-memory model: operations table, refusals naming their field and op, and properties
(any valid sequence renders within budget; events replay the items exactly, one per change)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.compaction.tokens import count_text
from worker.memory.model import (
    MAX_FILES,
    RESOLVABLE,
    SECTIONS,
    SINGLE,
    Change,
    Item,
    MemoryOpError,
    apply,
    key_of,
    owned,
    render,
)

T0 = datetime(2026, 1, 1, 12, 0, 0)


def run(
    *changes: Change, items: tuple[Item, ...] = (), origin: str = "agent"
) -> tuple[tuple[Item, ...], tuple]:
    applied = apply(items, changes, origin=origin, now=T0)
    return applied.items, applied.events


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([Change("set", "task", "Fix the bug")], {("task", "task"): ("Fix the bug", "open")}),
        (
            [Change("set", "task", "a"), Change("set", "task", "b")],
            {("task", "task"): ("b", "open")},
        ),
        (
            [
                Change("add", "blockers", "1 failed", key="pytest"),
                Change("resolve", "blockers", key="pytest"),
            ],
            {("blockers", "pytest"): ("1 failed", "resolved")},
        ),
        (
            [Change("add", "decisions", "Use SQLite"), Change("remove", "decisions", key="use-sqlite")],
            {},
        ),
        (
            [Change("add", "important_files", " src/a.py ")],
            {("important_files", "src/a.py"): ("src/a.py", "open")},
        ),
        ([Change("set", "notes", "v", key="k")], {("notes", "k"): ("v", "open")}),
    ],
)
def test_operations_leave_the_expected_items(changes: list[Change], expected: dict) -> None:
    """Each operation table row leaves exactly the expected (value, status) per item."""
    items, _ = run(*changes)
    assert {(i.section, i.key): (i.value, i.status) for i in items} == expected


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Change("set", "todo", "x"), "section"),
        (Change("upsert", "notes", "x", key="k"), "op"),  # type: ignore[arg-type]
        (Change("add", "decisions", "   "), "value"),
        (Change("remove", "notes", key="missing"), "key"),
        (Change("resolve", "task"), "op"),
        (Change("remove", "decisions"), "key"),
    ],
)
def test_a_refused_change_names_its_field_and_its_index(bad: Change, field: str) -> None:
    """A change that cannot apply raises MemoryOpError with the field and the change's index in the batch."""
    with pytest.raises(MemoryOpError) as err:
        run(Change("set", "task", "ok"), bad)
    assert (err.value.field, err.value.index) == (field, 1)


def test_setting_the_same_value_again_records_nothing_but_refreshes_referenced_at() -> None:
    """A re-set of an unchanged open item is no change (no event) and only moves referenced_at."""
    items, _ = run(Change("set", "task", "t"))
    later = apply(items, [Change("set", "task", "t")], origin="agent", now=T0 + timedelta(hours=1))
    assert later.events == () and later.items[0].referenced_at == T0 + timedelta(hours=1)


def test_pinned_none_keeps_the_flag_and_an_explicit_flag_changes_it() -> None:
    """Change.pinned None keeps an item's pin; True/False set it (and that is a change)."""
    items, _ = run(Change("set", "notes", "v", key="k", pinned=True))
    kept, events = run(Change("set", "notes", "w", key="k"), items=items)
    assert kept[0].pinned and len(events) == 1
    unpinned, events = run(Change("set", "notes", "w", key="k", pinned=False), items=kept)
    assert not unpinned[0].pinned and len(events) == 1


def test_more_than_seven_files_retire_the_oldest_with_a_recorded_removal() -> None:
    """Adding an eighth file removes the least recently touched one and records why."""
    items: tuple[Item, ...] = ()
    for n in range(MAX_FILES + 1):
        items = apply(
            items, [Change("add", "important_files", f"f{n}.py")], origin="observed", now=T0 + timedelta(n)
        ).items
    assert len(items) == MAX_FILES and "f0.py" not in {i.key for i in items}


SECTION = st.sampled_from(SECTIONS)
VALUE = st.text(alphabet="abc xyz/._-0123456789", min_size=1, max_size=80).filter(str.strip)
KEY = st.sampled_from(["k1", "k2", "k3", "src/a.py", "pytest -x"])


@st.composite
def valid_change(draw: st.DrawFn, items: dict[tuple[str, str], Item]) -> Change:
    """A change that applies to `items`: set/add anything, or remove/resolve an existing item."""
    existing = sorted(items)
    resolvable = [k for k in existing if k[0] in RESOLVABLE]
    kinds = ["set", "add"] + (["remove"] if existing else []) + (["resolve"] if resolvable else [])
    op = draw(st.sampled_from(kinds))
    if op == "remove":
        section, key = draw(st.sampled_from(existing))
        return Change("remove", section, key=key)
    if op == "resolve":
        section, key = draw(st.sampled_from(resolvable))
        return Change("resolve", section, key=key)
    section = draw(SECTION)
    key = None if section in SINGLE else draw(st.one_of(st.none(), KEY))
    return Change(op, section, draw(VALUE), key=key, pinned=draw(st.one_of(st.none(), st.booleans())))  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(), budget=st.integers(min_value=20, max_value=800), n=st.integers(min_value=1, max_value=25)
)
def test_any_valid_sequence_renders_within_budget_and_events_replay_exactly(
    data: st.DataObject, budget: int, n: int
) -> None:
    """Any sequence of valid changes: render() fits the budget, and each applied change's events,
    replayed in order (before must match, after becomes the value), rebuild the items exactly;
    an item with no net change has no event, and every event changes something."""
    items: dict[tuple[str, str], Item] = {}
    for step in range(n):
        change = data.draw(valid_change(items))
        now = T0 + timedelta(minutes=step)
        applied = apply(tuple(items.values()), [change], origin="agent", now=now)
        replayed = {k: (i.value, i.status) for k, i in items.items()}
        for ev in applied.events:
            ident = (ev.section, ev.key)
            assert replayed.get(ident, (None, None))[0] == ev.before
            if ev.after is None:
                del replayed[ident]
            else:
                replayed[ident] = (ev.after, ev.status)
        after = {(i.section, i.key): i for i in applied.items}
        assert replayed == {k: (i.value, i.status) for k, i in after.items()}
        changed = {k for k in after.keys() | items.keys() if items.get(k) != after.get(k)}
        touched = {(e.section, e.key) for e in applied.events}
        referenced_only = {
            k
            for k in changed
            if k in items
            and k in after
            and items[k].referenced_at != after[k].referenced_at
            and (items[k].value, items[k].status, items[k].pinned)
            == (after[k].value, after[k].status, after[k].pinned)
        }
        assert changed - referenced_only <= touched
        if change.key is not None or change.section in SINGLE:
            assert (
                len([e for e in applied.events if (e.section, e.key) == (change.section, key_of(change))])
                <= 1
            )
        items = after
        assert count_text(render(tuple(items.values()), budget)) <= budget


def test_a_model_names_items_by_what_the_block_shows() -> None:
    """The tool's key may be a question's text or a file line with its counts: both name the item."""
    question = "Should the parser accept tabs?"
    items, _ = run(Change("add", "open_questions", question), Change("add", "important_files", "src/app.py"))
    items, events = run(
        Change("resolve", "open_questions", key=question),
        Change("remove", "important_files", key="src/app.py — edited 3×, read 1×"),
        items=items,
    )
    assert [(e.op, e.section) for e in events] == [
        ("resolve", "open_questions"),
        ("remove", "important_files"),
    ]
    assert [i.section for i in items] == ["open_questions"] and items[0].status == "resolved"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=30), st.integers(20, 300))
def test_the_changes_note_stays_within_its_budget(values: list[str], budget: int) -> None:
    from worker.memory.model import changes_note

    after, _ = run(
        *[Change("add", "decisions", v) for v in values if v.strip()] or [Change("set", "task", "t")]
    )
    note = changes_note((), after, budget)
    assert count_text(note) <= budget


def test_owned_keeps_only_changes_to_items_of_the_same_origin_or_new_ones() -> None:
    """An observation may add items or change its own; an item the agent set is left out, and an
    invalid change is kept for apply() to refuse."""
    items, _ = run(Change("add", "blockers", "mine", key="pytest"), Change("set", "task", "t"))
    theirs = apply(items, [Change("add", "blockers", "seen", key="make")], origin="observed", now=T0).items
    changes = [
        Change("set", "blockers", "x", key="pytest"),
        Change("resolve", "blockers", key="make"),
        Change("set", "task", "other"),
        Change("add", "decisions", "Use SQLite"),
        Change("remove", "notes"),
    ]
    assert owned(theirs, changes, "observed") == [changes[1], changes[3], changes[4]]


def _files_then(change: Change, origin: str, reason: str) -> tuple[str, list[str]]:
    """Seven observed important files (a.py oldest), then one more change: the changes note's lines."""
    from worker.memory.model import changes_note, pushed_out

    pinned: tuple[Item, ...] = ()
    for i, name in enumerate("abcdefg"):
        pinned = apply(
            pinned,
            [Change("add", "important_files", f"src/{name}.py")],
            origin="observed",
            now=T0 + timedelta(seconds=i),
        ).items
    applied = apply(pinned, [change], origin=origin, now=T0 + timedelta(minutes=1), reason=reason)
    return changes_note(pinned, applied.items, 800, pushed_out(applied.events)), [
        e.reason for e in applied.events
    ]


def test_an_important_file_pushed_out_by_an_eighth_gets_no_line() -> None:
    """The eighth file retires the oldest (ranking churn): the note says what is new, not what left."""
    note, reasons = _files_then(
        Change("add", "important_files", "src/h.py"), "observed", "observed in turn 9"
    )
    assert reasons[-1] == "observed in turn 9: more than 7 files"
    assert note.splitlines()[1:] == ["+ Important files: src/h.py"]


@pytest.mark.parametrize(
    ("origin", "reason"),
    [("user", ""), ("agent", ""), ("observed", "observed in turn 9: deleted (Bash)")],
)
def test_an_important_file_removed_deleted_or_moved_keeps_its_line(origin: str, reason: str) -> None:
    """A user's or the agent's removal, or a file the agent deleted: the pinned block still lists it,
    so the note says it is gone."""
    note, _ = _files_then(Change("remove", "important_files", key="src/c.py"), origin, reason)
    assert note.splitlines()[1:] == ["- Important files (removed): src/c.py"]


def test_pushed_out_takes_the_last_removal_of_each_file() -> None:
    """A file pushed out, then added back and deleted, is not churn."""
    from worker.memory.model import Event, pushed_out

    def ev(key: str, after: str | None, reason: str) -> Event:
        return Event(
            "remove" if after is None else "add", "important_files", key, None, after, "observed", reason
        )

    events = [
        ev("a.py", None, "observed in turn 3: less relevant than the files kept"),
        ev("b.py", None, "observed in turn 3: more than 7 files"),
        ev("a.py", "a.py", "observed in turn 4"),
        ev("a.py", None, "observed in turn 5: deleted (Bash)"),
    ]
    assert pushed_out(events) == {"b.py"}


def _observed(items: tuple[Item, ...], *changes: Change, minutes: int = 1) -> tuple[Item, ...]:
    return apply(items, changes, origin="observed", now=T0 + timedelta(minutes=minutes)).items


def test_new_observed_files_are_one_line_of_paths_and_their_counts_get_no_line() -> None:
    """The note names the files that are new, not how often each was read or edited."""
    from worker.memory.model import changes_note

    pinned = _observed((), Change("set", "important_files", "src/a.py — read 1×", key="src/a.py"))
    now = _observed(
        pinned,
        Change("set", "important_files", "src/a.py — edited 1×, read 1×", key="src/a.py"),
        Change("set", "important_files", "src/b.py — read 2×", key="src/b.py"),
        Change("set", "important_files", "src/c.py — created 1×", key="src/c.py"),
    )
    assert changes_note(pinned, now, 800).splitlines()[1:] == ["+ Important files: src/b.py; src/c.py"]
    read_again = _observed(pinned, Change("set", "important_files", "src/a.py — read 5×", key="src/a.py"))
    assert changes_note(pinned, read_again, 800) == ""


def test_a_file_a_user_describes_keeps_its_path_and_words_on_a_line_of_its_own() -> None:
    """Only the observer's files go on the one line of paths; a user's words may hold a `;`."""
    from worker.memory.model import changes_note

    items, _ = run(
        Change("set", "important_files", "the entry; keep", key="src/app.py"),
        Change("add", "important_files", "src/c.py"),  # words that are the path: written once
        origin="user",
    )
    now = _observed(items, Change("set", "important_files", "src/b.py — read 1×", key="src/b.py"))
    assert changes_note((), now, 800).splitlines()[1:] == [
        "+ Important files: src/b.py",  # the newer, first as in the block
        "+ Important files: src/app.py — the entry; keep",
        "+ Important files: src/c.py",
    ]


def test_the_last_edit_keeps_its_diff_and_a_newer_one_always_gets_a_line() -> None:
    """The turn that made an edit may be clipped or summarized while the block stays: the note
    carries the diff, and a newer edit of the same file with the same tool is still a change."""
    from worker.memory.model import changes_note

    first = _observed((), Change("set", "last_edit", "src/a.py (Edit)\n@@ -1 +1 @@\n-a\n+b"))
    second = _observed(first, Change("set", "last_edit", "src/a.py (Edit)\n@@ -2 +2 @@\n-c\n+d"))
    assert changes_note((), first, 800).splitlines()[1:] == [
        "+ Last edit: src/a.py (Edit)",
        "@@ -1 +1 @@",
        "-a",
        "+b",
    ]
    assert changes_note(first, second, 800).splitlines()[1:] == [
        "~ Last edit: src/a.py (Edit)",
        "@@ -2 +2 @@",
        "-c",
        "+d",
    ]


def test_an_observed_file_that_leaves_is_named_by_its_path() -> None:
    from worker.memory.model import changes_note

    pinned = _observed((), Change("set", "important_files", "src/a.py — edited 2×", key="src/a.py"))
    gone = apply(pinned, [Change("remove", "important_files", key="src/a.py")], origin="user", now=T0).items
    assert changes_note(pinned, gone, 800).splitlines()[1:] == ["- Important files (removed): src/a.py"]


def test_new_absolute_paths_are_written_relative_to_their_common_directory() -> None:
    from worker.memory.model import changes_note

    root = "/home/u/projects/app"
    now = _observed(
        (),
        Change("set", "important_files", f"{root}/src/a.py — read 1×", key=f"{root}/src/a.py"),
        Change("set", "important_files", f"{root}/tests/b.py — read 1×", key=f"{root}/tests/b.py"),
    )
    assert changes_note((), now, 800).splitlines()[1:] == [
        f"+ Important files (in {root}/): src/a.py; tests/b.py"
    ]
    mixed = _observed(now, Change("set", "important_files", "setup.py — read 1×", key="setup.py"))
    assert changes_note((), mixed, 800).splitlines()[1] == (
        f"+ Important files: {root}/src/a.py; {root}/tests/b.py; setup.py"
    )


def test_the_changes_are_listed_in_the_blocks_order_files_newest_first() -> None:
    from worker.memory.model import changes_note

    now = _observed((), Change("set", "last_edit", "src/z.py (Edit)"))
    now = _observed(now, Change("add", "blockers", "1 failed", key="pytest"), minutes=2)
    now = _observed(now, Change("set", "important_files", "src/a.py — read 1×", key="src/a.py"), minutes=3)
    now = _observed(now, Change("set", "important_files", "src/b.py — read 1×", key="src/b.py"), minutes=4)
    now = _observed(now, Change("set", "task", "Fix it"), minutes=5)
    assert changes_note((), now, 800).splitlines()[1:] == [
        "+ Task: Fix it",
        "+ Important files: src/b.py; src/a.py",
        "+ Blockers: `pytest`: 1 failed",
        "+ Last edit: src/z.py (Edit)",
    ]


def test_an_agents_long_last_edit_is_clipped_as_the_block_clips_it() -> None:
    """A value the block cuts to VALUE_TOKENS does not fill the note and push other lines out."""
    from worker.memory.model import VALUE_TOKENS, changes_note

    long_edit = "src/a.py (Edit)\n" + "\n".join(f"+line {i} of a long change" for i in range(300))
    items, _ = run(Change("set", "last_edit", long_edit), Change("add", "decisions", "Use SQLite"))
    note = changes_note((), items, 800)
    assert note.splitlines()[1] == "+ Decisions: Use SQLite" and note.endswith(" …")
    assert count_text(note) < VALUE_TOKENS + 40


def test_a_path_relative_to_the_notes_directory_names_the_one_file_it_ends() -> None:
    """The note writes new files relative to their common directory; a model may copy that path."""
    root = "/home/u/app"
    items = _observed(
        (),
        Change("set", "important_files", f"{root}/src/a.py — read 1×", key=f"{root}/src/a.py"),
        Change("set", "important_files", f"{root}/lib/src/b.py — read 1×", key=f"{root}/lib/src/b.py"),
        Change("set", "important_files", f"{root}/tests/src/b.py — read 1×", key=f"{root}/tests/src/b.py"),
    )
    removed, _ = run(Change("remove", "important_files", key="src/a.py"), items=items)
    assert f"{root}/src/a.py" not in {i.key for i in removed} and len(removed) == 2
    with pytest.raises(MemoryOpError):  # two files end with it: no guess
        run(Change("remove", "important_files", key="src/b.py"), items=items)
