"""Working memory: a small typed document per session, changed only by operations, each recorded.

    apply(items, ops, origin=, now=, reason=) -> Applied(items, events)   pure; refuses bad ops
    render(items, budget_tokens) -> str                                   the pinned block

Sections and what an item's `key` is in each:

    task             one item, key "task"              what the session is for
    important_files  3-7 paths, key = the path         read, edited or created, most relevant first
    decisions        key = a slug of the text          what was decided and why
    open_questions   key = a slug of the text          resolved when answered
    next             one item, key "next"              what comes next
    blockers         key = the failing command         resolved when the same command passes
    last_edit        one item, key "last_edit"         the newest edit as a clipped diff
    notes            key = the client's key            free-form key/value (the original API)

Every item carries its origin (`agent` through the tool or PATCH, `observed` by the worker from
the turns, `user` through PUT), the turn seq it came from, its status (`open`/`resolved`) and
timestamps; `referenced_at` is the last time a turn mentioned it (for nightly retirement).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from worker.compaction.summarize import common_root, relative_to
from worker.compaction.tokens import count_text, head_text

SECTIONS = (
    "task",
    "important_files",
    "decisions",
    "open_questions",
    "next",
    "blockers",
    "last_edit",
    "notes",
)
SINGLE = frozenset({"task", "next", "last_edit"})  # one item each, keyed by the section name
RESOLVABLE = frozenset({"blockers", "open_questions"})
SLUGGED = frozenset({"decisions", "open_questions"})  # keyed by a slug of their text
ORIGINS = ("agent", "observed", "user", "prune")  # prune: the nightly job (worker/memory/prune.py)
MAX_FILES = 7
OPS = ("set", "add", "remove", "resolve")
Op = Literal["set", "add", "remove", "resolve"]
_TITLES = {
    "task": "Task",
    "important_files": "Important files",
    "decisions": "Decisions",
    "open_questions": "Open questions",
    "next": "Next",
    "blockers": "Blockers",
    "last_edit": "Last edit",
    "notes": "Notes",
}


VALUE_TOKENS = 120  # an item's value in the block and the changes note, at most (longer ones clipped)


class MemoryOpError(ValueError):
    """An operation that cannot apply; `field` names the part of the request that is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.index: int | None = None  # which change of the batch, set by apply()


@dataclass(frozen=True, slots=True)
class Item:
    section: str
    key: str
    value: str
    origin: str
    source_seq: int | None
    created_at: datetime
    updated_at: datetime
    referenced_at: datetime
    status: str = "open"
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """One requested operation: `op` on `section`, the item named by `key` (or derived from value)."""

    op: Op
    section: str
    value: str | None = None
    key: str | None = None
    seq: int | None = None
    pinned: bool | None = None  # None: keep the item's pinned flag (False for a new item)


@dataclass(frozen=True, slots=True)
class Event:
    """What one operation did to one item: before/after values (None = absent), and why."""

    op: str
    section: str
    key: str
    before: str | None
    after: str | None
    origin: str
    reason: str
    status: str = "open"


@dataclass(frozen=True, slots=True)
class Applied:
    items: tuple[Item, ...]
    events: tuple[Event, ...]


