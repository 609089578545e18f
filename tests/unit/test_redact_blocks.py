"""redact_block and redact_value reach every place a secret can ride in a content block or a value."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from worker.redaction import Redactor

R = Redactor(b"test-key")
AWS = "AKIA4Q7RZ2MXPL9TKW3B"
GH = "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"


def _doc(source: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"type": "document", "source": source, **fields}


def _text_source(data: str) -> dict[str, Any]:
    return {"type": "text", "media_type": "text/plain", "data": data}


BLOCKS: list[tuple[str, dict[str, Any]]] = [
    (
        "tool_use nested",
        {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"a": [[{"b": [AWS]}]]}},
    ),
    (
        "tool_use dict key",
        {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"env": {AWS: "prod"}}},
    ),
    (
        "tool_use JSON string",
        {"type": "tool_use", "id": "toolu_01", "name": "Call", "input": {"body": json.dumps({"token": GH})}},
    ),
    (
        "tool_use path",
        {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": f"/srv/{GH}/x"}},
    ),
    (
        "server_tool_use",
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": AWS}},
    ),
    (
        "mcp_tool_use",
        {
            "type": "mcp_tool_use",
            "id": "mcptoolu_01",
            "name": "get",
            "server_name": "vault",
            "input": {"q": GH},
        },
    ),
    (
        "mcp_tool_result",
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_01", "content": [{"type": "text", "text": AWS}]},
    ),
    ("document text source", _doc(_text_source(f"key {AWS}"))),
    ("document title and context", _doc(_text_source("clean"), title=GH, context=f"ctx {AWS}")),
    ("document content source", _doc({"type": "content", "content": [{"type": "text", "text": f"id {GH}"}]})),
    ("document url source", _doc({"type": "url", "url": f"https://x.example/f.pdf?key={AWS}"})),
    (
        "document inside tool_result",
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": [_doc(_text_source(f"copy {AWS}"))]},
    ),
    (
        "search_result",
        {
            "type": "search_result",
            "source": "https://w",
            "title": "t",
            "content": [{"type": "text", "text": GH}],
        },
    ),
    (
        "search_result inside tool_result",
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": [{"type": "search_result", "source": GH, "title": "t", "content": []}],
        },
    ),
    (
        "text citation",
        {"type": "text", "text": "see doc", "citations": [{"type": "char_location", "cited_text": AWS}]},
    ),
    (
        "web_fetch_tool_result",
        {
            "type": "web_fetch_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": {"type": "web_fetch_result", "url": "https://x", "content": _doc(_text_source(GH))},
        },
    ),
    (
        "bash_code_execution_tool_result",
        {
            "type": "bash_code_execution_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": {"type": "bash_code_execution_result", "stdout": AWS, "stderr": GH, "return_code": 0},
        },
    ),
    (
        "image url source",
        {"type": "image", "source": {"type": "url", "url": f"https://x.example/i.png?t={GH}"}},
    ),
    ("compaction", {"type": "compaction", "content": f"summary with {AWS}"}),
]


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_a_secret_anywhere_in_a_block_is_redacted(where: str, block: dict[str, Any]) -> None:
    """Whatever the block type and however deep, the secret becomes a placeholder; ids and types stay."""
    out = R.redact_block(block)
    dumped = json.dumps(out)
    assert AWS not in dumped and GH not in dumped and "[REDACTED:" in dumped, where
    assert (out["type"], out.get("id"), out.get("tool_use_id")) == (
        block["type"],
        block.get("id"),
        block.get("tool_use_id"),
    )
    assert R.redact_block(out) == out


def test_opaque_fields_and_binary_sources_are_kept_whole() -> None:
    """Signatures, encrypted payloads, file ids and base64 sources are passed through untouched."""
    block = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {"type": "web_search_result", "url": "https://x", "title": "t", "encrypted_content": AWS}
        ],
    }
    assert R.redact_block(block) is block
    pdf = _doc({"type": "base64", "media_type": "application/pdf", "data": "QUtJQTRR"}, title=AWS)
    out = R.redact_block(pdf)
    assert out["source"] is pdf["source"] and AWS not in out["title"]
    upload = {"type": "container_upload", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}
    assert R.redact_block(upload) is upload


def test_a_clean_block_comes_back_as_the_same_object() -> None:
    """Nothing to redact, nothing rebuilt: stages can compare blocks by identity."""
    block = {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "ok"}]}
    assert R.redact_block(block) is block


def test_a_key_is_redacted_and_its_value_judged_by_it() -> None:
    """A secret used as a key becomes a placeholder key; a value under a credential key is judged whole."""
    out = R.redact_value({AWS: "prod", "headers": {"Authorization": "Bearer q8Zr4Vx9Lm2Np7Kt5Wb3Hc6Jd1"}})
    [key] = [k for k in out if k != "headers"]
    assert key.startswith("[REDACTED:aws_access_key:") and out[key] == "prod"
    assert "q8Zr4Vx9Lm2Np7Kt5Wb3Hc6Jd1" not in out["headers"]["Authorization"]
    assert R.redact_value({"n": 1, 2: [None]}) == {"n": 1, 2: [None]}


def test_a_secret_in_a_block_key_or_an_id_field_is_redacted() -> None:
    """Ids and types pass whole only while nothing in them is a secret; keys of any part are data."""
    block = {"type": "text", "text": "x", AWS: "y"}
    assert AWS not in json.dumps(R.redact_block(block))
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": [{"type": "text", "id": GH, "text": "ok"}],
    }
    out = R.redact_block(result)
    assert GH not in json.dumps(out) and out["tool_use_id"] == "toolu_01"


def test_base64_text_documents_are_read_and_binary_ones_kept() -> None:
    """A text/plain document sent as base64 is decoded, redacted and encoded again."""
    encoded = base64.b64encode(f"aws_access_key_id = {AWS}\n".encode()).decode()
    doc = _doc({"type": "base64", "media_type": "text/plain", "data": encoded})
    out = R.redact_block(doc)
    assert AWS not in base64.b64decode(out["source"]["data"]).decode()
    tool = {"type": "tool_use", "id": "toolu_02", "name": "Upload", "input": {"doc": doc}}
    assert AWS not in base64.b64decode(R.redact_block(tool)["input"]["doc"]["source"]["data"]).decode()
    clean = _doc({"type": "base64", "media_type": "text/plain", "data": base64.b64encode(b"hello").decode()})
    assert R.redact_block(clean) is clean
