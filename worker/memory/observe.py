"""Observe: the working-memory changes the worker reads off an agent's turns (origin "observed").

Every tool call is paired with its result; what happens at a result newer than `observed_through`
is new. One small rule per belief, each returning `Observation`s (a change and why):

    task        the session's first user message, when no task is set (two sentences at most)
    files       files read, edited and created -> important_files, "path — edited 3×, read 2×";
                ranked by 3 per write, 1 per read, ½ per shell read (`cat`, `sed -n`), halved every
                40 turns since the file was last touched; the 7 best kept (the agent's own stay)
    renames     `mv a b` / `git mv a b` moves a's item to b; `rm a` retires a, and a later write
                of a file with a's name counts as the move
    blockers    a failing shell command -> blockers[normalized command], a one-line summary;
                resolved when it passes again, when its runner's whole suite passes, or (for a
                command that is not a test or check, `git push`) when a command of its family does
    switches    a blocker of one test runner is retired when another runner ran 3+ times since
                and the blocker's runner never did (the test framework was switched)
    last_edit   the newest successful edit or write, as a clipped unified diff

An observation never changes an item whose origin is not "observed" (model.owned): what the agent
or user set, or resolved, stays as they left it, even when the turns observed are older than their
change. `mentioned` names the items the new turns touch again, whoever set them.

Pure: no clock (recency is counted in turns), no I/O.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.compaction.facts import SYSTEM_INJECTED, command_of, file_of
from worker.compaction.harness import user_instructions
from worker.compaction.model import Block, Turn, block_text
from worker.compaction.tokens import count_text, head_text
from worker.memory import commands as C
from worker.memory.model import MAX_FILES, RANKED_OUT, Change, Item, Op, owned

WEIGHTS = {"edited": 3.0, "created": 3.0, "read": 1.0, "viewed": 0.5}
HALF_LIFE_TURNS = 40
SWITCH_RUNS = 3
TASK_CHARS = 300
EDIT_LINES = 40
EDIT_TOKENS = 120
SEARCH_TOOL = re.compile(r"(?i)grep|glob|search|find|\bls\b|list")
SHELL_READERS = frozenset({"cat", "head", "tail", "less", "nl", "bat", "sed"})
SCRATCH = ("/tmp/", "/dev/", "/proc/")
_COUNT = re.compile(r"\b(edited|created|read|viewed) (\d+)×")


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call with its result; `seq` is the result's turn (when the outcome became known)."""

    seq: int
    name: str
    input: dict[str, Any]
    result: Block

    @property
    def failed(self) -> bool:
        return bool(self.result.get("is_error"))

    @property
    def block(self) -> Block:
        return {"type": "tool_use", "name": self.name, "input": self.input}


@dataclass(frozen=True, slots=True)
class Observation:
    change: Change
    reason: str


@dataclass(slots=True)
class _File:
    counts: Counter[str] = field(default_factory=Counter)
    last_seq: int = 0


def observe(turns: Sequence[Turn], current: Sequence[Item], *, observed_through: int = 0) -> list[Change]:
    """The changes that bring `current` up to date with the turns after `observed_through`."""
    return [o.change for o in observations(turns, current, observed_through=observed_through)]


def observations(
    turns: Sequence[Turn], current: Sequence[Item], *, observed_through: int = 0
) -> list[Observation]:
    """observe() with the reason for each change. Earlier turns are context: a call whose result
    is new, how often a runner ran since a blocker was seen."""
    calls = paired(turns)
    new = [c for c in calls if c.seq > observed_through]
    blockers = observe_blockers(new, current)
    touched = {o.change.key for o in blockers}
    found = [
        *observe_task(turns, current, observed_through),
        *observe_files(new, current, last_seq=max((t.seq for t in turns), default=0)),
        *blockers,
        *observe_switches(calls, observed_through, [i for i in current if i.key not in touched]),
        *observe_last_edit(new, current),
    ]
    kept = owned(current, [o.change for o in found], "observed")
    return [o for o in found if o.change in kept]


