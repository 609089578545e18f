"""Transcript importers on small synthetic inputs: detection, mapping per format, repairs, malformed lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from worker.compaction.errors import InvalidTranscript, UnknownFormat
from worker.compaction.formats import Imported, detect_format, load_transcript
from worker.compaction.formats.shaping import NO_RESULT, START_TEXT
from worker.compaction.validate import request_problems


def js(value: Any) -> bytes:
    return orjson.dumps(value)


def jsonl(*lines: Any) -> bytes:
    return b"\n".join(line if isinstance(line, bytes) else orjson.dumps(line) for line in lines)


def valid(imported: Imported) -> Imported:
    assert request_problems({"system": imported.system, "messages": imported.messages}) == []
    return imported


def use(tid: str, name: str = "Bash", **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def res(tid: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": content, **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def cc(kind: str, content: Any, n: int, **extra: Any) -> dict[str, Any]:
    """A Claude Code session line."""
    message: dict[str, Any] = {"role": kind, "content": content}
    if "msg_id" in extra:
        message["id"] = extra.pop("msg_id")
    return {
        "type": kind,
        "uuid": f"u{n}",
        "sessionId": "s",
        "isSidechain": False,
        "message": message,
        **extra,
    }


OPENHANDS_CALL = {
    "id": 2,
    "source": "agent",
    "action": "run",
    "args": {"command": "ls", "thought": "Look around first.", "blocking": False},
    "tool_call_metadata": {
        "function_name": "execute_bash",
        "tool_call_id": "toolu_01",
        "model_response": {
            "id": "resp1",
            "choices": [
                {
                    "message": {
                        "tool_calls": [
                            {
                                "id": "toolu_01",
                                "function": {"name": "execute_bash", "arguments": '{"command": "ls -la"}'},
                            }
                        ]
                    }
                }
            ],
        },
    },
}

DETECTED = [
    ("anthropic list", js([{"role": "user", "content": "hi"}]), "anthropic"),
    (
        "anthropic body",
        js({"system": "s", "messages": [{"role": "user", "content": [text("hi")]}]}),
        "anthropic",
    ),
    (
        "anthropic tool loop",
        js([{"role": "user", "content": "x"}, {"role": "assistant", "content": [use("t1")]}]),
        "anthropic",
    ),
    ("openai system", js([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]), "openai"),
    (
        "openai tool_calls",
        js({"messages": [{"role": "assistant", "content": None, "tool_calls": []}]}),
        "openai",
    ),
    ("openai tool", js([{"role": "tool", "tool_call_id": "c", "content": "x"}]), "openai"),
    (
        "langchain type",
        js([{"type": "human", "content": "hi"}, {"type": "ai", "content": "yo"}]),
        "langchain",
    ),
    ("langchain role", js([{"role": "human", "content": "hi"}]), "langchain"),
    (
        "langchain args",
        js([{"role": "assistant", "content": "", "tool_calls": [{"name": "a", "args": {}, "id": "1"}]}]),
        "langchain",
    ),
    (
        "langchain dumpd",
        js([{"lc": 1, "type": "constructor", "id": ["x", "HumanMessage"], "kwargs": {"content": "hi"}}]),
        "langchain",
    ),
    ("langchain to_dict", js([{"type": "human", "data": {"content": "hi"}}]), "langchain"),
    ("claude code jsonl", jsonl(cc("user", "hi", 1), cc("assistant", [text("yo")], 2)), "claude_code"),
    ("claude code one line", js(cc("user", "hi", 1)), "claude_code"),
    ("claude code junk first", jsonl(b"not json", b"42", cc("user", "hi", 1)), "claude_code"),
    ("claude code summary only", js({"type": "summary", "summary": "s", "leafUuid": "u"}), "claude_code"),
    ("swe-agent", js({"history": [{"role": "user", "content": "x"}], "trajectory": []}), "swe_agent"),
    (
        "openhands list",
        js([{"id": 0, "source": "user", "action": "message", "args": {"content": "x"}}]),
        "openhands",
    ),
    ("openhands object", js({"events": [OPENHANDS_CALL]}), "openhands"),
    ("bom and blank lines", b"\xef\xbb\xbf\n" + js([{"role": "user", "content": "hi"}]) + b"\n", "anthropic"),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in DETECTED], ids=[c[0] for c in DETECTED])
def test_detect_format(data: bytes, expected: str) -> None:
    """Each format is recognised from its structure alone."""
    assert detect_format(data) == expected


UNDETECTABLE = [
    ("empty", b"  \n", "empty"),
    ("scalar", b"42", "int"),
    ("unknown object", js({"foo": 1, "bar": 2}), "['bar', 'foo']"),
    ("list of numbers", js([1, 2]), "not chat messages"),
    ("text", b"hello there\nnot json", "no JSON document"),
    ("jsonl of other objects", jsonl({"a": 1}, {"b": 2}), "2 JSON object lines"),
]


@pytest.mark.parametrize(("data", "says"), [c[1:] for c in UNDETECTABLE], ids=[c[0] for c in UNDETECTABLE])
def test_detect_format_explains_what_it_saw(data: bytes, says: str) -> None:
    """An unknown input raises UnknownFormat saying what was seen and listing the supported formats."""
    with pytest.raises(UnknownFormat, match="supported") as caught:
        detect_format(data)
    assert says in str(caught.value)


def test_load_transcript_reads_bytes_str_paths_and_paths(tmp_path: Path) -> None:
    """A transcript loads the same from bytes, a str path and a Path."""
    data = js([{"role": "user", "content": "hi"}])
    (tmp_path / "t.json").write_bytes(data)
    loaded = [
        load_transcript(data),
        load_transcript(str(tmp_path / "t.json")),
        load_transcript(tmp_path / "t.json"),
    ]
    assert all(x == loaded[0] for x in loaded)
    assert loaded[0].messages == [{"role": "user", "content": [text("hi")]}]


def test_load_transcript_with_an_explicit_format_skips_detection() -> None:
    """An explicit format (with - or _) is used as given; an unsupported name raises UnknownFormat."""
    data = jsonl(cc("user", "hi", 1))
    assert load_transcript(data, format="claude-code").format == "claude_code"
    with pytest.raises(UnknownFormat, match="one of"):
        load_transcript(data, format="gemini")
    with pytest.raises(InvalidTranscript, match="not valid JSON"):
        load_transcript(data + b"\n" + data, format="anthropic")


# -- shaping, through the Anthropic importer -------------------------------------------------

SHAPING = [
    (
        "same-role neighbours merge",
        [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"},
        ],
        [{"role": "user", "content": [text("a"), text("b")]}, {"role": "assistant", "content": [text("c")]}],
        [],
    ),
    (
        "an assistant start gets a user message first",
        [{"role": "assistant", "content": "c"}],
        [{"role": "user", "content": [text(START_TEXT)]}, {"role": "assistant", "content": [text("c")]}],
        ["starts with the assistant"],
    ),
    (
        "a missing result is synthesized",
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": "next"},
        ],
        [
            {"role": "user", "content": [text("a")]},
            {"role": "assistant", "content": [use("t1")]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": NO_RESULT},
                    text("next"),
                ],
            },
        ],
        ["messages[1]: tool_use t1 (Bash) has no result"],
    ),
    (
        "a trailing call gets a synthesized result",
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": [use("t1")]}],
        [
            {"role": "user", "content": [text("a")]},
            {"role": "assistant", "content": [use("t1")]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": NO_RESULT}
                ],
            },
        ],
        ["has no result"],
    ),
    (
        "an orphan result becomes text",
        [{"role": "user", "content": [res("nope", "out", is_error=True), text("a")]}],
        [{"role": "user", "content": [text("[tool result for nope (error)]\nout"), text("a")]}],
        ["messages[0]: tool_result for nope answers no tool_use"],
    ),
    (
        "results come first, in call order",
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [use("t1"), use("t2")]},
            {"role": "user", "content": [text("note"), res("t2"), res("t1")]},
        ],
        [
            {"role": "user", "content": [text("a")]},
            {"role": "assistant", "content": [use("t1"), use("t2")]},
            {"role": "user", "content": [res("t1"), res("t2"), text("note")]},
        ],
        [],
    ),
    (
        "empty text blocks go, an emptied message goes with a warning",
        [
            {"role": "user", "content": [text("a"), text("  ")]},
            {"role": "assistant", "content": [text("")]},
            {"role": "user", "content": "b"},
        ],
        [{"role": "user", "content": [text("a"), text("b")]}],
        ["messages[1]: assistant message with no content; dropped"],
    ),
    (
        "a repeated tool id is renamed and its result follows",
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [res("t1", "one")]},
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [res("t1", "two")]},
        ],
        [
            {"role": "user", "content": [text("a")]},
            {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [res("t1", "one")]},
            {"role": "assistant", "content": [use("t1_2")]},
            {"role": "user", "content": [res("t1_2", "two")]},
        ],
        ["messages[3]: tool_use id t1 repeats an earlier call's id; renamed t1_2"],
    ),
    (
        "an id the API rejects is made safe",
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [use("call:1")]},
            {"role": "user", "content": [res("call:1")]},
        ],
        [
            {"role": "user", "content": [text("a")]},
            {"role": "assistant", "content": [use("call_1")]},
            {"role": "user", "content": [res("call_1")]},
        ],
        ["has characters the API rejects; renamed call_1"],
    ),
    (
        "a tool_use from the user becomes text",
        [{"role": "user", "content": [use("t1", cmd="x")]}],
        [{"role": "user", "content": [text("[tool_use Bash: {'cmd': 'x'}]")]}],
        ["messages[0]: tool_use t1 in a user message"],
    ),
    (
        "a system role message joins the system prompt",
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a"}],
        [{"role": "user", "content": [text("a")]}],
        [],
    ),
    (
        "non-messages are skipped with their index",
        [{"role": "user", "content": "a"}, "junk", {"role": "robot", "content": "x"}],
        [{"role": "user", "content": [text("a")]}],
        ["messages[1]: not a anthropic message", "messages[2]: not a anthropic message"],
    ),
]


@pytest.mark.parametrize(
    ("given", "expected", "warned"), [c[1:] for c in SHAPING], ids=[c[0] for c in SHAPING]
)
def test_shaping_repairs(given: list[Any], expected: list[dict[str, Any]], warned: list[str]) -> None:
    """Every repair yields a valid request and one warning naming where it happened."""
    imported = valid(load_transcript(js(given), format="anthropic"))
    assert imported.messages == expected
    assert len(imported.warnings) == len(warned)
    for fragment, warning in zip(warned, imported.warnings, strict=True):
        assert fragment in warning


def test_anthropic_system_blocks_and_extra_tool_use_fields() -> None:
    """A system given as text blocks is joined; a tool_use keeps only the API's fields."""
    body = {
        "system": [text("one"), text("two")],
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{**use("t1", x=1), "caller": {"type": "direct"}}]},
            {
                "role": "user",
                "content": [
                    res("t1", [text("out"), {"type": "image", "source": {"type": "url", "url": "u"}}])
                ],
            },
        ],
    }
    imported = valid(load_transcript(js(body)))
    assert imported.system == "one\n\ntwo"
    assert imported.messages[1]["content"] == [use("t1", x=1)]
    assert imported.messages[2]["content"][0]["content"][1]["type"] == "image"


