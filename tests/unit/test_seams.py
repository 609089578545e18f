"""A secret cut in two by a message boundary is redacted in both messages (worker/redaction/seams.py)."""

from __future__ import annotations

import pytest

from worker.compaction.model import Policy
from worker.compaction.pipeline import ingest
from worker.redaction import Redactor
from worker.redaction.seams import edge_text, redact_seams, with_edge_text

R = Redactor(b"seam-key")
KEY = "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"


def _text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


@pytest.mark.parametrize(
    ("blocks", "first", "last"),
    [
        ((_text("a"), _text("b")), "a", "b"),
        (({"type": "tool_result", "tool_use_id": "t", "content": "out"},), "out", "out"),
        (({"type": "tool_result", "tool_use_id": "t", "content": [_text("x"), _text("y")]},), "x", "y"),
        (({"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}},), "", ""),
        (({"type": "thinking", "thinking": "hm", "signature": "s"},), "", ""),
        ((), "", ""),
    ],
)
def test_edge_text_is_the_text_a_message_starts_and_ends_with(blocks, first, last) -> None:  # type: ignore[no-untyped-def]
    assert edge_text(blocks, last=False) == first
    assert edge_text(blocks, last=True) == last
    if first:
        assert edge_text(with_edge_text(blocks, "NEW", last=False), last=False) == "NEW"
        assert edge_text(with_edge_text(blocks, "NEW", last=True), last=True) == "NEW"


def test_a_key_cut_between_a_tool_result_and_the_next_text_is_gone_from_both() -> None:
    cut = len(KEY) // 2
    messages = [
        ("user", ({"type": "tool_result", "tool_use_id": "t", "content": [_text(f"token: {KEY[:cut]}")]},)),
        ("assistant", (_text(f"{KEY[cut:]} is the rest"),)),
    ]
    (_, a), (_, b) = redact_seams(messages, R)
    joined = edge_text(a, last=True) + "|" + edge_text(b, last=False)
    assert KEY[:cut] not in joined and KEY[cut:] not in joined
    assert joined.startswith("token: [REDACTED:") and joined.endswith("] is the rest")


def test_ingest_redacts_a_key_split_across_two_turns_and_leaves_others_alone() -> None:
    cut = 17
    msgs = [
        {"role": "user", "content": f"export GITHUB_TOKEN={KEY[:cut]}"},
        {"role": "assistant", "content": f"{KEY[cut:]}\nDone."},
        {"role": "user", "content": "thanks"},
    ]
    turns = ingest(msgs, first_seq=1, redactor=R, policy=Policy()).turns
    texts = [t.content[0]["text"] for t in turns]
    assert all(KEY[:cut] not in t and KEY[cut:] not in t for t in texts)
    assert texts[1].endswith("]\nDone.") and texts[2] == "thanks"