def mentioned(turns: Sequence[Turn], *, observed_through: int = 0) -> set[tuple[str, str]]:
    """(section, key) of the items the new calls mention: files touched, commands run. Their
    `referenced_at` is refreshed whoever set them, so the nightly prune keeps what is still in use."""
    out: set[tuple[str, str]] = set()
    for call in (c for c in paired(turns) if c.seq > observed_through):
        for _, path, to in _file_events(call):
            out.update(("important_files", p) for p in (path, to) if p)
        command = command_of(call.block)
        if command and C.normalize(command):
            out.add(("blockers", C.normalize(command)))
    return out


def paired(turns: Sequence[Turn]) -> list[Call]:
    """Every tool call that has its result, in the order of the results."""
    uses = {b.get("id"): b for t in turns for b in t.content if b.get("type") == "tool_use"}
    out: list[Call] = []
    for turn in turns:
        for b in turn.content:
            use = uses.get(b.get("tool_use_id")) if b.get("type") == "tool_result" else None
            if use is not None:
                args = use.get("input")
                out.append(
                    Call(turn.seq, str(use.get("name", "")), args if isinstance(args, dict) else {}, b)
                )
    return out


def reason(seq: int, why: str = "") -> str:
    return f"observed in turn {seq}" + (f": {why}" if why else "")


# -- task


def observe_task(turns: Sequence[Turn], current: Sequence[Item], observed_through: int) -> list[Observation]:
    """The session's first user message becomes the task, once, if none is set."""
    if any(i.section == "task" for i in current):
        return []
    for turn in turns:
        text = next(iter(_typed(turn)), "")
        if text and turn.seq > observed_through:
            return [Observation(Change("set", "task", _sentences(text), seq=turn.seq), reason(turn.seq))]
        if text:
            return []
    return []


def _typed(turn: Turn) -> list[str]:
    """What the user typed in a turn: harness messages and slash-command expansions left out."""
    if turn.role != "user":
        return []
    texts = [b["text"] for b in turn.content if b.get("type") == "text" and isinstance(b.get("text"), str)]
    return [t for t in user_instructions(texts) if not t.startswith(SYSTEM_INJECTED)]


def _sentences(text: str, n: int = 2) -> str:
    parts = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    out = " ".join(parts[:n])
    return out if len(out) <= TASK_CHARS else out[: TASK_CHARS - 2].rstrip() + " …"


# -- important files


def observe_files(new: Sequence[Call], current: Sequence[Item], *, last_seq: int) -> list[Observation]:
    """Count file touches into the observed items, apply moves, keep the best-ranked within 7."""
    mine = [i for i in current if i.section == "important_files" and i.origin == "observed" and not i.pinned]
    fixed = {i.key for i in current if i.section == "important_files"} - {i.key for i in mine}
    files = {i.key: _File(_parse_counts(i.value), i.source_seq or 0) for i in mine}
    gone: dict[str, str] = {}  # path -> why it left
    deleted: dict[str, _File] = {}
    for call in new:
        if not call.failed:
            _touch(files, gone, deleted, call)
    for path in fixed:
        files.pop(path, None)  # the agent's own item stays as the agent wrote it
    ranked = sorted(files, key=lambda p: (_score(files[p], last_seq), files[p].last_seq, p), reverse=True)
    kept = ranked[: max(0, MAX_FILES - len(fixed))]
    out = [
        Observation(
            Change("remove", "important_files", key=i.key, seq=last_seq),
            reason(last_seq, gone.get(i.key, RANKED_OUT)),
        )
        for i in mine
        if i.key not in kept
    ]
    values = {i.key: i.value for i in mine}
    for path in sorted(kept, key=lambda p: files[p].last_seq):
        value = _file_value(path, files[path].counts)
        if values.get(path) != value:
            seq = files[path].last_seq
            out.append(Observation(Change("set", "important_files", value, key=path, seq=seq), reason(seq)))
    return out