# -- OpenAI ----------------------------------------------------------------------------------


def test_openai_tool_calls_and_results() -> None:
    """tool_calls become tool_use (arguments parsed), tool messages their results, system the prompt."""
    chat = [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "b.py"}]},
        {"role": "assistant", "content": None, "refusal": "I won't."},
    ]
    imported = valid(load_transcript(js(chat)))
    assert imported.format == "openai"
    assert imported.system == "sys\n\ndev"
    assert imported.messages[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
    }
    assert imported.messages[1]["content"] == [
        text("let me look"),
        use("call_1", "bash", command="ls"),
        {"type": "tool_use", "id": "call_2", "name": "bash", "input": {"raw": "{not json"}},
    ]
    assert imported.messages[2]["content"] == [res("call_1", "a.py"), res("call_2", [text("b.py")])]
    assert imported.messages[3]["content"] == [text("I won't.")]
    assert imported.warnings == (
        "messages[3].tool_calls[1]: tool arguments are not valid JSON; kept as {'raw': ...}",
    )


def test_openai_legacy_function_call() -> None:
    """A legacy function_call is answered by the function message of the same name."""
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"q": 1}'}},
        {"role": "function", "name": "lookup", "content": "found"},
    ]
    imported = valid(load_transcript(js(chat), format="openai"))
    assert imported.messages[1]["content"] == [use("function_call_lookup", "lookup", q=1)]
    assert imported.messages[2]["content"] == [res("function_call_lookup", "found")]


