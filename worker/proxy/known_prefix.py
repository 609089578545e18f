"""KnownPrefixes: a request body parsed from its new part when its history starts with bytes a recent request sent.

An agent resends its whole history on every call, serialized the same way each time, and the
proxy parsed, folded (worker/proxy/system_turns.py) and chained (fingerprints.py) all of it last
time: 625 KB, ~2 ms of orjson and ~1 ms of hashing at 150k tokens. This memo keeps, for each
recent history, the bytes of its `messages` array through each of its last TAIL messages, the
messages as folded and their chains. The next request whose `messages` array starts with one of
those byte runs has the run cut out, and only the rest is parsed (its other fields and its new
messages); the known messages are put back from the memo, and the fold and the chain go on from
where they stopped.

Exact, not a heuristic:
- the bytes are compared, not hashed: byte-identical JSON parses to equal values;
- the run is a whole number of array elements (it was one in the request it came from), so cut
  right after a `[` it leaves a valid array of the rest; a sentinel string holding a per-process
  nonce is put where the run was, and the cut is taken only when the parsed body's top-level
  `messages` (the one a full parse keeps) starts with that sentinel: a nested `"messages":[`, a
  repeated key or a cut inside a string is never mistaken for it;
- the fold goes on only from a message that is not a system message, whose next message in the
  request it was learnt from was not one either (folding never reached back past it);
- anything else (a client that serializes otherwise than orjson does, whitespace, an edit before
  every mark) is parsed in full, as before. A property test compares both ways on edited,
  truncated and regrown histories.

The memo is scoped by the caller's key (a caller only ever matches bytes it sent itself), bounded
by the bytes it holds, least recently used out. Parsed messages are shared between requests:
nothing downstream changes a message in place (the fold copies what it changes).
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from worker.proxy.fingerprints import extend
from worker.proxy.system_turns import fold_onto, fold_system_messages, is_system

_KEY = b'"messages":['
TAIL = 32  # marks kept per history: the client may change its last messages (cache_control moves)
PER_SCOPE = 16  # histories kept per caller key (its conversations: the main one, sub-agents ...)


@dataclass(frozen=True, slots=True)
class Mark:
    """A place in a history's messages array: after `messages` messages as sent, `offset` bytes of
    the array's content, which fold to `folded` messages."""

    messages: int
    offset: int
    folded: int


@dataclass(frozen=True, slots=True)
class History:
    """A recent request's history: its messages array's content through the last mark (a view of
    the request's bytes: not copied), the marks, the messages folded and their chains (len(folded) + 1)."""

    content: memoryview
    marks: tuple[Mark, ...]
    folded: list[Any]
    chains: list[str]
    held_bytes: int  # the whole request's (the view holds it all)


@dataclass(frozen=True, slots=True)
class BodyRead:
    """A request body, its messages folded, and what `KnownPrefixes.learn` needs of it.

    `chains`: the folded messages' chains when the memo knew the prefix; None otherwise (the
    caller computes them, then learns)."""

    scope: Hashable  # whose requests it may be matched with (the caller's key; None: nobody's)
    body: dict[str, Any]
    chains: list[str] | None
    raw: bytes
    start: int  # where the messages array's content begins in `raw` (-1: not found)
    base: Mark  # the known part (Mark(0, 0, 0): none)
    base_marks: tuple[Mark, ...]  # the known history's marks up to `base`
    new: list[Any]  # the messages after `base`, as sent
    counts: list[int]  # folded length after each of `new` (base.folded included)
    known: History | None = None  # the history `base` is in


