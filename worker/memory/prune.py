"""Nightly pruning of working memory: what to remove and why, as recorded, recoverable removals.

    plan(items, now=, budget_tokens=, retire_after_days=) -> [Removal | Merge]   pure, idempotent
    period(now, every_seconds=, at=) -> (start, length)       which run this is (a little clock skew allowed)

Rules, in order (each sees what the ones before it left):

    1. a resolved blocker or an answered (resolved) open question goes
    2. near-duplicates within a section merge: normalized text equal, one containing the other,
       or token Jaccard >= 0.8; the pinned, then the newer, is kept
    3. an item neither referenced nor changed for `retire_after_days` retires (never task, never pinned)
    4. while the block does not fit `budget_tokens` whole, the least important item goes (the order
       render() leaves items out in; never task, blockers or pinned items)

Pinned items are never removed. Every step is a model `Change` (op remove) with its reason, so the
store records the removed value in the history and it can be restored.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from worker.memory.model import RESOLVABLE, SINGLE, Change, Item, ordered, render

JACCARD = 0.8
CONTAIN_MIN_TOKENS = 3  # a shorter text than this is "contained" in too much to mean a duplicate
# least important first: the order render() leaves items out in when over budget
BUDGET_ORDER = ("notes", "decisions", "open_questions", "last_edit", "next", "important_files")
_RESOLVED_REASON = {"blockers": "resolved blocker", "open_questions": "answered question"}


@dataclass(frozen=True, slots=True)
class Removal:
    """Remove one item, for a reason that names the rule."""

    section: str
    key: str
    reason: str

    @property
    def change(self) -> Change:
        return Change("remove", self.section, key=self.key)


@dataclass(frozen=True, slots=True)
class Merge:
    """Fold one item into a near-duplicate `into` that stays: the duplicate is removed."""

    section: str
    key: str
    into: str

    @property
    def reason(self) -> str:
        return f"near-duplicate of {self.into}"

    @property
    def change(self) -> Change:
        return Change("remove", self.section, key=self.key)


Step = Removal | Merge


def plan(items: Sequence[Item], *, now: datetime, budget_tokens: int, retire_after_days: float) -> list[Step]:
    """The removals that prune `items`, each with its reason; empty when `items` is already pruned."""
    steps: list[Step] = []
    kept = list(items)
    for rule in (
        _resolved,
        _near_duplicates,
        lambda xs: _stale(xs, now - timedelta(days=retire_after_days)),
        lambda xs: _over_budget(xs, budget_tokens),
    ):
        found = rule(kept)
        gone = {(s.section, s.key) for s in found}
        kept = [i for i in kept if (i.section, i.key) not in gone]
        steps.extend(found)
    return steps


def _resolved(items: Sequence[Item]) -> list[Step]:
    return [
        Removal(i.section, i.key, _RESOLVED_REASON[i.section])
        for i in ordered(items)
        if i.section in RESOLVABLE and i.status == "resolved" and not i.pinned
    ]


def _near_duplicates(items: Sequence[Item]) -> list[Step]:
    """Greedy by priority (pinned, newest): an item near a kept one of its section merges into it."""
    steps: list[Step] = []
    candidates = [i for i in items if i.section not in SINGLE and i.status == "open"]
    candidates.sort(key=lambda i: (not i.pinned, -i.updated_at.timestamp(), i.key))
    kept: dict[str, list[tuple[Item, str, frozenset[str]]]] = {}
    for item in candidates:
        text = _identity(item)
        tokens = frozenset(text.split())
        twin = next(
            (
                k
                for k, k_text, k_tokens in kept.get(item.section, [])
                if _near(text, tokens, k_text, k_tokens)
            ),
            None,
        )
        if twin is not None and not item.pinned:
            steps.append(Merge(item.section, item.key, twin.key))
        else:
            kept.setdefault(item.section, []).append((item, text, tokens))
    return steps


def _identity(item: Item) -> str:
    # a file is its path (case matters, "./" does not; one token, so only equal paths merge)
    if item.section == "important_files":
        return item.key.removeprefix("./")
    return normalize(item.value)


def normalize(text: str) -> str:
    """Lowercase words separated by single spaces: punctuation, case and spacing do not count."""
    return " ".join(re.findall(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", text.lower()))


def _near(a: str, a_tokens: frozenset[str], b: str, b_tokens: frozenset[str]) -> bool:
    if a == b:
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if len(short.split()) >= CONTAIN_MIN_TOKENS and f" {short} " in f" {long} ":
        return True
    union = a_tokens | b_tokens
    return bool(union) and len(a_tokens & b_tokens) / len(union) >= JACCARD


def _stale(items: Sequence[Item], before: datetime) -> list[Step]:
    return [
        Removal(i.section, i.key, f"not referenced since {max(i.referenced_at, i.updated_at):%Y-%m-%d}")
        for i in ordered(items)
        if i.section != "task" and not i.pinned and max(i.referenced_at, i.updated_at) < before
    ]


def _over_budget(items: Sequence[Item], budget_tokens: int) -> list[Step]:
    """Drop the least important open items until render() shows every remaining one whole."""
    kept = list(items)
    droppable = sorted(
        (i for i in items if not i.pinned and i.section in BUDGET_ORDER and i.status == "open"),
        key=lambda i: (BUDGET_ORDER.index(i.section), i.updated_at, i.key),
    )
    steps: list[Step] = []
    for item in droppable:
        if fits(kept, budget_tokens):
            break
        kept.remove(item)
        steps.append(Removal(item.section, item.key, f"over the memory budget of {budget_tokens} tokens"))
    return steps


def fits(items: Sequence[Item], budget_tokens: int) -> bool:
    """Whether render() shows every open item within the budget, leaving none out."""
    return render(items, budget_tokens) == render(items, sys.maxsize)


def describe(step: Step) -> str:
    """One line for people: `remove decisions/use-pytest: near-duplicate of use-pytest-for-tests`."""
    verb = "merge" if isinstance(step, Merge) else "remove"
    return f"{verb} {step.section}/{step.key}: {step.reason}"


# how far behind the beat's clock a worker's may be and still name the period the beat scheduled
CLOCK_SKEW = timedelta(seconds=60)


def period(now: datetime, *, every_seconds: float, at: str) -> tuple[datetime, timedelta]:
    """The scheduled period a run at `now` belongs to: its start and length. Every `every_seconds`
    from the epoch when that is set, else the day starting at `at` ("HH:MM", same clock as `now`).

    A worker runs the beat's message moments after the start, but its clock may be a little behind
    the beat's: a `now` up to CLOCK_SKEW (at most a tenth of the period) before a start names that
    start, not the period before it, which the previous run has claimed already."""
    length = timedelta(seconds=every_seconds) if every_seconds > 0 else timedelta(days=1)
    now = now + min(CLOCK_SKEW, length / 10)
    if every_seconds > 0:
        epoch = datetime(1970, 1, 1, tzinfo=now.tzinfo)
        return epoch + ((now - epoch) // length) * length, length
    hour, minute = parse_at(at)
    start = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if start > now:
        start -= length
    return start, length


def parse_at(at: str) -> tuple[int, int]:
    """("HH", "MM") of a daily time "HH:MM" as integers; ValueError when it is not one."""
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", at.strip())
    if match is None:
        raise ValueError(f"expected a time of day HH:MM, got {at!r}")
    return int(match.group(1)), int(match.group(2))
