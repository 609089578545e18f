"""Properties of the importers: generated conversations survive import intact; arbitrary JSON never crashes one."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import conversations
from worker.compaction.errors import CompactionError
from worker.compaction.formats import LOADERS, detect_format, load_transcript
from worker.compaction.formats.detect import _detect_document, _detect_lines
from worker.compaction.formats.documents import BOM, lines_of
from worker.compaction.validate import request_problems

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30).filter(
    str.strip
)
KEYS = (
    "role", "type", "content", "id", "name", "input", "text", "tool_use_id", "message", "tool_calls", "history",
    "source", "action", "args", "cause", "observation", "tool_call_metadata", "tool_call_id", "tool_call_ids",
    "function", "arguments", "uuid", "sessionId", "subtype", "isSidechain", "isMeta", "lc", "kwargs", "data",
    "messages", "system", "events", "is_error", "thinking",
)  # fmt: skip
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.sampled_from(KEYS)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=6),
    max_leaves=24,
)


def is_valid(imported: Any) -> bool:
    return request_problems({"system": imported.system, "messages": imported.messages}) == []


def payloads(messages: list[dict[str, Any]]) -> tuple[list[str], list[bytes], list[bytes]]:
    """Texts, (id, name, input) of calls and (id, content, is_error) of results, in order."""
    texts, calls, results = [], [], []
    for m in messages:
        content = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        for b in content:
            if b["type"] == "text" and b["text"].strip():
                texts.append(b["text"])
            elif b["type"] == "tool_use":
                calls.append(orjson.dumps([b["id"], b["name"], b["input"]], option=orjson.OPT_SORT_KEYS))
            elif b["type"] == "tool_result":
                results.append(orjson.dumps([b["tool_use_id"], b["content"], b.get("is_error", False)]))
    return texts, calls, results


@SETTINGS
@given(conversations(max_units=6))
def test_anthropic_import_keeps_every_payload(messages: list[dict[str, Any]]) -> None:
    """A generated Anthropic conversation imports valid, with every text, call and result unchanged."""
    imported = load_transcript(orjson.dumps({"system": "sys", "messages": messages}))
    assert imported.format == "anthropic" and is_valid(imported)
    before, after = payloads(messages), payloads(imported.messages)
    assert after[0] == before[0] and after[1] == before[1]
    # a call still in flight at the end gets one synthesized result, nothing else is added
    assert after[2][: len(before[2])] == before[2] and len(after[2]) - len(before[2]) in (0, 1)


@st.composite
def openai_chats(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], list[str], list[tuple[str, str, dict[str, Any]]], list[str]]:
    """An OpenAI chat with tool loops, and the texts, calls and results it holds."""
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": draw(words)},
        {"role": "user", "content": draw(words)},
    ]
    texts, calls, results = [chat[1]["content"]], [], []
    for n in range(draw(st.integers(0, 5))):
        ids = [f"call_{n}_{k}" for k in range(draw(st.integers(0, 3)))]
        say = draw(st.none() | words) if ids else draw(words)
        args = [
            draw(
                st.dictionaries(
                    st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8), max_size=3
                )
            )
            for _ in ids
        ]
        tool_calls = [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": orjson.dumps(a).decode()}}
            for i, a in zip(ids, args, strict=True)
        ]
        chat.append(
            {"role": "assistant", "content": say, **({"tool_calls": tool_calls} if tool_calls else {})}
        )
        texts += [say] if say else []
        calls += [(i, "bash", a) for i, a in zip(ids, args, strict=True)]
        for i in ids:
            out = draw(words)
            chat.append({"role": "tool", "tool_call_id": i, "content": out})
            results.append(out)
        if draw(st.booleans()):
            chat.append({"role": "user", "content": draw(words)})
            texts.append(chat[-1]["content"])
    return chat, texts, calls, results


@SETTINGS
@given(openai_chats())
def test_openai_import_keeps_every_payload(
    case: tuple[list[dict[str, Any]], list[str], list[Any], list[str]],
) -> None:
    """A generated OpenAI chat imports valid, with every text, call (arguments parsed) and result kept."""
    chat, texts, calls, results = case
    imported = load_transcript(orjson.dumps(chat), format="openai")
    assert is_valid(imported) and imported.system == chat[0]["content"]
    got_texts = [b["text"] for m in imported.messages for b in m["content"] if b["type"] == "text"]
    got_calls = [
        (b["id"], b["name"], b["input"])
        for m in imported.messages
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    got_results = [
        b["content"] for m in imported.messages for b in m["content"] if b["type"] == "tool_result"
    ]
    assert got_texts == texts and got_calls == calls and got_results == results
    assert imported.warnings == ()


@SETTINGS
@given(st.sampled_from(sorted(LOADERS)), json_values)
def test_any_json_imports_or_fails_cleanly(name: str, value: Any) -> None:
    """Whatever JSON a loader is given, it returns a valid request or raises a CompactionError, never anything else."""
    try:
        imported = LOADERS[name](orjson.dumps(value))
    except CompactionError:
        return
    assert is_valid(imported)


@SETTINGS
@given(
    st.lists(
        json_values | st.just({"type": "user", "uuid": "u", "message": {"role": "user", "content": "hi"}}),
        max_size=8,
    )
)
def test_any_json_lines_import_as_claude_code_or_fail_cleanly(lines: list[Any]) -> None:
    """A Claude Code file of arbitrary JSON lines imports valid (bad lines warned about) or raises InvalidTranscript."""
    data = b"\n".join(orjson.dumps(line) for line in lines)
    try:
        imported = LOADERS["claude_code"](data)
    except CompactionError:
        return
    assert is_valid(imported)


@SETTINGS
@given(json_values | st.binary(max_size=40))
def test_detection_and_auto_import_never_crash(value: Any) -> None:
    """Detection of any input names a format or raises UnknownFormat; auto import is valid or a CompactionError."""
    data = value if isinstance(value, bytes) else orjson.dumps(value)
    try:
        assert detect_format(data) in LOADERS
        imported = load_transcript(data)
    except CompactionError:
        return
    assert is_valid(imported)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=40)
    | st.lists(st.sampled_from([b"a", b" ", b"\r", b"\n", b"\x0b", b"\x85", b"{}"])).map(b"".join)
)
def test_lines_one_at_a_time_are_splitlines(data: bytes) -> None:
    """lines_of gives the lines bytes.splitlines gives (`\\n`, `\\r\\n` and `\\r` end a line)."""
    assert list(lines_of(data)) == data.splitlines()


def test_lines_of_a_long_file_of_carriage_returns_are_splitlines() -> None:
    """Many lines ended by `\r` alone, then `\r\n`, then `\n`: the same lines as splitlines."""
    data = b'{"a": 1}\r' * 50_000 + b"x\r\n" * 1_000 + b"y\n" * 1_000
    assert list(lines_of(data)) == data.splitlines()


def _detected_whole(data: bytes) -> str:
    """detect_format as it was: the whole body parsed as one document first, then as JSON Lines."""
    body = data.removeprefix(BOM).strip()
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _detect_lines(body)
    return _detect_document(doc)


def _outcome(detect: Any, data: bytes) -> str:
    try:
        return str(detect(data))
    except CompactionError as exc:
        return f"{type(exc).__name__}: {exc}"


_CLAUDE_LINE = {"type": "user", "uuid": "u", "message": {"role": "user", "content": "hi"}}


@SETTINGS
@given(
    st.lists(json_values | st.just(_CLAUDE_LINE), min_size=1, max_size=6),
    st.sampled_from([b"\n", b"\r\n", b"\n\n", b" \n\t"]),
    st.booleans(),
)
def test_json_lines_are_detected_as_by_parsing_the_whole(lines: list[Any], end: bytes, indent: bool) -> None:
    """A first line that is a value by itself sends the input to JSON Lines without parsing it whole:
    the same format or the same error as parsing it whole first, for lines of any JSON, one document
    over several lines (indented) or one line."""
    option = orjson.OPT_INDENT_2 if indent else 0
    data = end.join(orjson.dumps(line, option=option) for line in lines) + end
    assert _outcome(detect_format, data) == _outcome(_detected_whole, data)
    assert _outcome(detect_format, data[:-1]) == _outcome(_detected_whole, data[:-1])
