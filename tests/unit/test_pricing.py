"""Pricing: the prompt-cache model bills reads, writes and uncached tokens as the provider does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import conversations, text_of
from worker.compaction.pricing import Billed, PromptCache, breakpoints, keeps_prefix, last_mark_key, total
from worker.compaction.tokens import count_request

EPHEMERAL = {"type": "ephemeral"}
BIG = text_of(1, 200)  # a system prompt well over the 1024-token minimum


def request(n: int, marks: Iterable[int] = (), system: str = BIG) -> dict[str, Any]:
    """A request of n one-block messages, with breakpoints on the messages at `marks`."""
    marked = set(marks)
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": [
                {"type": "text", "text": f"turn {i}: {text_of(i, 3)}"}
                | ({"cache_control": EPHEMERAL} if i in marked else {})
            ],
        }
        for i in range(n)
    ]
    return {"model": "claude-sonnet-4-5", "system": system, "messages": messages}


def prefix_tokens(req: dict[str, Any], n: int) -> int:
    """Tokens of the system prompt and the first n messages."""
    return count_request({**req, "messages": req["messages"][:n]})


@pytest.mark.parametrize(("gap_seconds", "reads"), [(0, True), (299, True), (300, True), (301, False)])
def test_a_repeat_reads_within_the_ttl_and_writes_after_it(gap_seconds: float, reads: bool) -> None:
    """The first request writes its prefix; the same request reads it for 300 s, then writes again."""
    cache, req = PromptCache(), request(4, marks=[3])
    tokens = count_request(req)
    first = cache.bill(req, at_seconds=1000)
    second = cache.bill(req, at_seconds=1000 + gap_seconds)
    assert first == Billed(write_tokens=tokens)
    assert second == (Billed(read_tokens=tokens) if reads else Billed(write_tokens=tokens))


def test_tokens_after_the_last_breakpoint_are_uncached() -> None:
    """Only the prefix up to the last breakpoint is cached; the rest is billed at the base price."""
    cache, req = PromptCache(), request(4, marks=[1])
    cached, tokens = prefix_tokens(req, 2), count_request(req)
    assert cache.bill(req, 0) == Billed(write_tokens=cached, uncached_tokens=tokens - cached)
    assert cache.bill(req, 10) == Billed(read_tokens=cached, uncached_tokens=tokens - cached)


def test_a_moved_breakpoint_reads_the_old_prefix_via_lookback() -> None:
    """Two messages later, a breakpoint on the new last block finds the old one's prefix."""
    cache = PromptCache()
    old, new = request(4, marks=[3]), request(6, marks=[5])
    cache.bill(old, 0)
    read = prefix_tokens(old, 4)
    assert cache.bill(new, 10) == Billed(read_tokens=read, write_tokens=count_request(new) - read)


@pytest.mark.parametrize(
    ("appended", "extra_marks", "hits"),
    [(20, [], True), (21, [], False), (30, [3], True)],
)
def test_lookback_reaches_20_blocks(appended: int, extra_marks: list[int], hits: bool) -> None:
    """A breakpoint finds a prefix at most 20 blocks back; past that only a breakpoint on it does."""
    cache, n = PromptCache(), 4 + appended
    cache.bill(request(4, marks=[3]), 0)
    new = request(n, marks=[n - 1, *extra_marks])
    read = prefix_tokens(new, 4) if hits else 0
    assert cache.bill(new, 10) == Billed(read_tokens=read, write_tokens=count_request(new) - read)


def test_without_breakpoints_everything_is_uncached() -> None:
    """A request with no cache_control neither reads nor writes, however often it is sent."""
    cache, req = PromptCache(), request(6)
    assert [cache.bill(req, t) for t in (0, 10)] == [Billed(uncached_tokens=count_request(req))] * 2


@pytest.mark.parametrize(
    ("system", "min_tokens_offset", "cached"),
    [("Be brief.", 0, False), (BIG, 0, True), (BIG, 1, False)],
)
def test_a_prefix_under_min_tokens_is_not_cached(system: str, min_tokens_offset: int, cached: bool) -> None:
    """A breakpoint whose prefix is under the minimum writes nothing and bills as uncached."""
    req = request(2, marks=[1], system=system)
    tokens = count_request(req)
    cache = PromptCache(min_tokens=1024 if system != BIG else tokens + min_tokens_offset)
    cache.bill(req, 0)
    second = cache.bill(req, 10)
    assert second == (Billed(read_tokens=tokens) if cached else Billed(uncached_tokens=tokens))


