"""Ingest normalization: API responses appended verbatim become valid requests; real breaks still fail."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from anthropic.types import ContentBlock, Message
from anthropic.types.beta import BetaContentBlock, BetaMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.compaction.errors import InvalidTranscript
from worker.compaction.normalize import EMPTY_TEXT, KNOWN_BLOCKS, normalize_message
from worker.compaction.validate import request_problems

TASK = {"role": "user", "content": "Find out and fix it."}


def reply(*content: dict[str, Any], beta: bool = False) -> list[dict[str, Any]]:
    """The content of an API reply as an agent appends it: the SDK's model, then model_dump()."""
    model = BetaMessage if beta else Message
    message = model.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": list(content),
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    dumped: list[dict[str, Any]] = message.model_dump()["content"]
    return dumped


def assistant(content: Any) -> dict[str, Any]:
    """The assistant message normalize_message makes of `content`."""
    role, blocks = normalize_message({"role": "assistant", "content": content})
    return {"role": role, "content": list(blocks)}


def nones(value: Any, path: str = "") -> list[str]:
    """Paths of every None value in `value`."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nones(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nones(v, f"{path}[{i}]")]
    return []


def call(tid: str, name: str = "Bash", **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def answer(tid: str, content: Any = "ok") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": content}]}


def test_text_with_none_citations_loses_the_key() -> None:
    """A plain text reply drops the `citations: None` model_dump() writes and is a valid request."""
    content = reply({"type": "text", "text": "Done."})

    message = assistant(content)

    assert content[0]["citations"] is None
    assert message["content"] == [{"type": "text", "text": "Done."}]
    assert request_problems({"messages": [TASK, message]}) == []


def test_real_citations_are_kept_with_their_required_null_keys() -> None:
    """A citations list stays; its entries lose unset optional keys but keep the nullable document_title."""
    cite = {
        "type": "char_location",
        "cited_text": "x = 1",
        "document_index": 0,
        "document_title": None,
        "start_char_index": 0,
        "end_char_index": 5,
    }
    content = reply({"type": "text", "text": "It sets x.", "citations": [cite]})

    message = assistant(content)

    assert content[0]["citations"][0]["file_id"] is None
    assert message["content"][0]["citations"] == [cite]
    assert request_problems({"messages": [TASK, message]}) == []


def test_whitespace_text_before_a_tool_use_is_dropped() -> None:
    """Claude Code's `"\\n\\n"` text before a tool_use goes; the tool_use loses its None keys."""
    content = reply({"type": "text", "text": "\n\n"}, call("toolu_1", command="ls"))

    message = assistant(content)

    assert content[1]["caller"] is None
    assert message["content"] == [call("toolu_1", command="ls")]
    assert request_problems({"messages": [TASK, message]}, allow_pending_tool_use=True) == []
    assert request_problems({"messages": [TASK, message, answer("toolu_1")]}) == []


@pytest.mark.parametrize("content", [[], [{"type": "text", "text": " \n\t"}], "   ", [" "]])
def test_a_message_with_only_blank_content_keeps_a_placeholder(content: Any) -> None:
    """A message left without blocks keeps one placeholder text block, so roles still alternate."""
    message = assistant(content)

    assert message["content"] == [{"type": "text", "text": EMPTY_TEXT}]
    assert request_problems({"messages": [TASK, message]}) == []


def test_tool_arguments_keep_their_nulls() -> None:
    """A null argument in a tool_use input is the tool's data and is not dropped."""
    content = reply(call("toolu_1", "Read", path="a.py", limit=None))

    message = assistant(content)

    assert message["content"][0]["input"] == {"path": "a.py", "limit": None}


def test_thinking_with_signature_comes_out_unchanged() -> None:
    """A signed thinking block is kept exactly as received, so its signature still verifies."""
    thinking = {"type": "thinking", "thinking": "  Let me look.\n", "signature": "EqQBCkYIBxgCKkD=="}
    content = reply(thinking, call("toolu_1", command="ls"))

    message = assistant(content)

    assert message["content"][0] == thinking == content[0]
    assert request_problems({"messages": [TASK, message, answer("toolu_1")]}) == []


def test_redacted_thinking_comes_out_unchanged() -> None:
    """A redacted_thinking block's opaque data is kept exactly as received."""
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    content = reply(redacted, {"type": "text", "text": "Here is the answer."})

    message = assistant(content)

    assert message["content"][0] == redacted
    assert request_problems({"messages": [TASK, message]}) == []


