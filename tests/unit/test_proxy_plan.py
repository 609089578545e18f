"""The drop-in endpoint's pure decisions: fingerprints, conversation identity, reconcile plans, the upstream request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import conversations
from worker.flows.proxy import cache_ttl_seconds
from worker.proxy.conversations import (
    client_id,
    client_session_id,
    identify,
    is_side_request,
    stable_system_text,
)
from worker.proxy.fingerprints import chains, normalize_message
from worker.proxy.outbound import breakpoints, build_upstream, limit_breakpoints
from worker.proxy.reconcile import Record, plan, restart

KEY = b"k" * 32
TOOLS = [{"name": "read_file", "input_schema": {}}, {"name": "grep", "input_schema": {}}]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


MARKED = {"cache_control": {"type": "ephemeral"}}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        # the client's own (user) messages: only its moving cache breakpoints are ignored
        (_user("hi"), {"role": "user", "content": [{"type": "text", "text": "hi"}]}, False),
        (
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi", **MARKED}]},
            True,
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "x"}]}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "x", **MARKED}],
                    }
                ],
            },
            True,
        ),
        (_user("hi"), _user("hi!"), False),
        (_user("hi"), {"role": "assistant", "content": "hi"}, False),
        # an assistant message may be compactd's reassembly, sent back in the client's serialization
        ({"role": "assistant", "content": "ok"}, _assistant("ok"), True),
        (
            _assistant("ok"),
            {"role": "assistant", "content": [{"type": "text", "text": "ok", "citations": None}]},
            True,
        ),
        (
            _assistant("ok"),
            {
                "role": "assistant",
                "content": [{"type": "text", "text": ""}, {"type": "text", "text": "ok", **MARKED}],
            },
            True,
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {"a": 1}, "caller": None}],
            },
            {
                "role": "assistant",
                "content": [{"input": {"a": 1}, "name": "n", "id": "t", "type": "tool_use"}],
            },
            True,
        ),
        (
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "a", "signature": "s1"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "a", "signature": "s2"}]},
            False,
        ),
    ],
)
def test_fingerprints_ignore_presentation_but_not_meaning(
    a: dict[str, Any], b: dict[str, Any], same: bool
) -> None:
    """A message the client sends back with cache_control, nulls or string content matches; a changed one does not."""
    assert (chains(KEY, [a])[1] == chains(KEY, [b])[1]) is same


def test_chains_are_keyed_and_prefix_stable() -> None:
    """The chain after k messages depends on those k only, and on the key."""
    history = [_user("a"), _assistant("b"), _user("c")]
    assert chains(KEY, history)[:3] == chains(KEY, history[:2])
    assert chains(KEY, history) != chains(b"other" * 8, history)


CHAINS = chains(KEY, [_user("a"), _assistant("b"), _user("c"), _assistant("d"), _user("e")])


@pytest.mark.parametrize(
    ("record", "n", "kind", "start", "session"),
    [
        (None, 1, "new", 0, "conv"),
        (Record("conv", 3, CHAINS[3]), 3, "same", 3, "conv"),
        (Record("conv", 3, CHAINS[3]), 5, "extend", 3, "conv"),
        (Record("conv", 3, "f" * 64), 5, "diverged", 0, "conv."),  # edited
        (Record("conv", 5, CHAINS[5]), 3, "diverged", 0, "conv."),  # truncated
    ],
)
def test_reconcile_plans(record: Record | None, n: int, kind: str, start: int, session: str) -> None:
    """New, retried, extended, edited and truncated histories get the plan the docs promise."""
    p = plan([] if record is None else [record], CHAINS[: n + 1], "conv")
    assert (p.kind, p.start) == (kind, start)
    assert p.session_id.startswith(session)
    assert p.after == Record(p.session_id, n, CHAINS[n])
    if kind == "diverged":
        # a new branch gets a record of its own; the old branch keeps its record
        assert p.expected is None and p.parent_session_id == "conv" and p.fresh
    else:
        assert p.expected == record


def test_alternating_histories_each_keep_their_branch() -> None:
    """Two histories that alternate under one key each extend their own branch, never fork again."""
    left = chains(KEY, [_user("a"), _assistant("b"), _user("c"), _assistant("left"), _user("go left")])
    right = chains(KEY, [_user("a"), _assistant("b"), _user("c"), _assistant("right"), _user("go right")])
    branches = [Record("conv.r", 5, right[5]), Record("conv", 5, left[5])]
    assert plan(branches, left, "conv").kind == "same"
    assert plan(branches, left, "conv").session_id == "conv"
    assert plan(branches, right, "conv").session_id == "conv.r"
    # the longest branch a history extends wins
    longer = [Record("conv", 3, left[3]), Record("conv.l", 5, left[5])]
    assert plan(longer, left, "conv").session_id == "conv.l"


def test_diverged_names_are_stable_and_move_on_when_taken() -> None:
    """A retried divergence names the same session; a taken name gets another; a new one first uses the key."""
    record = Record("conv", 5, CHAINS[5])
    names = {plan([record], CHAINS[:4], "conv", attempt).session_id for attempt in range(3)}
    assert len(names) == 3
    assert plan([record], CHAINS[:4], "conv").session_id == plan([record], CHAINS[:4], "conv").session_id
    taken = plan([], CHAINS[:2], "conv", 1)
    assert taken.session_id != "conv" and taken.parent_session_id == "conv" and taken.fresh
    assert restart(record, CHAINS[:6], "conv").parent_session_id is None


@pytest.mark.parametrize(
    ("user_id", "expected"),
    [
        (
            json.dumps({"device_id": "d" * 64, "session_id": "8f0c2a51-1111-2222-3333-444455556666"}),
            "8f0c2a51-1111-2222-3333-444455556666",
        ),
        (
            "user_abc_account_123_session_8f0c2a51-1111-2222-3333-444455556666",
            "8f0c2a51-1111-2222-3333-444455556666",
        ),
        ("someone", None),
        (json.dumps({"session_id": "../../etc"}), None),
        ("{not json", None),
    ],
)
def test_client_session_from_metadata(user_id: str, expected: str | None) -> None:
    """Claude Code's metadata.user_id, old and new forms, gives its session id; anything else none."""
    assert client_session_id({"user_id": user_id}) == expected


