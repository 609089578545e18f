"""Nightly pruning, pure: each rule, the period arithmetic, idempotence and the budget as properties."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.compaction.tokens import count_text
from worker.memory.model import SECTIONS, SINGLE, Item, apply, render
from worker.memory.prune import Merge, Removal, describe, fits, parse_at, period, plan

NOW = datetime(2025, 6, 1, 3, 0)


def item(
    section: str,
    value: str,
    *,
    key: str | None = None,
    age_days: float = 0,
    ref_days: float | None = None,
    status: str = "open",
    pinned: bool = False,
) -> Item:
    at = NOW - timedelta(days=age_days)
    ref = NOW - timedelta(days=age_days if ref_days is None else ref_days)
    key = key or (section if section in SINGLE else value if section == "important_files" else value[:20])
    return Item(section, key, value, "agent", None, at, at, ref, status, pinned)


def pruned(items: list[Item], budget_tokens: int = 800, retire_after_days: float = 14) -> list:
    return plan(items, now=NOW, budget_tokens=budget_tokens, retire_after_days=retire_after_days)


def after(items: list[Item], steps: list) -> tuple[Item, ...]:
    """The items once the plan is applied the way the job applies it (one change per step, its reason)."""
    current: tuple[Item, ...] = tuple(items)
    for step in steps:
        current = apply(current, [step.change], origin="prune", now=NOW, reason=step.reason).items
    return current


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # resolved blockers and answered questions go; open ones stay
        (
            [item("blockers", "pytest fails", status="resolved"), item("blockers", "make lint fails")],
            [Removal("blockers", "pytest fails", "resolved blocker")],
        ),
        (
            [item("open_questions", "which db?", status="resolved")],
            [Removal("open_questions", "which db?", "answered question")],
        ),
        # a pinned resolved item is the user's to remove
        ([item("blockers", "pytest fails", status="resolved", pinned=True)], []),
        # normalized equal: the newer stays
        (
            [
                item("decisions", "Use pytest for tests.", key="old", age_days=2),
                item("decisions", "use  PYTEST for tests", key="new", age_days=1),
            ],
            [Merge("decisions", "old", "new")],
        ),
        # one contains the other (3+ words)
        (
            [
                item("decisions", "store sessions in postgres", key="a", age_days=1),
                item("decisions", "we decided to store sessions in postgres for now", key="b", age_days=3),
            ],
            [Merge("decisions", "b", "a")],
        ),
        # token Jaccard >= 0.8 (5 shared of 6)
        (
            [
                item("notes", "retry the flaky network test twice", key="a", age_days=1),
                item("notes", "retry the flaky network test", key="b", age_days=2),
            ],
            [Merge("notes", "b", "a")],
        ),
        # below the Jaccard threshold, and a short text is not "contained"
        (
            [
                item("decisions", "retry the flaky network test", key="a"),
                item("decisions", "skip the flaky network test on CI", key="b"),
                item("decisions", "pytest", key="c"),
            ],
            [],
        ),
        # the pinned one stays even when older; two pinned twins both stay
        (
            [
                item("decisions", "use uv", key="old", age_days=3, pinned=True),
                item("decisions", "use uv", key="new", age_days=1),
            ],
            [Merge("decisions", "new", "old")],
        ),
        (
            [
                item("decisions", "use uv", key="a", pinned=True),
                item("decisions", "use uv", key="b", pinned=True),
            ],
            [],
        ),
        # only within a section
        ([item("decisions", "use uv", key="a"), item("notes", "use uv", key="b")], []),
        # files: the same path with and without ./ ; different paths never merge
        (
            [
                item("important_files", "./src/app.py", age_days=2),
                item("important_files", "src/app.py", age_days=1),
                item("important_files", "src/App.py"),
            ],
            [Merge("important_files", "./src/app.py", "src/app.py")],
        ),
        # retirement: unpinned, not task, neither referenced nor changed for 14 days
        (
            [
                item("task", "fix the bug", age_days=40),
                item("decisions", "old decision", key="d", age_days=20),
                item("notes", "pinned note", key="n", age_days=20, pinned=True),
                item("next", "run tests", age_days=20, ref_days=3),
                item("blockers", "make fails", key="make", age_days=13),
            ],
            [Removal("decisions", "d", "not referenced since 2025-05-12")],
        ),
    ],
)
def test_each_rule_removes_what_it_names_with_its_reason(items: list[Item], expected: list) -> None:
    """Each rule removes exactly the items it names, with the reason people read in the history."""
    assert pruned(items) == expected


def test_retire_after_days_is_the_setting() -> None:
    """The retirement age comes from the argument, not a constant."""
    items = [item("decisions", "old decision", key="d", age_days=5)]
    assert pruned(items, retire_after_days=14) == []
    assert [s.key for s in pruned(items, retire_after_days=3)] == ["d"]


def test_budget_drops_least_important_first_and_never_task_blockers_or_pinned() -> None:
    """Over budget, notes go before decisions, oldest first; task, blockers and pinned items stay."""
    long = " ".join(["word"] * 60)
    items = [
        item("task", "fix the failing login test"),
        item("blockers", f"pytest tests/test_login.py fails {long}", key="pytest"),
        item("decisions", f"decision one {long}", key="d1", age_days=2),
        item("decisions", f"decision two {long} alpha", key="d2", age_days=1),
        item("notes", f"note {long} beta", key="n1", age_days=1),
        item("notes", f"pinned note {long} gamma", key="n2", pinned=True),
    ]
    steps = pruned(items, budget_tokens=260)
    assert [(s.section, s.key) for s in steps] == [("notes", "n1"), ("decisions", "d1")]
    assert all(s.reason == "over the memory budget of 260 tokens" for s in steps)
    assert fits(after(items, steps), 260)


def test_rules_see_what_earlier_rules_left() -> None:
    """A resolved item is reported once (as resolved), never also as a duplicate or stale."""
    items = [
        item("blockers", "make lint fails", key="a", status="resolved", age_days=30),
        item("blockers", "make lint fails", key="b", age_days=1),
    ]
    assert pruned(items) == [Removal("blockers", "a", "resolved blocker")]


def test_describe_names_the_rule() -> None:
    """The dry run's line says what goes and why."""
    assert describe(Merge("decisions", "a", "b")) == "merge decisions/a: near-duplicate of b"
    assert describe(Removal("blockers", "x", "resolved blocker")) == "remove blockers/x: resolved blocker"