WEB_SEARCH: list[dict[str, Any]] = [
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "pep 8"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://peps.python.org/pep-0008/",
                "title": "PEP 8",
                "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y",
            }
        ],
    },
    {
        "type": "text",
        "text": "Lines stay under 80 characters.",
        "citations": [
            {
                "type": "web_search_result_location",
                "url": "https://peps.python.org/pep-0008/",
                "title": None,
                "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
                "cited_text": "Limit all lines to a maximum of 79 characters.",
            }
        ],
    },
]


def test_server_tool_use_and_its_result_need_no_user_tool_result() -> None:
    """server_tool_use is answered inside the reply by web_search_tool_result, not by a user tool_result."""
    content = reply(*WEB_SEARCH)

    message = assistant(content)

    assert [b["type"] for b in message["content"]] == [b["type"] for b in WEB_SEARCH]
    assert nones(message["content"][:2]) == []
    assert message["content"][2]["citations"][0]["title"] is None
    assert request_problems({"messages": [TASK, message]}) == []
    assert request_problems({"messages": [TASK, message, {"role": "user", "content": "thanks"}]}) == []


def server_call(tid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tid, "name": name, "input": args}


RESPONSE_BLOCK_CASES: dict[str, list[dict[str, Any]]] = {
    "code_execution": [
        server_call("srvtoolu_1", "code_execution", code="print(2 + 2)"),
        {
            "type": "code_execution_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": {
                "type": "code_execution_result",
                "stdout": "4\n",
                "stderr": "",
                "return_code": 0,
                "content": [],
            },
        },
    ],
    "bash_code_execution": [
        server_call("srvtoolu_2", "bash_code_execution", command="ls"),
        {
            "type": "bash_code_execution_tool_result",
            "tool_use_id": "srvtoolu_2",
            "content": {
                "type": "bash_code_execution_result",
                "stdout": "a.py\n",
                "stderr": "",
                "return_code": 0,
                "content": [],
            },
        },
    ],
    "text_editor_code_execution": [
        server_call("srvtoolu_3", "text_editor_code_execution", command="view", path="a.py"),
        {
            "type": "text_editor_code_execution_tool_result",
            "tool_use_id": "srvtoolu_3",
            "content": {
                "type": "text_editor_code_execution_view_result",
                "content": "x = 1",
                "file_type": "text",
            },
        },
    ],
    "web_fetch": [
        server_call("srvtoolu_4", "web_fetch", url="https://example.com"),
        {
            "type": "web_fetch_tool_result",
            "tool_use_id": "srvtoolu_4",
            "content": {
                "type": "web_fetch_result",
                "url": "https://example.com",
                "content": {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "Example Domain"},
                },
            },
        },
    ],
    "tool_search": [
        server_call("srvtoolu_5", "tool_search_tool_regex", pattern="weather"),
        {
            "type": "tool_search_tool_result",
            "tool_use_id": "srvtoolu_5",
            "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}],
            },
        },
    ],
    "container_upload": [{"type": "container_upload", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}],
}

BETA_BLOCK_CASES: dict[str, list[dict[str, Any]]] = {
    "mcp": [
        {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "search", "server_name": "docs", "input": {}},
        {
            "type": "mcp_tool_result",
            "tool_use_id": "mcptoolu_1",
            "is_error": False,
            "content": [{"type": "text", "text": "found it"}],
        },
    ],
    "mcp_tool_listing": [
        {
            "type": "mcp_tool_listing",
            "mcp_server_name": "docs",
            "tools": [{"name": "search", "input_schema": {"type": "object"}}],
        }
    ],
    "advisor": [
        server_call("srvtoolu_6", "advisor"),
        {
            "type": "advisor_tool_result",
            "tool_use_id": "srvtoolu_6",
            "content": {"type": "advisor_result", "text": "Check the tests first."},
        },
    ],
    "compaction": [{"type": "compaction", "content": "Earlier: fixed the parser."}],
    "fallback": [
        {
            "type": "fallback",
            "from": {"model": "claude-opus-4-1"},
            "to": {"model": "claude-sonnet-4-5"},
            "trigger": {"type": "refusal"},
        },
        {"type": "text", "text": "Here is the answer."},
    ],
}


@pytest.mark.parametrize(
    ("blocks", "beta"),
    [pytest.param(b, False, id=k) for k, b in RESPONSE_BLOCK_CASES.items()]
    + [pytest.param(b, True, id=k) for k, b in BETA_BLOCK_CASES.items()],
)
def test_every_response_block_type_is_normalized_into_a_valid_request(
    blocks: list[dict[str, Any]], beta: bool
) -> None:
    """Each server-side block the SDK can return is accepted, loses its None keys and stays valid."""
    content = reply(*blocks, beta=beta)

    message = assistant(content)

    assert [b["type"] for b in message["content"]] == [b["type"] for b in blocks]
    assert nones(message["content"]) == []
    assert request_problems({"messages": [TASK, message]}) == []