# -- LangChain -------------------------------------------------------------------------------


def test_langchain_shapes() -> None:
    """model_dump, role, messages_to_dict and dumpd shapes all import; duplicated calls are kept once."""
    chat = [
        {"type": "system", "content": "sys"},
        {"type": "human", "data": {"content": "hi"}},
        {
            "type": "ai",
            "content": [text("looking"), use("t1", "search", q="x")],
            "tool_calls": [
                {"name": "search", "args": {"q": "x"}, "id": "t1", "type": "tool_call"},
                {"name": "calc", "args": {"n": 2}, "id": "t2"},
            ],
            "invalid_tool_calls": [{"name": "bad", "args": "{oops", "id": "t3", "error": "parse"}],
        },
        {"type": "tool", "content": "r1", "tool_call_id": "t1"},
        {"role": "tool", "content": "r2", "tool_call_id": "t2", "status": "error"},
        {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain", "schema", "messages", "ToolMessage"],
            "kwargs": {"content": "r3", "tool_call_id": "t3"},
        },
        {"role": "ai", "content": "done"},
    ]
    imported = valid(load_transcript(js(chat)))
    assert imported.format == "langchain"
    assert imported.system == "sys"
    assert imported.messages[1]["content"] == [
        text("looking"),
        use("t1", "search", q="x"),
        use("t2", "calc", n=2),
        {"type": "tool_use", "id": "t3", "name": "bad", "input": {"raw": "{oops"}},
    ]
    assert imported.messages[2]["content"] == [
        res("t1", "r1"),
        res("t2", "r2", is_error=True),
        res("t3", "r3"),
    ]
    assert imported.messages[3]["content"] == [text("done")]
    assert len(imported.warnings) == 1 and "invalid_tool_calls[0]" in imported.warnings[0]


