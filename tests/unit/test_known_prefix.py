"""KnownPrefixes: a body parsed from its new part equals the full parse, folded and chained, whatever the client did to its history."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.proxy.fingerprints import chains
from worker.proxy.known_prefix import TAIL, KnownPrefixes
from worker.proxy.system_turns import fold_system_messages

KEY = b"k" * 32
MARKED = {"cache_control": {"type": "ephemeral"}}


def _parse(raw: bytes) -> dict[str, Any]:
    body = orjson.loads(raw)
    assert isinstance(body, dict)
    return body


def _message(role: str, text: str, marked: bool = False) -> dict[str, Any]:
    if role == "system":
        return {"role": "system", "content": text}
    return {"role": role, "content": [{"type": "text", "text": text, **(MARKED if marked else {})}]}


_TEXT = st.sampled_from(["a", "b", "é ü", 'say "messages":[', "x" * 300, ""])
_MESSAGE = st.builds(_message, st.sampled_from(["user", "assistant", "user", "system"]), _TEXT, st.booleans())
_EDIT = st.one_of(
    st.tuples(st.just("grow"), st.lists(_MESSAGE, min_size=1, max_size=4)),
    st.tuples(st.just("remark"), st.integers(0, 60)),
    st.tuples(st.just("edit"), st.integers(0, 60), _MESSAGE),
    st.tuples(st.just("truncate"), st.integers(1, 60)),
)
# how the client writes its body: orjson's bytes with messages first or last, a nested "messages"
# key before the real one, a repeated key, or another serializer's spacing (never matched)
_LAYOUTS = st.sampled_from(["first", "last", "nested", "repeated", "spaced"])


def _raw(messages: list[Any], layout: str) -> bytes:
    head: dict[str, Any] = {"model": "m", "max_tokens": 10}
    if layout == "first":
        return orjson.dumps({"model": "m", "messages": messages, "stream": True})
    if layout == "last":
        return orjson.dumps({**head, "tools": [{"name": "t"}], "messages": messages})
    if layout == "bulky":  # Claude Code's: tens of KB of tools and system outside the messages
        return orjson.dumps(
            {**head, "tools": [{"name": "t", "description": "d" * 3_000}], "messages": messages}
        )
    if layout == "nested":
        return orjson.dumps({**head, "metadata": {"messages": messages[:2]}, "messages": messages})
    if layout == "repeated":
        inner = orjson.dumps(messages).decode()
        return f'{{"model":"m","messages":{inner},"messages":{orjson.dumps(messages[1:]).decode()}}}'.encode()
    return json.dumps({**head, "messages": messages}, ensure_ascii=False).encode()


def _apply(messages: list[Any], edit: tuple[Any, ...]) -> list[Any]:
    kind = edit[0]
    if kind == "grow":
        return [*messages, *edit[1]]
    if kind == "truncate":
        return messages[: max(1, min(edit[1], len(messages)))]
    i = edit[1] % len(messages)
    if kind == "edit":
        return [*messages[:i], edit[2], *messages[i + 1 :]]
    m = messages[i]  # remark: the client's breakpoint moves to message i
    if m["role"] == "system" or not m["content"]:
        return messages
    block = {**m["content"][0]}
    if block.pop("cache_control", None) is None:
        block.update(MARKED)
    return [*messages[:i], {**m, "content": [block]}, *messages[i + 1 :]]


def _check(memo: KnownPrefixes, messages: list[Any], layout: str, scope: str = "key") -> bool:
    """One request through the memo against the full parse; whether the memo knew a prefix."""
    raw = _raw(messages, layout)
    read = memo.read(scope, raw, _parse)
    full = _parse(raw)
    full["messages"] = fold_system_messages(full["messages"])
    assert read.body == full
    assert list(read.body) == list(full)  # the same key order: the upstream body keeps it
    expected = chains(KEY, full["messages"])
    if read.chains is not None:
        assert read.chains == expected
    memo.learn(read, expected)
    return read.chains is not None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_MESSAGE, min_size=1, max_size=40),
    st.lists(st.tuples(_EDIT, _LAYOUTS), min_size=1, max_size=8),
)
def test_a_body_read_from_its_new_part_is_the_full_parse(
    start: list[dict[str, Any]], requests: list[tuple[tuple[Any, ...], str]]
) -> None:
    """Grown, re-marked, edited, truncated, with system messages, written with the key first, last,
    nested, repeated or spaced: the body, its key order and its chains equal the full computation's,
    and the held histories are never changed by a later request."""
    memo = KnownPrefixes()
    messages = start
    _check(memo, messages, "first")
    held = {id(h): (h, orjson.dumps(h.folded)) for hs in memo._entries.values() for h in hs}
    for edit, layout in requests:
        messages = _apply(messages, edit)
        _check(memo, messages, layout)
        _check(memo, messages, layout, scope="another key")
        held |= {id(h): (h, orjson.dumps(h.folded)) for hs in memo._entries.values() for h in hs}
    assert all(orjson.dumps(h.folded) == data for h, data in held.values())


def test_a_grown_history_is_read_from_its_new_part() -> None:
    """An agent's loop (the reply and a new user message each time, the breakpoint moving to the
    newest message, a system message near the start) is read from its new part from the second
    request on; a history edited before every mark, or another key's, is parsed in full."""
    memo = KnownPrefixes()
    messages = [
        _message("user", "start"),
        _message("system", "env"),
        _message("assistant", "ok"),
        _message("user", "go", True),
    ]
    assert not _check(memo, messages, "first")
    for step in range(TAIL + 10):
        unmarked = {**messages[-1], "content": [{"type": "text", "text": messages[-1]["content"][0]["text"]}]}
        messages = [
            *messages[:-1],
            unmarked,
            _message("assistant", f"did {step}"),
            _message("user", f"{step}", True),
        ]
        assert _check(memo, messages, "first")
    assert not _check(memo, messages, "first", scope="another key")
    assert not _check(memo, [_message("user", "edited"), *messages[1:]], "first")
    assert _check(memo, [*messages, _message("system", "late"), _message("user", "x")], "first")
    assert not _check(memo, messages, "spaced")


def test_the_memo_keeps_within_its_bytes() -> None:
    """Past its byte budget the least recently learnt histories go first; a budget of 0 keeps none."""
    memo = KnownPrefixes(max_bytes=10_000)
    for i in range(20):
        _check(memo, [_message("user", f"{i} " + "x" * 2_000)], "first", scope=i)
    assert memo._bytes <= 10_000 and len(memo._entries) < 20
    assert _check(
        memo, [_message("user", "19 " + "x" * 2_000), _message("assistant", "a")], "first", scope=19
    )
    assert memo._bytes == sum(h.held_bytes for hs in memo._entries.values() for h in hs)
    off = KnownPrefixes(max_bytes=0)
    history = [_message("user", "a"), _message("assistant", "b")]
    assert not _check(off, history, "first") and not _check(off, [*history, _message("user", "c")], "first")
    assert not off._entries


def test_many_evictions_of_bulky_requests_leave_the_memo_working() -> None:
    """Each eviction gives back all it held (the whole request, not only its messages): after
    hundreds of callers came and went, the budget still holds the newest and it is still found."""
    memo = KnownPrefixes(max_bytes=20_000)
    for i in range(200):
        _check(memo, [_message("user", f"{i} task")], "bulky", scope=i)
    assert memo._bytes == sum(h.held_bytes for hs in memo._entries.values() for h in hs) <= 20_000
    assert _check(memo, [_message("user", "199 task"), _message("assistant", "a")], "bulky", scope=199)