def test_conversations_under_one_client_session_are_distinct() -> None:
    """The main conversation and a sub-agent under one Claude Code session get different keys;
    the same start gets the same key whatever the billing header says."""
    meta = {"user_id": json.dumps({"session_id": "8f0c2a51-1111-2222-3333-444455556666"})}
    main = {
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cch=1"},
            {"type": "text", "text": "You are Claude Code."},
        ],
        "messages": [_user("fix it")],
        "metadata": meta,
    }
    again = {
        **main,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cch=2"}, main["system"][1]],
    }
    sub = {**main, "messages": [_user("search the repo for TODOs")]}
    assert identify(KEY, main, None).key == identify(KEY, again, None).key
    assert identify(KEY, main, None).key != identify(KEY, sub, None).key
    assert identify(KEY, main, None).source == "client_session"
    assert identify(KEY, {"messages": [_user("fix it")]}, None).source == "start"
    assert identify(KEY, main, "mine").key == "mine"
    assert stable_system_text(main["system"]) == "You are Claude Code."


@pytest.mark.parametrize(
    ("body", "named", "side"),
    [
        ({"messages": [_user("title?")]}, False, True),
        ({"messages": [_user("title?")]}, True, False),
        ({"messages": [_user("go")], "tools": TOOLS}, False, False),
        ({"messages": [_user("a"), _assistant("b"), _user("c")]}, False, False),
    ],
)
def test_side_requests(body: dict[str, Any], named: bool, side: bool) -> None:
    """No tools and one message, unnamed: passed through; anything else is a conversation."""
    assert is_side_request(body, named) is side