def slug(text: str) -> str:
    """The key of a free-text item: its first words, lowercased, at most 60 characters."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)[:60].strip("-") or "item"


def key_of(change: Change) -> str:
    """The item a change names: the section itself for single sections, else its key or slug.

    A model passes what it sees in the block: a decision's or question's text (slugged like the
    value was), a file line with its counts (`src/app.py — edited 3×`: the path)."""
    if change.section in SINGLE:
        return change.section
    if change.key and change.section in SLUGGED:
        return slug(change.key)
    if change.key and change.section == "important_files":
        return change.key.split(" — ")[0].strip()
    if change.key:
        return change.key
    if change.value:
        return change.value.strip() if change.section == "important_files" else slug(change.value)
    raise MemoryOpError("key", f"{change.op} on {change.section} needs a key or a value")


def _check(change: Change) -> None:
    if change.section not in SECTIONS:
        raise MemoryOpError("section", f"unknown section {change.section!r}; one of {', '.join(SECTIONS)}")
    if change.op not in OPS:
        raise MemoryOpError("op", f"unknown op {change.op!r}; one of {', '.join(OPS)}")
    if change.op in ("set", "add") and not (change.value or "").strip():
        raise MemoryOpError("value", f"{change.op} needs a non-empty value")
    if change.op == "resolve" and change.section not in RESOLVABLE:
        raise MemoryOpError(
            "op", f"resolve applies to {' and '.join(sorted(RESOLVABLE))}, not {change.section}"
        )


def apply(
    items: Sequence[Item], changes: Iterable[Change], *, origin: str, now: datetime, reason: str = ""
) -> Applied:
    """items after the changes, in order, and one event per item changed; a no-op records nothing."""
    if origin not in ORIGINS:
        raise MemoryOpError("origin", f"unknown origin {origin!r}; one of {', '.join(ORIGINS)}")
    by_key = {(i.section, i.key): i for i in items}
    events: list[Event] = []
    for index, change in enumerate(changes):
        try:
            _check(change)
            key = _known_file(by_key, change.section, key_of(change))
            old = by_key.get((change.section, key))
            new = _changed(old, change, key, origin, now)
        except MemoryOpError as exc:
            exc.index = index
            raise
        if new == old:
            continue
        if old is not None and new is not None and replace(new, referenced_at=old.referenced_at) == old:
            # the same value again only says it is still true: no change, no event
            by_key[(change.section, key)] = new
            continue
        if new is None:
            del by_key[(change.section, key)]
        else:
            by_key[(change.section, key)] = new
        events.append(_event(change.op, change.section, key, old, new, origin, reason))
    if any(e.section == "important_files" for e in events):
        by_key = _cap_files(by_key, origin, reason, events)
    return Applied(tuple(by_key.values()), tuple(events))


def _known_file(by_key: dict[tuple[str, str], Item], section: str, key: str) -> str:
    """The important file a relative path names when it is the end of exactly one kept path: the
    changes note writes new files relative to their common directory, and a model may copy that."""
    if section != "important_files" or key.startswith("/") or (section, key) in by_key:
        return key
    ends = [k for s, k in by_key if s == section and k.endswith("/" + key)]
    return ends[0] if len(ends) == 1 else key


def owned(items: Sequence[Item], changes: Iterable[Change], origin: str) -> list[Change]:
    """The changes that leave alone every item of another origin: an observation never changes
    what the agent or user set (nor reopens a blocker they resolved, which then carries their origin)."""
    foreign = {(i.section, i.key) for i in items if i.origin != origin}
    return [c for c in changes if _named(c) not in foreign]


def _named(change: Change) -> tuple[str, str] | None:
    try:
        return change.section, key_of(change)
    except MemoryOpError:
        return None  # apply() refuses it


def _changed(old: Item | None, change: Change, key: str, origin: str, now: datetime) -> Item | None:
    if change.op == "remove":
        if old is None:
            raise MemoryOpError("key", f"no {change.section} item {key!r} to remove")
        return None
    if change.op == "resolve":
        if old is None:
            raise MemoryOpError("key", f"no {change.section} item {key!r} to resolve")
        return (
            old
            if old.status == "resolved"
            else replace(old, status="resolved", updated_at=now, origin=origin)
        )
    value = (change.value or "").strip()
    pinned = change.pinned if change.pinned is not None else (old is not None and old.pinned)
    if old is not None and old.value == value and old.status == "open" and old.pinned == pinned:
        return replace(old, referenced_at=now)
    created = old.created_at if old is not None else now
    return Item(change.section, key, value, origin, change.seq, created, now, now, "open", pinned)


def _event(
    op: str, section: str, key: str, old: Item | None, new: Item | None, origin: str, reason: str
) -> Event:
    before = None if old is None else old.value
    after = None if new is None else new.value
    status = new.status if new is not None else "open"
    return Event(op, section, key, before, after, origin, reason, status)


# why an important file leaves the list when others take its place (it was not deleted, moved or
# removed by the agent or a user): ranking churn, which the changes note leaves out
RANKED_OUT = "less relevant than the files kept"
CAPPED_OUT = "more than 7 files"


def pushed_out(events: Iterable[Event]) -> set[str]:
    """Important files whose last removal in `events` (oldest first) only says others took their place."""
    keys: set[str] = set()
    for e in events:
        if e.section != "important_files":
            continue
        if e.after is None and e.reason.endswith((RANKED_OUT, CAPPED_OUT)):
            keys.add(e.key)
        else:
            keys.discard(e.key)
    return keys


def _cap_files(by_key: dict[tuple[str, str], Item], origin: str, reason: str, events: list[Event]) -> dict:
    """Keep the MAX_FILES most recently touched important files; the rest are retired (recorded)."""
    files = sorted(
        (i for i in by_key.values() if i.section == "important_files"),
        key=lambda i: (i.pinned, i.updated_at, i.key),
        reverse=True,
    )
    for item in files[MAX_FILES:]:
        del by_key[(item.section, item.key)]
        events.append(
            _event(
                "remove",
                item.section,
                item.key,
                item,
                None,
                origin,
                f"{reason}: {CAPPED_OUT}" if reason else CAPPED_OUT,
            )
        )
    return by_key


def ordered(items: Iterable[Item]) -> list[Item]:
    """Section order, then pinned first, then oldest first (files: newest first): byte-stable."""

    def sort_key(i: Item) -> tuple:
        recency = -i.updated_at.timestamp() if i.section == "important_files" else i.created_at.timestamp()
        return (SECTIONS.index(i.section), not i.pinned, recency, i.key)

    return sorted(items, key=sort_key)


def _line(item: Item) -> str:
    if item.section == "notes":
        return f"- {item.key}: {item.value}"
    if item.section == "blockers":
        return f"- {item.value}" if item.value.startswith(item.key) else f"- `{item.key}`: {item.value}"
    return f"- {item.value}"


def item_tokens(item: Item) -> int:
    """Tokens of the item's line in the rendered block."""
    return count_text(_line(item))