def test_fallback_block_gets_its_wire_name_back() -> None:
    """model_dump() writes the fallback block's `from` as `from_`; the request needs `from`."""
    content = reply(*BETA_BLOCK_CASES["fallback"], beta=True)

    message = assistant(content)

    assert "from_" in content[0]
    assert message["content"][0]["from"] == {"model": "claude-opus-4-1"}
    assert "from_" not in message["content"][0]


def test_known_blocks_cover_every_block_type_the_sdk_can_return() -> None:
    """KNOWN_BLOCKS holds every type in the installed SDK's ContentBlock and BetaContentBlock unions."""
    unions = (ContentBlock, BetaContentBlock)

    sdk_types = {
        kind
        for union in unions
        for cls in get_args(get_args(union)[0])
        for kind in get_args(cls.model_fields["type"].annotation)
    }

    assert sdk_types - KNOWN_BLOCKS == set()


def test_tool_result_parts_lose_none_keys_and_blank_text() -> None:
    """Inside a tool_result, parts lose None-valued keys and whitespace-only text parts."""
    parts = [{"type": "text", "text": "out", "citations": None}, {"type": "text", "text": "  "}]

    role, blocks = normalize_message(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": parts}]}
    )

    assert (role, blocks[0]["content"]) == ("user", [{"type": "text", "text": "out"}])


def test_unknown_block_type_is_refused_by_name() -> None:
    """An unknown block type still raises InvalidTranscript naming the block and its type."""
    message = {"role": "assistant", "content": [{"type": "text", "text": "hi"}, {"type": "hologram"}]}

    with pytest.raises(
        InvalidTranscript, match=r"messages\[1\]\.content\[1\]\.type 'hologram' is not a known"
    ):
        normalize_message(message, "messages[1]")


def test_tool_result_answering_an_unknown_id_is_still_a_problem() -> None:
    """A tool_result whose id no previous tool_use made is reported, however clean its blocks."""
    message = assistant(reply(call("toolu_1", command="ls")))
    role, blocks = normalize_message(answer("toolu_other"))

    problems = request_problems({"messages": [TASK, message, {"role": role, "content": list(blocks)}]})

    assert any("answers tool_use toolu_other" in p for p in problems)
    assert any("tool_use toolu_1" in p and "0 tool_results" in p for p in problems)


def test_server_tool_use_id_cannot_be_answered_by_a_user_tool_result() -> None:
    """server_tool_use ids stay out of tool pairing: a user tool_result for one answers nothing."""
    message = assistant(reply(*WEB_SEARCH))

    problems = request_problems({"messages": [TASK, message, answer("srvtoolu_1")]})

    assert any("answers tool_use srvtoolu_1" in p for p in problems)


text_blocks = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": st.one_of(st.text(), st.text(" \t\n\r\x0b\x0c\u00a0\u2003"))},
        optional={"citations": st.none(), "cache_control": st.none(), "extra": st.none()},
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(blocks=text_blocks, role=st.sampled_from(["user", "assistant"]))
def test_text_blocks_always_normalize_to_non_empty_text_without_nones(
    blocks: list[dict[str, Any]], role: str
) -> None:
    """Any list of text blocks, blank or not, with None-valued keys, gives non-blank text and no None."""
    _, out = normalize_message({"role": role, "content": blocks})

    assert out
    assert all(b["type"] == "text" and b["text"].strip() for b in out)
    assert nones(list(out)) == []
    assert [b["text"] for b in out] in ([b["text"] for b in blocks if b["text"].strip()], [EMPTY_TEXT])


def test_client_cache_breakpoints_are_dropped_at_ingest_even_nested() -> None:
    """compactd places the (at most 4) breakpoints itself: a client's own, top-level or inside a
    tool_result's content, are removed before anything is stored."""
    from worker.compaction.model import Policy
    from worker.compaction.pricing import breakpoints
    from worker.ingest import ingest
    from worker.redaction import Redactor

    marker = {"type": "ephemeral"}
    message = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "out", "cache_control": marker}],
                "cache_control": marker,
            },
            {"type": "text", "text": "next", "cache_control": marker},
        ],
    }
    assert breakpoints({"messages": [message]}) == 3
    turns = ingest([message], first_seq=1, redactor=Redactor(b"k"), policy=Policy()).turns
    assert breakpoints({"messages": [turns[0].as_message()]}) == 0