def _served(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "system": [
            {"type": "text", "text": "stored system"},
            {
                "type": "text",
                "text": "<working_memory>\nm\n</working_memory>",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": messages,
    }


def test_upstream_request_takes_the_clients_system_tools_and_parameters() -> None:
    """The client's system blocks then compactd's memory; its tools then compactd's; its parameters kept."""
    client = {
        "model": "m",
        "max_tokens": 10,
        "temperature": 0.2,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stream": False,
        "system": [{"type": "text", "text": "mine", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "tools": [
            {"name": "Bash", "input_schema": {}, "cache_control": {"type": "ephemeral"}},
            {"name": "grep", "input_schema": {}},
        ],
        "messages": [_user("raw")],
    }
    body, hidden = build_upstream(client, _served([_user("served")]), TOOLS)
    assert body["messages"] == [_user("served")]
    assert [b["text"][:4] for b in body["system"]] == ["mine", "<wor"]
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert [t["name"] for t in body["tools"]] == ["Bash", "grep", "read_file"]
    assert hidden == {"read_file"}  # the client's own grep stays the client's
    assert (body["model"], body["max_tokens"], body["temperature"], body["stream"]) == ("m", 10, 0.2, True)
    assert body["thinking"] == client["thinking"]
    assert len(breakpoints(body)) == 1


MARK = {"type": "ephemeral"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=1, max_size=8),
    st.integers(0, 3),
    st.booleans(),
)
def test_never_more_than_four_breakpoints(
    marks: list[list[bool]], tool_marks: int, system_mark: bool
) -> None:
    """Whatever the client and the served prompt mark, the upstream request has at most 4 breakpoints,
    and the newest message's mark is kept."""
    messages = []
    for i, row in enumerate(marks):
        role = "user" if i % 2 == 0 else "assistant"
        blocks = [
            {"type": "text", "text": f"{i}.{j}", **({"cache_control": MARK} if m else {})}
            for j, m in enumerate(row)
        ]
        messages.append({"role": role, "content": blocks})
    client = {
        "model": "m",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "s", **({"cache_control": MARK} if system_mark else {})}],
        "tools": [
            {"name": f"t{i}", "input_schema": {}, **({"cache_control": MARK} if i < tool_marks else {})}
            for i in range(3)
        ],
        "messages": messages,
    }
    body, _ = build_upstream(client, _served(messages), TOOLS)
    assert len(breakpoints(body)) <= 4
    if any(marks[-1]):
        assert any(part == "messages" and i == len(messages) - 1 for part, i, _ in breakpoints(body))
    assert limit_breakpoints(body) == body


@settings(max_examples=50, deadline=None)
@given(conversations(max_units=8))
def test_a_history_always_extends_its_own_prefix(messages: list[dict[str, Any]]) -> None:
    """For any conversation, the record after k messages plans an extension (or a retry) of the whole."""
    all_chains = chains(KEY, messages)
    for k in range(len(messages) + 1):
        p = plan([Record("s", k, all_chains[k])], all_chains, "s")
        assert p.kind == ("same" if k == len(messages) else "extend") and p.start == k
    assert all(normalize_message(m)["role"] in ("user", "assistant") for m in messages)


def test_the_spliced_request_is_the_built_one() -> None:
    """The hot path's request bytes (served messages spliced in unparsed) parse to build_upstream's request."""
    import orjson

    from worker.proxy.outbound import upstream_bytes

    served = _served(
        [
            _user("served"),
            _assistant("a"),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": 'say "messages":[ and ,"system":', "cache_control": MARK}
                ],
            },
        ]
    )
    body = (
        b'{"session_id":"x","version":3,"epoch":0,"compacted_through":0,"token_count":9,"budget_tokens":99,"fallback":null,"system":'
        + orjson.dumps(served["system"])
        + b',"messages":'
        + orjson.dumps(served["messages"])
        + b"}"
    )
    client = {
        "model": "m",
        "max_tokens": 5,
        "system": "mine",
        "tools": [{"name": "Bash", "input_schema": {}}],
        "messages": [_user("raw")],
        "metadata": {"user_id": "u"},
    }
    spliced, hidden = upstream_bytes(client, body, TOOLS)
    built, hidden_too = build_upstream(client, served, TOOLS)
    assert orjson.loads(spliced) == built and hidden == hidden_too
    many = _served(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": str(i), "cache_control": MARK} for i in range(6)],
            }
        ]
    )
    body = (
        b'{"version":1,"system":'
        + orjson.dumps(many["system"])
        + b',"messages":'
        + orjson.dumps(many["messages"])
        + b"}"
    )
    assert len(breakpoints(orjson.loads(upstream_bytes(client, body, TOOLS)[0]))) == 4