# -- Claude Code -----------------------------------------------------------------------------


def test_claude_code_folds_streamed_lines_with_interleaved_results() -> None:
    """Lines sharing message.id are one assistant message even with results between them; results are grouped."""
    thinking = {"type": "thinking", "thinking": "plan  \n", "signature": "[REDACTED_SIGNATURE]"}
    lines = [
        cc("user", "do it", 1),
        cc("assistant", [text("\n\n")], 2, msg_id="m1"),
        cc("assistant", [thinking], 3, msg_id="m1"),
        cc("assistant", [use("t1")], 4, msg_id="m1"),
        {"type": "progress", "data": {"type": "bash_progress"}, "uuid": "p"},
        cc("user", [res("t1", "one")], 5),
        cc("assistant", [{**use("t2"), "caller": {"type": "direct"}}], 6, msg_id="m1"),
        cc("user", [res("t2", "two")], 7),
        cc("assistant", [text("done")], 8, msg_id="m2"),
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
    ]
    imported = valid(load_transcript(jsonl(*lines)))
    assert [m["content"] for m in imported.messages] == [
        [text("do it")],
        [thinking, use("t1"), use("t2")],
        [res("t1", "one"), res("t2", "two")],
        [text("done")],
    ]
    assert orjson.dumps(imported.messages[1]["content"][0]) == orjson.dumps(thinking)
    assert imported.warnings == ()
    assert imported.meta["dropped_lines"] == {"file-history-snapshot": 1, "progress": 1}


def test_claude_code_compact_boundary_and_meta_lines() -> None:
    """A compact boundary is reported at the summary's message and block; isMeta lines are kept."""
    lines = [
        cc("user", "task", 1),
        cc("assistant", [use("t1")], 2, msg_id="m1"),
        cc("user", [res("t1")], 3),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted", "uuid": "b"},
        {
            **cc("user", "This session is being continued from a previous conversation…", 4),
            "isCompactSummary": True,
        },
        {**cc("user", "<system-reminder>lint ok</system-reminder>", 5), "isMeta": True},
        {"type": "system", "subtype": "turn_duration", "uuid": "d"},
        cc("assistant", [text("continuing")], 6, msg_id="m2"),
    ]
    imported = valid(load_transcript(jsonl(*lines)))
    assert imported.meta["compact_boundaries"] == [2]
    assert imported.meta["compact_boundary_blocks"] == [[2, 1]]
    assert imported.messages[2]["content"][1]["text"].startswith("This session is being continued")
    assert imported.messages[2]["content"][2]["text"].startswith("<system-reminder>")
    assert imported.meta["meta_lines"] == 1
    assert imported.meta["dropped_lines"] == {"system:turn_duration": 1}


