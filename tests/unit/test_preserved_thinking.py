"""The stand-ins' preserved-thinking rule (tests/fakes/preserved_thinking.py) against the documented cases."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.fakes.preserved_thinking import BINDING_BETA, Binder, drop_mode, dropped, refusal

SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "bash", "input_schema": {"type": "object"}}]


def conversation(binder: Binder, turns: int) -> dict[str, Any]:
    """A request after `turns` model calls, each reply a signed thinking block and a tool call."""
    body: dict[str, Any] = {
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "Fix it."}],
    }
    for n in range(turns):
        block = binder.block(body, f"step {n}")
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": {"command": "ls"}}
        body = copy.deepcopy(body)
        body["messages"] += [
            {"role": "assistant", "content": [block, call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "ok"}],
            },
        ]
    return body


def thinking_at(body: dict[str, Any], n: int) -> tuple[int, int]:
    return 1 + 2 * n, 0


def without_thinking(body: dict[str, Any], keep: set[int]) -> dict[str, Any]:
    """`body` with the thinking of every model call but those in `keep` removed."""
    out = copy.deepcopy(body)
    for n, i in enumerate(range(1, len(out["messages"]), 2)):
        if n not in keep:
            out["messages"][i]["content"] = out["messages"][i]["content"][1:]
    return out


def test_an_append_only_history_keeps_every_block_valid() -> None:
    """Appending at the end, moving cache_control, re-serializing: every block stays valid."""
    binder = Binder()
    body = conversation(binder, 4)
    moved = copy.deepcopy(body)
    moved["system"] = [{"type": "text", "text": "You are a coding agent."}]
    moved["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert binder.check(body).valid and binder.check(moved).valid
    assert len(binder.check(body).blocks) == 4


@pytest.mark.parametrize(
    ("edit", "first"),
    [
        ("system", 0),  # a changed system prompt invalidates every block
        ("tools", 0),
        ("note_on_earlier_user_turn", 2),  # a text block added to an earlier user message
        ("clip_old_result", 1),  # an earlier tool_result shortened
    ],
)
def test_an_edited_prefix_invalidates_the_blocks_after_it(edit: str, first: int) -> None:
    """Any change before a block invalidates that block and every later one."""
    binder = Binder()
    body = conversation(binder, 4)
    if edit == "system":
        body["system"] = "You are an agent."
    elif edit == "tools":
        body["tools"] = [*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}]
    elif edit == "note_on_earlier_user_turn":
        body["messages"][4]["content"].append({"type": "text", "text": "[status] 41 tokens"})
    else:
        body["messages"][2]["content"][0]["content"] = "o"
    checked = binder.check(body)
    assert not checked.valid and checked.problem is not None and checked.problem.kind == "prefix"
    assert checked.invalid == tuple(thinking_at(body, n) for n in range(first, 4))


@pytest.mark.parametrize(
    ("keep", "valid"),
    [
        ({1, 2, 3}, True),  # removed from the start
        ({0, 1}, True),  # removed from the end
        (set(), True),  # all removed
        ({0, 2, 3}, False),  # a gap
    ],
)
def test_thinking_may_go_from_the_start_or_the_end_but_not_the_middle(keep: set[int], valid: bool) -> None:
    """Thinking blocks are not part of a later block's prefix; a gap in their run is."""
    binder = Binder()
    checked = binder.check(without_thinking(conversation(binder, 4), keep))
    assert checked.valid is valid


def test_a_block_put_back_invalidates_those_produced_while_it_was_gone() -> None:
    """Once removed, a block stays out: the blocks produced without it recorded another predecessor."""
    binder = Binder()
    full = conversation(binder, 2)
    stripped = without_thinking(full, {0})  # block 1 removed
    block = binder.block(stripped, "step 2")  # produced while block 1 was gone
    later = copy.deepcopy(full)
    later["messages"].append({"role": "assistant", "content": [block, {"type": "text", "text": "done"}]})
    later["messages"].append({"role": "user", "content": "thanks"})
    assert not binder.check(later).valid


def test_a_signature_not_minted_here_is_refused() -> None:
    """A made-up signature fails whatever the prefix (no conversation sentence)."""
    binder = Binder()
    body = conversation(binder, 1)
    body["messages"][1]["content"][0]["signature"] = "EqQBCkYIBxgCKkA..."
    checked = binder.check(body)
    assert checked.problem is not None and checked.problem.kind == "signature"
    assert (
        refusal(checked, {})["error"]["message"]
        == "messages.1.content.0: Invalid `signature` in `thinking` block."
    )


def test_the_refusal_and_the_drop_read_as_the_api_writes_them() -> None:
    """The 400 names the first failing block; drop_block removes it and every later one."""
    binder = Binder()
    body = conversation(binder, 3)
    body["messages"][0]["content"] = "Fix it, please."
    checked = binder.check(body)
    message = refusal(checked, {})["error"]["message"]
    assert message.startswith(
        "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a different conversation."
    )
    assert BINDING_BETA in message
    kept, entries = dropped(body, checked)
    assert [e["path"] for e in entries] == [
        "messages.1.content.0",
        "messages.3.content.0",
        "messages.5.content.0",
    ]
    assert binder.check(kept).valid


def test_block_binding_needs_its_beta_header() -> None:
    """The setting is read only with the beta header; without it the API refuses the field."""
    body = {"thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}}
    assert drop_mode(body, {"anthropic-beta": f"a,{BINDING_BETA}"}) == "drop_block"
    assert drop_mode({"thinking": {"type": "adaptive"}}, {}) is None
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        drop_mode(body, {})