_TEXTS = st.sampled_from(["a", "b", "hi", "ok", ""])
_MESSAGE = st.one_of(
    _TEXTS.map(_user),
    _TEXTS.map(_assistant),
    _TEXTS.map(lambda t: {"role": "user", "content": [{"type": "text", "text": t, **MARKED}]}),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(_MESSAGE, max_size=8), min_size=1, max_size=6))
def test_the_chain_memo_is_the_full_computation(requests: list[list[dict[str, Any]]]) -> None:
    """Whatever histories a conversation's requests carry (grown, edited, truncated, re-marked), the
    memo's chains are exactly the full computation's."""
    from worker.proxy.fingerprints import ChainMemo

    memo, tiny = ChainMemo(KEY, size=2), ChainMemo(KEY, size=1)
    for messages in requests:
        assert memo.chains("c", messages) == chains(KEY, messages)
        assert memo.chains("other", messages[:1]) == chains(KEY, messages[:1])
        assert tiny.chains("c", messages) == tiny.chains("other", messages) == chains(KEY, messages)


def test_the_chain_memo_sees_an_edit_deep_in_the_history() -> None:
    """An edit of an early message, the rest unchanged, changes every chain value from it on."""
    from worker.proxy.fingerprints import ChainMemo

    memo = ChainMemo(KEY)
    history = [_user("a"), _assistant("b"), _user("c"), _assistant("d"), _user("e")]
    first = memo.chains("c", history)
    edited = memo.chains("c", [_user("a"), _assistant("B"), *history[2:]])
    assert edited[:2] == first[:2] and all(x != y for x, y in zip(edited[2:], first[2:], strict=True))


def test_the_chain_memo_over_histories_longer_than_its_tail() -> None:
    """Past ChainMemo.TAIL messages the unchanged prefix is hashed in bulk: growing, an edit deep in
    the history or in its tail, a truncation and a regrowth all give the full computation's chains."""
    from worker.proxy.fingerprints import ChainMemo

    memo = ChainMemo(KEY)
    history = [(_user if i % 2 == 0 else _assistant)(f"turn {i}") for i in range(81)]
    requests = [
        history[:79],
        history,  # grown by two: its prefix found among the last request's lengths
        [*history, _assistant("more"), _user("again")],
        [*history[:10], _assistant("edited deep"), *history[11:]],
        [*history[:75], _assistant("edited in the tail"), *history[76:]],
        history[:40],  # truncated
        history[:44],
    ]
    for messages in requests:
        assert memo.chains("c", messages) == chains(KEY, messages)


@pytest.mark.parametrize(
    ("body", "ttl"),
    [
        ({"system": "plain"}, None),
        ({"system": [{"type": "text", "text": "s", **MARKED}]}, 300),
        ({"tools": [{"name": "t", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}, 3600),
        (
            {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]},
            300,
        ),
    ],
)
def test_the_cache_lifetime_a_request_asks_for(body: dict[str, Any], ttl: int | None) -> None:
    assert cache_ttl_seconds(body) == ttl


def test_a_client_id_is_kept_when_id_like_else_hashed_with_the_deployments_key() -> None:
    """A Codex thread id is kept as sent; an e-mail address as Chat Completions' `user` is never
    kept, and its hash depends on the deployment's key (a stored hash confirms no guess)."""
    thread = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert client_id(thread, b"k1") == thread
    hashed = client_id("alice@example.com", b"k1")
    assert hashed is not None and len(hashed) == 32 and "alice" not in hashed
    assert hashed == client_id("alice@example.com", b"k1") != client_id("alice@example.com", b"k2")
    assert client_id("", b"k1") is None and client_id(42, b"k1") is None