def test_claude_code_sidechain_lines() -> None:
    """Inline sidechain lines are skipped (counted, one warning); a file of only sidechain lines imports whole."""
    side = [
        {**cc("user", "sub task", 10), "isSidechain": True},
        {**cc("assistant", [text("sub done")], 11, msg_id="s1"), "isSidechain": True},
    ]
    mixed = valid(
        load_transcript(jsonl(cc("user", "main", 1), *side, cc("assistant", [text("ok")], 2, msg_id="m1")))
    )
    assert [m["content"] for m in mixed.messages] == [[text("main")], [text("ok")]]
    assert mixed.meta["sidechain_lines"] == 2
    assert mixed.warnings == (
        "lines 2, 3: skipped 2 sidechain (subagent) lines; they are not part of the main conversation",
    )
    alone = valid(load_transcript(jsonl(*side)))
    assert [m["content"] for m in alone.messages] == [[text("sub task")], [text("sub done")]]
    assert alone.meta["sidechain_lines"] == 0


# Every malformed line kind in claude-code-log/edge_cases.jsonl, after a good first line.
MALFORMED = [
    ("bad JSON", b'{"type": "user", "message": ', "line 2: not valid JSON"),
    ("a JSON string", b'"massive error"', "line 2: a JSON str, not an object; skipped"),
    ("a JSON number", b"42", "line 2: a JSON int, not an object; skipped"),
    ("a JSON list", b"[1]", "line 2: a JSON list, not an object; skipped"),
    ("an object without a type", js({"silly": "this"}), "line 2: an object without a 'type'; skipped"),
    (
        "an unknown type",
        js({"type": "hologram", "uuid": "x"}),
        "line 2: unknown line type 'hologram'; skipped",
    ),
    (
        "a string message",
        js({"type": "user", "timesstamp": "t", "uuid": "x", "message": "error"}),
        "line 2: 'message' is a str, not an object; skipped",
    ),
    (
        "a null message",
        js({"type": "assistant", "uuid": "x", "message": None}),
        "line 2: 'message' is a NoneType, not an object; skipped",
    ),
    (
        "a misspelt content key",
        js(cc("user", None, 2) | {"message": {"role": "user", "contenst": [res("t", "x")]}}),
        "line 2: the message has no content; skipped",
    ),
    (
        "a string inside a content list",
        js(cc("user", ["wow error"], 2)),
        "line 2.content[0]: a bare string inside a content list; kept as a text block",
    ),
    (
        "a number inside a content list",
        js(cc("user", [7, text("x")], 2)),
        "line 2.content[0]: a int inside a content list; skipped",
    ),
    (
        "content that is a number",
        js(cc("user", 7, 2)),
        "line 2: content is a int, not text or a list; skipped",
    ),
    (
        "a block without a type",
        js(cc("assistant", [{"text": "x"}], 2, msg_id="m")),
        "unsupported block type None; kept as text",
    ),
    (
        "a tool_use without an id",
        js(cc("assistant", [{"type": "tool_use", "name": "X", "input": {}}], 2, msg_id="m")),
        "tool call 'X' without an id",
    ),
    (
        "tool input that is a list",
        js(cc("assistant", [{"type": "tool_use", "id": "t", "name": "X", "input": [1]}], 2, msg_id="m")),
        "not an object; kept as {'value': ...}",
    ),
    (
        "a tool_result without an id",
        js(cc("user", [{"type": "tool_result", "content": "x"}], 2)),
        "tool_result without a string 'tool_use_id'",
    ),
]