def _touch(files: dict[str, _File], gone: dict[str, str], deleted: dict[str, _File], call: Call) -> None:
    """Count one call's touches. A move carries the counts; `rm` retires, and a later write of a
    file of the same name (in this observation) counts as the move."""
    for action, path, to in _file_events(call):
        if action == "moved" and path in files:
            _merge(files, files.pop(path), to, call.seq)
            gone[path] = f"moved to {to}"
        elif action == "deleted" and path in files:
            deleted[path] = files.pop(path)
            gone[path] = f"deleted ({call.name})"
        elif action in WEIGHTS:
            old = next((p for p in deleted if _same_name(p, path)), None) if action == "created" else None
            if old is not None:
                _merge(files, deleted.pop(old), path, call.seq)
                gone[old] = f"replaced by {path}"
            f = files.setdefault(path, _File())
            f.counts[action] += 1
            f.last_seq = call.seq


def _same_name(a: str, b: str) -> bool:
    return a != b and posixpath.basename(a) == posixpath.basename(b)


def _merge(files: dict[str, _File], moved: _File, to: str, seq: int) -> None:
    target = files.setdefault(to, _File())
    target.counts.update(moved.counts)
    target.last_seq = max(seq, moved.last_seq, target.last_seq)


def _file_events(call: Call) -> list[tuple[str, str, str]]:
    """(action, path, moved-to) for one call: a file tool's touch, or a shell read, move or delete."""
    touched = file_of(call.block)
    if touched is not None:
        if touched[1] == "read" and SEARCH_TOOL.search(call.name):
            return []
        return [(touched[1], touched[0], "")]
    command = command_of(call.block)
    if command is None:
        return []
    out: list[tuple[str, str, str]] = []
    for segment in C.segments(C.normalize(command)):
        w = C.words(segment)
        if w[:1] == ["git"]:
            w = w[1:]
        args = [a for a in w[1:] if not a.startswith("-")]
        if w[:1] == ["mv"] and len(args) == 2:
            out.append(("moved", args[0], args[1]))
        elif w[:1] == ["rm"]:
            out.extend(("deleted", a, "") for a in args)
        elif w[:1] and w[0] in SHELL_READERS:
            if w[0] == "sed" and "-n" not in w:
                continue
            paths = args[1:] if w[0] == "sed" else args
            out.extend(("viewed", p, "") for p in paths if _looks_like_file(p))
    return out


def _looks_like_file(arg: str) -> bool:
    return (
        not arg.startswith(SCRATCH)
        and not re.fullmatch(r"[\d,+$p]+", arg)
        and bool(re.search(r"\.\w+$|/", arg))
    )


def _score(f: _File, last_seq: int) -> float:
    weight = sum(WEIGHTS.get(action, 0.0) * n for action, n in f.counts.items())
    return float(weight * 0.5 ** ((last_seq - f.last_seq) / HALF_LIFE_TURNS))


def _parse_counts(value: str) -> Counter[str]:
    return Counter({action: int(n) for action, n in _COUNT.findall(value)})


def _file_value(path: str, counts: Counter[str]) -> str:
    done = ", ".join(f"{a} {counts[a]}×" for a in ("edited", "created", "read", "viewed") if counts[a])
    return f"{path} — {done}"


# -- blockers


def observe_blockers(new: Sequence[Call], current: Sequence[Item]) -> list[Observation]:
    """A failing command opens (or updates) its blocker; a passing one resolves what it answers."""
    state = {i.key: (i.value, i.status) for i in current if i.section == "blockers"}
    out: list[Observation] = []
    for call in new:
        command = command_of(call.block)
        key = C.normalize(command) if command else ""
        if not key or C.is_probe(key):
            continue
        result = C.outcome(block_text(call.result), call.failed)
        if result.kind == "fail" and state.get(key) != (result.summary, "open"):
            op: Op = "set" if key in state else "add"
            out.append(
                Observation(Change(op, "blockers", result.summary, key=key, seq=call.seq), reason(call.seq))
            )
            state[key] = (result.summary, "open")
        elif result.kind == "pass":
            for blocker, (value, status) in list(state.items()):
                why = resolved_by(blocker, key) if status == "open" else None
                if why:
                    out.append(
                        Observation(
                            Change("resolve", "blockers", key=blocker, seq=call.seq), reason(call.seq, why)
                        )
                    )
                    state[blocker] = (value, "resolved")
    return out