def _edit_system(req: dict[str, Any]) -> dict[str, Any]:
    return {**req, "system": "X" + req["system"][1:]}


def _edit_first_message(req: dict[str, Any]) -> dict[str, Any]:
    first = {"role": "user", "content": [{"type": "text", "text": "turn 0: changed"}]}
    return {**req, "messages": [first, *req["messages"][1:]]}


def _edit_model(req: dict[str, Any]) -> dict[str, Any]:
    return {**req, "model": "claude-haiku-4-5"}


@pytest.mark.parametrize("edit", [_edit_system, _edit_first_message, _edit_model])
def test_an_early_change_misses(edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """A different byte early in the prefix (or another model) finds no cache entry."""
    cache, req = PromptCache(), request(4, marks=[3])
    cache.bill(req, 0)
    changed = edit(req)
    assert cache.bill(changed, 10) == Billed(write_tokens=count_request(changed))


def test_string_content_is_one_text_block() -> None:
    """A message's string content caches like the same text as a single text block."""
    cache, req = PromptCache(), request(2, marks=[1])
    cache.bill(req, 0)
    as_string = {"role": "user", "content": req["messages"][0]["content"][0]["text"]}
    same = {**req, "messages": [as_string, req["messages"][1]]}
    assert cache.bill(same, 10) == Billed(read_tokens=count_request(req))


def test_a_read_refreshes_the_lifetime() -> None:
    """Reads at 200 s and 400 s both hit: each read restarts the 300 s lifetime."""
    cache, req = PromptCache(), request(4, marks=[3])
    tokens = count_request(req)
    bills = [cache.bill(req, t) for t in (0, 200, 400)]
    assert bills == [Billed(write_tokens=tokens), Billed(read_tokens=tokens), Billed(read_tokens=tokens)]


def test_more_than_four_breakpoints_raise() -> None:
    """The provider refuses a fifth breakpoint, so the model does too."""
    four, five = request(6, marks=range(4)), request(6, marks=range(5))
    assert (breakpoints(four), breakpoints(five)) == (4, 5)
    PromptCache().bill(four, 0)
    with pytest.raises(ValueError, match="5 cache_control breakpoints"):
        PromptCache().bill(five, 0)


def test_total_prices_a_run() -> None:
    """A run's total sums its bills and prices reads at 0.1×, writes at 1.25× and the rest at 1×."""
    run = total([Billed(read_tokens=100), Billed(write_tokens=100, uncached_tokens=100)])
    assert run == Billed(100, 100, 100)
    assert run.read_share == pytest.approx(1 / 3)
    assert run.cost_usd(3.0) == pytest.approx((10 + 125 + 100) * 3.0 / 1e6)
    assert run.uncached_cost_usd(3.0) == pytest.approx(300 * 3.0 / 1e6)
    assert total([]).read_share == 0.0


@st.composite
def runs(draw: st.DrawFn) -> tuple[PromptCache, list[tuple[dict[str, Any], float]]]:
    """A cache and a growing conversation sent at increasing times with up to 4 random breakpoints."""
    messages = [
        {**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
        for m in draw(conversations(max_units=5))
    ]
    system_marked = draw(st.booleans())
    system = draw(
        st.sampled_from(
            [
                "",
                "Be brief.",
                [
                    {"type": "text", "text": BIG},
                    {"type": "text", "text": "<working_memory>\nx\n</working_memory>"},
                ],
            ]
        )
    )
    if isinstance(system, list) and system_marked:
        system = [system[0], {**system[1], "cache_control": EPHEMERAL}]
    at, steps = 0.0, []
    for n in sorted(draw(st.lists(st.integers(1, len(messages)), min_size=1, max_size=4))):
        slots = [(i, j) for i in range(n) for j in range(len(messages[i]["content"]))]
        marks = draw(
            st.lists(st.sampled_from(slots), max_size=4 - breakpoints({"system": system}), unique=True)
        )
        sent = [{**m, "content": list(m["content"])} for m in messages[:n]]
        for i, j in marks:
            sent[i]["content"][j] = {**sent[i]["content"][j], "cache_control": EPHEMERAL}
        at += draw(st.sampled_from([0, 30, 299, 301, 900]))
        steps.append(({"model": "m", "system": system, "messages": sent}, at))
    cache = PromptCache(
        lookback_blocks=draw(st.sampled_from([0, 2, 20])), min_tokens=draw(st.sampled_from([0, 1024, 4096]))
    )
    return cache, steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_bills_add_up_and_never_cost_over_the_write_premium(
    run: tuple[PromptCache, list[tuple[dict[str, Any], float]]],
) -> None:
    """Every request's read, write and uncached tokens add up to count_request, and caching never
    costs more than 1.25× the uncached price."""
    cache, steps = run
    for req, at in steps:
        billed = cache.bill(req, at)
        assert min(billed.read_tokens, billed.write_tokens, billed.uncached_tokens) >= 0
        assert billed.input_tokens == count_request(req)
        assert billed.cost_usd(1e6) <= 1.25 * billed.uncached_cost_usd(1e6)


def _edited(req: dict[str, Any], i: int) -> dict[str, Any]:
    messages = [dict(m) for m in req["messages"]]
    block = messages[i]["content"][0]
    messages[i] = {**messages[i], "content": [{**block, "text": block["text"] + " (clipped)"}]}
    return {**req, "messages": messages}


@pytest.mark.parametrize(
    ("then", "kept"),
    [
        (lambda r: r, True),  # the same prompt again
        (lambda r: {**request(8, marks=[5]), "model": r["model"]}, True),  # grown at the end, new mark
        (lambda r: _edited(r, 5), True),  # a change after the last breakpoint (the newest turn's place)
        (lambda r: _edited(r, 4), False),  # a change at the breakpoint's own block
        (lambda r: _edited(r, 1), False),  # a rewrite before it (an epoch)
        (lambda r: {**r, "system": BIG + " "}, False),  # a new system prompt
        (lambda r: {**r, "messages": r["messages"][:4]}, False),  # shorter than the marked prefix
    ],
)
def test_keeps_prefix_is_the_previous_prompt_through_its_last_breakpoint(
    then: Callable[[dict[str, Any]], dict[str, Any]], kept: bool
) -> None:
    """A request keeps the previous prefix when it repeats it block for block through the previous
    request's last breakpoint, whatever comes after or where its own breakpoints are."""
    previous = request(6, marks=[2, 4])
    assert last_mark_key(previous) is not None
    assert keeps_prefix(last_mark_key(previous), then(previous)) is kept


def test_without_a_breakpoint_nothing_is_kept() -> None:
    """A request without breakpoints cached nothing, so the next one keeps no prefix of it."""
    previous = request(4)
    assert last_mark_key(previous) is None
    assert not keeps_prefix(None, previous)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(min_value=1, max_value=30), st.data())
def test_keeping_the_prefix_is_what_the_cache_reads_in_full(
    messages: list[dict[str, Any]], cut: int, data: st.DataObject
) -> None:
    """Within the lifetime, a request that keeps the previous prefix reads all of it from the
    cache (at least the tokens the previous request read and wrote), and an edit before the
    previous breakpoint does not keep it."""
    cut = min(cut, len(messages) - 1)
    first = {"system": BIG, "messages": [*messages[:cut], _marked(messages[cut])]}
    second = {"system": BIG, "messages": [*messages[:cut], _marked(messages[cut]), *messages[cut + 1 :]]}
    cache = PromptCache()
    before = cache.bill(first, 0)
    after = cache.bill(second, 1)
    assert keeps_prefix(last_mark_key(first), second)
    assert after.read_tokens >= before.read_tokens + before.write_tokens
    edited = {**second, "system": BIG + data.draw(st.sampled_from(["!", " ", "x"]))}
    assert not keeps_prefix(last_mark_key(first), edited)


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return {**message, "content": [*blocks[:-1], {**blocks[-1], "cache_control": EPHEMERAL}]}