@pytest.mark.parametrize(("line", "warned"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_claude_code_malformed_lines_are_skipped_with_a_warning(line: bytes, warned: str) -> None:
    """A malformed line never crashes the import: it is skipped or repaired, with a warning naming the line."""
    imported = valid(load_transcript(jsonl(cc("user", "start", 1), line, cc("user", "end", 3))))
    assert imported.format == "claude_code"
    assert any(warned in w for w in imported.warnings), imported.warnings
    assert imported.messages[0]["content"][0] == text("start")


def test_claude_code_without_any_conversation_is_invalid() -> None:
    """A session with no usable conversation line raises InvalidTranscript rather than returning nothing."""
    with pytest.raises(InvalidTranscript, match="no conversation messages"):
        load_transcript(jsonl({"type": "summary", "summary": "s", "leafUuid": "u"}, b"42"))


# -- SWE-agent and OpenHands -----------------------------------------------------------------


def test_swe_agent_function_calling_and_text_protocol() -> None:
    """tool_calls/tool_call_ids map to tool_use/tool_result; text-protocol turns stay text."""
    traj = {
        "history": [
            {"role": "system", "content": "You are a programmer.", "agent": "main"},
            {"role": "user", "content": "Here is a demonstration", "is_demo": True},
            {"role": "user", "content": [{"type": "text", "text": "Fix the bug"}]},
            {"role": "assistant", "content": "Let's look.\n```\nls\n```", "action": "ls"},
            {"role": "user", "content": "a.py\n(Open file: n/a)\nbash-$"},
            {
                "role": "assistant",
                "content": "Run it.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command":"python a.py"}'},
                    }
                ],
            },
            {"role": "tool", "content": "8.2", "tool_call_ids": ["call_1"]},
        ],
        "trajectory": [{}, {}],
        "info": {"exit_status": "submitted"},
    }
    imported = valid(load_transcript(js(traj)))
    assert imported.format == "swe_agent"
    assert imported.system == "You are a programmer."
    assert [m["content"] for m in imported.messages] == [
        [text("Here is a demonstration"), text("Fix the bug")],
        [text("Let's look.\n```\nls\n```")],
        [text("a.py\n(Open file: n/a)\nbash-$")],
        [text("Run it."), use("call_1", "bash", command="python a.py")],
        [res("call_1", "8.2")],
    ]
    assert imported.meta["steps"] == 2


def test_swe_agent_without_history_is_invalid() -> None:
    """A trajectory without a history list raises InvalidTranscript."""
    with pytest.raises(InvalidTranscript, match="history"):
        load_transcript(js({"trajectory": []}), format="swe_agent")


def test_openhands_events() -> None:
    """Tool actions become tool_use (the model's own arguments), observations their results, state events go."""
    events = [
        {"id": 0, "source": "environment", "observation": "agent_state_changed", "content": ""},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Make a game"}},
        {"id": 9, "source": "user", "observation": "null", "cause": 1, "content": ""},
        OPENHANDS_CALL,
        {
            "id": 3,
            "source": "agent",
            "observation": "run",
            "cause": 2,
            "content": "a.py",
            "extras": {"metadata": {"exit_code": 0, "suffix": "\n[The command completed with exit code 0.]"}},
            "tool_call_metadata": OPENHANDS_CALL["tool_call_metadata"],
        },
        {
            "id": 4,
            "source": "agent",
            "action": "run",
            "args": {"command": "make", "thought": ""},
            "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "toolu_02"},
        },
        {"id": 5, "source": "agent", "action": "finish", "args": {"outputs": {}, "thought": "All done."}},
    ]
    imported = valid(load_transcript(js(events)))
    assert imported.format == "openhands"
    assert [m["content"] for m in imported.messages] == [
        [text("Make a game")],
        [text("Look around first."), use("toolu_01", "execute_bash", command="ls -la")],
        [res("toolu_01", "a.py\n[The command completed with exit code 0.]")],
        [use("toolu_02", "execute_bash", command="make"), text("All done.")],
        [{"type": "tool_result", "tool_use_id": "toolu_02", "is_error": True, "content": NO_RESULT}],
    ]
    assert imported.meta["dropped_events"] == {"environment/agent_state_changed": 1, "user/null": 1}
    assert imported.warnings == (
        "event 4: tool_use toolu_02 (execute_bash) has no result; synthesized an error result",
    )


def test_openhands_parallel_calls_of_one_response_are_one_message() -> None:
    """Two actions from one model response, results interleaved, import as one assistant message."""
    second = {
        **OPENHANDS_CALL,
        "id": 4,
        "args": {"command": "pwd"},
        "tool_call_metadata": {**OPENHANDS_CALL["tool_call_metadata"], "tool_call_id": "toolu_02"},
    }
    events = [
        {"id": 1, "source": "user", "action": "message", "args": {"content": "go"}},
        OPENHANDS_CALL,
        {"id": 3, "source": "agent", "observation": "run", "cause": 2, "content": "one"},
        second,
        {"id": 5, "source": "agent", "observation": "error", "cause": 4, "content": "two"},
    ]
    imported = valid(load_transcript(js(events)))
    assert [m["role"] for m in imported.messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in imported.messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert imported.messages[1]["content"][2] == use("toolu_02", "execute_bash", command="pwd")
    assert imported.messages[2]["content"] == [res("toolu_01", "one"), res("toolu_02", "two", is_error=True)]