@pytest.mark.parametrize(
    ("now", "every", "at", "start", "length"),
    [
        (datetime(2025, 6, 1, 3, 0), 0, "03:00", datetime(2025, 6, 1, 3, 0), timedelta(days=1)),
        (datetime(2025, 6, 1, 2, 58), 0, "03:00", datetime(2025, 5, 31, 3, 0), timedelta(days=1)),
        # a worker clock a few seconds behind the beat's still names the period the beat scheduled
        (datetime(2025, 6, 1, 2, 59, 57), 0, "03:00", datetime(2025, 6, 1, 3, 0), timedelta(days=1)),
        (datetime(2025, 6, 1, 3, 29, 30), 0, "3:30", datetime(2025, 6, 1, 3, 30), timedelta(days=1)),
        (
            datetime(2025, 6, 1, 0, 0, 3, 900_000),
            2,
            "03:00",
            datetime(2025, 6, 1, 0, 0, 4),
            timedelta(seconds=2),
        ),
        (datetime(2025, 6, 1, 23, 0), 0, "3:30", datetime(2025, 6, 1, 3, 30), timedelta(days=1)),
        (datetime(2025, 6, 1, 0, 0, 5, 500), 2, "03:00", datetime(2025, 6, 1, 0, 0, 4), timedelta(seconds=2)),
    ],
)
def test_period_is_the_scheduled_slot_now_falls_in(
    now: datetime, every: float, at: str, start: datetime, length: timedelta
) -> None:
    """Daily at HH:MM, or every N seconds from the epoch: every run in a period names the same start,
    and one a little before a start (a worker clock behind the beat's) names that start."""
    assert period(now, every_seconds=every, at=at) == (start, length)


@pytest.mark.parametrize("bad", ["24:00", "3", "03:60", "noon", ""])
def test_parse_at_refuses_what_is_not_a_time_of_day(bad: str) -> None:
    """A misconfigured prune time fails loudly."""
    with pytest.raises(ValueError, match="HH:MM"):
        parse_at(bad)


WORDS = ["fix", "test", "login", "pytest", "db", "cache", "retry", "flaky", "use", "uv", "redis", "api"]


@st.composite
def memories(draw: st.DrawFn) -> list[Item]:
    out: dict[tuple[str, str], Item] = {}
    for _ in range(draw(st.integers(0, 25))):
        section = draw(st.sampled_from(SECTIONS))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30))
        value = " ".join(words)
        if section == "important_files":
            value = draw(st.sampled_from(["", "./"])) + f"src/{words[0]}.py"
        key = (
            section
            if section in SINGLE
            else value
            if section == "important_files"
            else draw(st.text("abcdef", min_size=1, max_size=4))
        )
        age = draw(st.floats(0, 30))
        at = NOW - timedelta(days=age)
        ref = NOW - timedelta(days=draw(st.floats(0, age)))
        status = "resolved" if section in ("blockers", "open_questions") and draw(st.booleans()) else "open"
        out[(section, key)] = Item(
            section, key, value, "agent", None, at, at, ref, status, draw(st.booleans())
        )
    return list(out.values())


@settings(max_examples=300, deadline=None)
@given(memories(), st.integers(20, 400), st.floats(1, 20))
def test_pruned_memory_fits_and_planning_again_finds_nothing(
    items: list[Item], budget_tokens: int, days: float
) -> None:
    """After applying the plan, render() shows every remaining item within budget (unless only items
    pruning may not touch are left), and a second plan on the result is empty."""
    steps = plan(items, now=NOW, budget_tokens=budget_tokens, retire_after_days=days)
    result = after(items, steps)
    assert len(steps) == len({(s.section, s.key) for s in steps}) == len(items) - len(result)
    assert not any(i.pinned for i in items if (i.section, i.key) in {(s.section, s.key) for s in steps})
    assert any(i.section == "task" for i in result) == any(i.section == "task" for i in items)
    untouchable = all(i.pinned or i.section in ("task", "blockers") for i in result if i.status == "open")
    assert fits(result, budget_tokens) or untouchable
    assert count_text(render(result, budget_tokens)) <= budget_tokens
    assert plan(result, now=NOW, budget_tokens=budget_tokens, retire_after_days=days) == []