def resolved_by(blocker: str, passed: str) -> str | None:
    """Why a passing `passed` resolves the failing `blocker`, or None if it says nothing about it."""
    ran = C.segments(passed)
    if blocker == passed or all(s in ran for s in C.segments(blocker)):
        return f"`{passed}` passed"
    mine = C.runner(blocker)
    for segment in ran:
        if mine is not None and C.runner(segment) == mine and C.whole_suite(segment):
            return f"the whole `{segment}` suite passed"
        if mine is None and C.family(segment) and C.family(segment) == C.family(C.segments(blocker)[0]):
            return f"`{segment}` passed"
    return None


def observe_switches(
    calls: Sequence[Call], observed_through: int, current: Sequence[Item]
) -> list[Observation]:
    """Retire an observed blocker of one test runner once another runner has taken over."""
    runs = [(c.seq, C.runner(C.normalize(cmd))) for c in calls if (cmd := command_of(c.block))]
    tests = [(seq, r[0]) for seq, r in runs if r is not None and r[1] == "test"]
    out: list[Observation] = []
    for item in current:
        old = C.runner(item.key) if item.section == "blockers" else None
        if old is None or old[1] != "test" or item.status != "open" or item.origin != "observed":
            continue
        since = [(seq, name) for seq, name in tests if seq > (item.source_seq or 0)]
        if any(name == old[0] for _, name in since) or not since:
            continue
        name, n = Counter(name for _, name in since).most_common(1)[0]
        latest = max(seq for seq, r in since if r == name)
        if n >= SWITCH_RUNS and latest > observed_through:
            why = f"tests now run with `{name}` ({n} runs since turn {item.source_seq}), `{old[0]}` not run again"
            out.append(
                Observation(Change("remove", "blockers", key=item.key, seq=latest), reason(latest, why))
            )
    return out


# -- last edit


def observe_last_edit(new: Sequence[Call], current: Sequence[Item]) -> list[Observation]:
    """The newest successful edit or write as a clipped unified diff."""
    for call in reversed(new):
        touched = file_of(call.block)
        if call.failed or touched is None or touched[1] == "read":
            continue
        value = edit_diff(touched[0], call)
        if any(i.section == "last_edit" and i.value == value for i in current):
            return []
        return [Observation(Change("set", "last_edit", value, seq=call.seq), reason(call.seq))]
    return []


def edit_diff(path: str, call: Call) -> str:
    """`path (Tool)` then the diff of the edit, at most EDIT_LINES lines and EDIT_TOKENS tokens."""
    args = call.input
    edits = args.get("edits")
    if isinstance(edits, list):
        pairs = [
            (str(e.get("old_string", "")), str(e.get("new_string", ""))) for e in edits if isinstance(e, dict)
        ]
    elif "old_string" in args or "old_str" in args:
        pairs = [
            (
                str(args.get("old_string", args.get("old_str", ""))),
                str(args.get("new_string", args.get("new_str", ""))),
            )
        ]
    else:
        body = next(
            (
                args[k]
                for k in ("content", "file_text", "new_source", "new_str")
                if isinstance(args.get(k), str)
            ),
            "",
        )
        pairs = [("", str(body))]
    lines = [f"{path} ({call.name})"]
    for old, new in pairs:
        lines.extend(list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=1))[2:])
    text = "\n".join(lines[: EDIT_LINES + 1])
    if len(lines) > EDIT_LINES + 1 or count_text(text) > EDIT_TOKENS:
        text = head_text(text, EDIT_TOKENS).rstrip() + "\n…"
    return text