def render_lines(items: Iterable[Item]) -> str:
    """Open items as titled sections of `- ` lines, in the fixed order."""
    out: list[str] = []
    section = None
    for item in ordered(i for i in items if i.status == "open"):
        if item.section != section:
            section = item.section
            out.append(f"{_TITLES[section]}:")
        out.append(_line(item))
    return "\n".join(out)


def render(items: Sequence[Item], budget_tokens: int, *, value_tokens: int = VALUE_TOKENS) -> str:
    """The pinned memory block within budget_tokens: long values clipped, then the least important
    items left out (unpinned notes, then oldest decisions and questions), never the task."""
    clipped = [replace(i, value=_clip(i.value, value_tokens)) for i in items]
    text = render_lines(clipped)
    if count_text(text) <= budget_tokens:
        return text
    droppable = [i for i in ordered(clipped) if not i.pinned and i.section not in ("task", "blockers")]
    droppable.sort(key=lambda i: (_DROP_ORDER.index(i.section), i.updated_at))
    kept = list(clipped)
    for item in droppable:
        kept.remove(item)
        text = render_lines(kept)
        if count_text(text) <= budget_tokens:
            return text
    return head_text(text, budget_tokens)


_DROP_ORDER = ("notes", "decisions", "open_questions", "last_edit", "next", "important_files")


def _clip(value: str, tokens: int) -> str:
    return value if count_text(value) <= tokens else head_text(value, tokens).rstrip() + " …"


def changes_note(
    pinned: Sequence[Item],
    current: Sequence[Item],
    budget_tokens: int,
    pushed: Collection[str] = (),
    since: str = "the block at the top",
    *,
    observed: bool = True,
) -> str:
    """What changed since the pinned block was rendered, for the memory note of the next user turn
    (the pinned block stays byte-identical until the next epoch, so the cached prefix holds).

    The note is billed once in full (then read from the cache with its turn), so the important files the observer added since the
    block, whose reads and edits are turns of the prompt or of its archives, go on one line by path
    (absolute paths relative to their common directory), and a change to their counts gets no
    line (BENCHMARKS, session 9). Every other item is written as the block writes it, its value
    clipped the same way (the last edit with its diff: the turn that made it may be clipped or
    summarized while the block stays), a file someone described with its path too.

    `pushed`: important files that left only because others took their place (`pushed_out`): no
    line for them, the `+` line says what is important now. A file deleted, moved or removed by
    the agent or a user keeps its `-` line. Without `observed`, what the worker observed from the
    turns gets no line (the turns it came from show it)."""
    seen = ordered if observed else (lambda items: [i for i in ordered(items) if i.origin != "observed"])
    before = {(i.section, i.key): i for i in seen(pinned) if i.status == "open"}
    after = {(i.section, i.key): i for i in seen(current) if i.status == "open"}
    lines: list[str] = []
    files: list[str] = []  # observed important files new since the block, in the block's order
    at = 0  # where their line goes: where the first of them is
    for ident, item in after.items():
        text = _change_text(item)
        if ident not in before and item.section == "important_files" and item.origin == "observed":
            at = at if files else len(lines)
            files.append(text)
        elif ident not in before:
            lines.append(f"+ {_TITLES[item.section]}: {text}")
        elif before[ident].value != item.value and _change_text(before[ident]) != text:
            lines.append(f"~ {_TITLES[item.section]}: {text}")
    if files:
        lines.insert(at, _files_line(files))
    for ident, item in before.items():
        if ident not in after and not (item.section == "important_files" and item.key in pushed):
            gone = (
                "resolved"
                if any(i.status == "resolved" and (i.section, i.key) == ident for i in current)
                else "removed"
            )
            lines.append(f"- {_TITLES[item.section]} ({gone}): {_change_text(item)}")
    if not lines:
        return ""
    return clip_note(f"Working memory changed since {since}:\n" + "\n".join(lines), budget_tokens)


def _files_line(paths: Sequence[str]) -> str:
    """The `+` line of new observed important files; absolute paths relative to their common
    directory, stated once (Claude Code's paths repeat a long prefix on every file)."""
    root = common_root(paths)
    shown = relative_to(root, paths)
    where = f" (in {root}/)" if root else ""
    return f"+ {_TITLES['important_files']}{where}: {'; '.join(shown)}"


def _change_text(item: Item) -> str:
    """An item as a changes-note line shows it: an observed important file by its path (its value
    adds the counts of reads and edits), a file someone described by its path and their words,
    anything else as the block does."""
    if item.section == "important_files":
        if item.origin == "observed":
            return item.key
        value = _clip(item.value, VALUE_TOKENS)
        return value if value.startswith(item.key) else f"{item.key} — {value}"
    return _line(replace(item, value=_clip(item.value, VALUE_TOKENS)))[2:]


def clip_note(text: str, budget_tokens: int) -> str:
    """A changes note within budget_tokens (cut, marked with an ellipsis)."""
    return text if count_text(text) <= budget_tokens else head_text(text, budget_tokens - 2).rstrip() + " …"