class KnownPrefixes:
    """See the module docstring. `read` parses a body (the known part taken from the memo);
    `learn` keeps the request once its chains are known."""

    def __init__(self, max_bytes: int = 16 << 20) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[Hashable, list[History]] = OrderedDict()
        self._lock = threading.Lock()
        self._sentinel = f"compactd.known-prefix.{secrets.token_hex(16)}"
        self._sentinel_json = orjson.dumps(self._sentinel)

    def read(self, scope: Hashable, raw: bytes, parse: Callable[[bytes], dict[str, Any]]) -> BodyRead:
        """The body of `raw`; `parse` is the full parse (its errors propagate: a bad body)."""
        start = raw.find(_KEY) if scope is not None else -1
        start = start + len(_KEY) if start >= 0 else -1
        if start >= 0:
            found = self._known(scope, raw, start)
            if found is not None:
                read = self._read_known(scope, raw, start, *found)
                if read is not None:
                    return read
        body = parse(raw)
        new = body["messages"]
        counts: list[int] = []
        body["messages"] = fold_system_messages(new, counts)
        return BodyRead(scope, body, None, raw, start, Mark(0, 0, 0), (), new, counts)

    def _known(self, scope: Hashable, raw: bytes, start: int) -> tuple[History, Mark] | None:
        """The held history sharing the longest byte run with `raw`'s messages, and that run's mark."""
        with self._lock:
            candidates = list(self._entries.get(scope, ()))
        best: tuple[History, Mark] | None = None
        for history in candidates:
            mark = _longest(history, raw, start)
            if mark is not None and (best is None or mark.offset > best[1].offset):
                best = (history, mark)
        return best

    def _read_known(
        self, scope: Hashable, raw: bytes, start: int, history: History, mark: Mark
    ) -> BodyRead | None:
        """The body with `history`'s first `mark.messages` messages taken as known; None when the
        cut is not the top-level messages array's start (the caller parses in full)."""
        try:
            body = orjson.loads(raw[:start] + self._sentinel_json + raw[start + mark.offset :])
        except orjson.JSONDecodeError:
            return None
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or messages[0] != self._sentinel:
            return None
        new = messages[1:]
        if not all(isinstance(m, dict) for m in new):
            return None  # the full parse answers it
        counts: list[int] = []
        folded = fold_onto(history.folded[: mark.folded], new, counts)
        # a system message first among the new ones folds into the known last message
        same = mark.folded
        if same and folded[same - 1] is not history.folded[same - 1]:
            same -= 1
        chains = history.chains[: same + 1]
        value = bytes.fromhex(chains[-1])
        for m in folded[same:]:
            value = extend(value, m)
            chains.append(value.hex())
        body["messages"] = folded
        marks = tuple(m for m in history.marks if m.messages <= mark.messages)
        if new and is_system(new[0]):
            marks = marks[:-1]  # the fold reached back past `mark` this time
        return BodyRead(scope, body, chains, raw, start, mark, marks, new, counts, history)

    def learn(self, read: BodyRead, chains: list[str]) -> None:
        """Keep `read`'s history (its chains computed) for the next request; nothing when its bytes
        are not what orjson would write (then no mark can be placed)."""
        if read.start < 0 or not self._max_bytes:
            return
        scope = read.scope
        marks = _marks(read)
        if not marks:
            return
        end = read.start + marks[-1].offset
        content = memoryview(read.raw)[read.start : end]
        history = History(content, marks, read.body["messages"], chains, len(read.raw))
        with self._lock:
            held = self._entries.pop(scope, [])
            # the history it grew from goes (the caller's other conversations stay)
            kept = [history, *(h for h in held if h is not read.known and not _covers(read, h))]
            kept = kept[:PER_SCOPE]
            self._bytes += _size(kept) - _size(held)
            self._entries[scope] = kept
            while self._bytes > self._max_bytes and self._entries:
                _, gone = self._entries.popitem(last=False)
                self._bytes -= _size(gone)


def _longest(history: History, raw: bytes, start: int) -> Mark | None:
    """The last of `history`'s marks whose byte run `raw`'s messages array starts with, followed by
    `,` or `]` there (a whole number of elements)."""
    content, marks = history.content, history.marks
    lo, hi = 0, len(marks)  # the runs of marks[:lo] match; those of marks[hi:] do not
    # the usual request: the whole last history, or all of it but its last message (its
    # cache_control moved on); each comparison is a memcmp over up to the whole history
    for i in range(len(marks) - 1, max(len(marks) - 3, -1), -1):
        if raw.startswith(content[: marks[i].offset], start):
            lo = i + 1
            break
        hi = i
    while lo < hi:
        mid = (lo + hi) // 2
        if raw.startswith(content[: marks[mid].offset], start):
            lo = mid + 1
        else:
            hi = mid
    for mark in reversed(marks[:lo]):
        if raw[start + mark.offset : start + mark.offset + 1] in (b",", b"]"):
            return mark
    return None


def _size(histories: list[History]) -> int:
    """The bytes held: each history's whole request (its content is a view of it)."""
    return sum(h.held_bytes for h in histories)


def _covers(read: BodyRead, other: History) -> bool:
    """Whether `read`'s messages hold `other`'s content (the same history, grown): `other` is not kept."""
    return read.raw.startswith(other.content, read.start)


def _marks(read: BodyRead) -> tuple[Mark, ...]:
    """The marks of `read`'s history: its known part's, then one after each of its last TAIL
    messages as sent, placed where orjson's serialization of the new messages is found in the raw
    bytes (stopping at the first that differs), each where the fold can go on from."""
    raw, new, base = read.raw, read.new, read.base
    total = base.messages + len(new)
    first = max(0, total - TAIL - base.messages)  # new messages before the first mark to place
    out = [m for m in read.base_marks if m.messages > total - TAIL - 1]
    at = read.start + base.offset
    groups = [(0, first)] if first else []
    groups += [(i, i + 1) for i in range(first, len(new))]
    for lo, hi in groups:
        data = orjson.dumps(new[lo:hi])[1:-1]
        if base.messages or lo:
            data = b"," + data
        if not raw.startswith(data, at):
            break
        at += len(data)
        if raw[at : at + 1] not in (b",", b"]"):
            break
        i = hi - 1
        if is_system(new[i]) or (hi < len(new) and is_system(new[hi])):
            continue  # the fold reaches back past this place
        out.append(Mark(base.messages + hi, at - read.start, read.counts[i]))
    return tuple(out)
