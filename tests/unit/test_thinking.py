"""Thinking and its prefix (worker/compaction/thinking.py): which blocks a served prompt may carry,
checked against the provider's rule as the stand-ins play it (tests/fakes/preserved_thinking.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.preserved_thinking import THINKING, Binder
from tests.strategies import conversations
from worker.compaction.model import Handoff, Policy, Transcript, Turn
from worker.compaction.thinking import (
    OMITTED,
    binds_thinking,
    changed_from,
    has_thinking,
    kept_after_rewrite,
    strip_through,
    stripped,
)
from worker.compaction.tokens import count_message
from worker.flows.serve import served_tail
from worker.flows.simulate import Pace, replay


@pytest.mark.parametrize(
    ("model", "binds"),
    [
        ("claude-opus-5-5", True),
        ("claude-sonnet-5-5", True),
        ("claude-haiku-5-5", True),
        ("claude-fable-5-1", True),
        ("claude-mythos-5-2", True),
        ("claude-opus-6", True),
        ("claude-fable-5", False),  # the check starts with Fable 5.1
        ("claude-opus-5", False),
        ("claude-sonnet-5", False),
        ("claude-sonnet-4-5-20250929", False),  # a date is not a minor version
        ("claude-opus-4-5", False),
        ("claude-3-5-sonnet-20240620", False),
        ("gpt-5", True),  # not known: taken to bind (a dropped block costs less than a refused request)
        (None, True),
    ],
)
def test_which_models_bind_thinking_to_its_prefix(model: str | None, binds: bool) -> None:
    """The models that run the prefix check, by name (platform.claude.com, "Preserved thinking")."""
    assert binds_thinking(model) is binds


def turn(seq: int, role: str, *blocks: dict[str, Any]) -> Turn:
    return Turn(seq, role, tuple(blocks), count_message(tuple(blocks)))  # type: ignore[arg-type]


THOUGHT = {"type": "thinking", "thinking": "why not", "signature": "s1"}
SAID = {"type": "text", "text": "done"}


def test_a_turn_without_its_thinking_counts_fewer_tokens_and_is_never_empty() -> None:
    """Thinking goes whole (never edited); a turn of thinking alone says it was omitted."""
    full = turn(2, "assistant", THOUGHT, SAID)
    assert stripped(full).content == (SAID,) and stripped(full).tokens == count_message((SAID,))
    alone = turn(3, "assistant", THOUGHT)
    assert stripped(alone).content == (OMITTED,) and stripped(alone).tokens == count_message((OMITTED,))
    assert stripped(turn(4, "user", SAID)) == turn(4, "user", SAID)


def test_the_tail_keeps_thinking_only_after_the_version_its_epoch_was_first_served_at() -> None:
    """Turns up to `served_from` were produced on an earlier prompt; None keeps none."""
    tail = [turn(5, "assistant", THOUGHT, SAID), turn(6, "user", SAID), turn(7, "assistant", THOUGHT, SAID)]
    assert [has_thinking(t) for t in strip_through(tail, 4)] == [True, False, True]
    assert [has_thinking(t) for t in strip_through(tail, 6)] == [False, False, True]
    assert not any(has_thinking(t) for t in strip_through(tail, None))
    rows = [(t.role, list(t.content), t.tokens) for t in tail]
    served, removed = served_tail(rows, 5, 6)
    assert [any(b["type"] in THINKING for b in c) for _, c, _ in served] == [False, False, True]
    assert removed == tail[0].tokens - stripped(tail[0]).tokens


def test_a_rewrite_changes_from_its_first_changed_turn_the_top_or_after_the_task() -> None:
    """The first changed position: a clipped turn, the top (system or memory block), or right
    after the task when a handoff note goes in."""
    task = turn(1, "user", SAID)
    a, b = turn(2, "assistant", THOUGHT, SAID), turn(3, "user", SAID)
    current = Transcript("s", (task, a, b))
    assert changed_from(current, current) is None
    assert (
        changed_from(current, Transcript("s", (task, a, turn(3, "user", {"type": "text", "text": "x"})))) == 3
    )
    assert changed_from(current, Transcript("s", (task, a, b), memory="m")) == 0
    noted = Transcript("s", (task, b), handoff=Handoff("note", ("h_1",), ((2, 2),)))
    assert changed_from(current, noted) == 2
    assert not any(has_thinking(t) for t in kept_after_rewrite(current, noted).turns)


class Signing:
    """A model with preserved thinking: each answer starts with a block signed on its request."""

    def __init__(self) -> None:
        self.binder = Binder()
        self.produced: dict[str, str] = {}
        self.invalid: list[str] = []

    def answer(self, request: dict[str, Any], message: dict[str, Any], epoch: str) -> dict[str, Any]:
        block = self.binder.block(request, "thinking it over")
        self.produced[block["signature"]] = epoch
        content = (
            [b for b in message["content"] if b.get("type") not in THINKING]
            if isinstance(message["content"], list)
            else [{"type": "text", "text": message["content"]}]
        )
        return {**message, "content": [block, *content]}

    def observe(self, request: dict[str, Any], epoch: str) -> tuple[bool, int, int]:
        checked = self.binder.check(request)
        if not checked.valid and checked.problem is not None:
            self.invalid.append(f"{epoch}: {checked.problem}")
        due = {s for s, e in self.produced.items() if e == epoch}
        served = {
            b["signature"]
            for m in request["messages"]
            for b in m["content"]
            if b.get("type") in THINKING and b.get("signature") in due
        }
        return checked.valid, len(due), len(served)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    conversations(max_units=40),
    st.sampled_from([8_000, 16_000, 32_000]),
    st.sampled_from([0.05, 1.0]),
    st.sampled_from([0.0, 0.2, 3.0]),
)
def test_every_served_prompt_passes_the_prefix_check(
    messages: list[dict[str, Any]], window: int, pace: float, job_seconds: float
) -> None:
    """Whatever the pace and however far behind the worker, no fetch carries a thinking block on a
    changed prefix or leaves a gap in the run it keeps; within an epoch no fallback interrupted,
    every block produced in it is served on its own prefix."""
    model = Signing()
    policy = Policy(context_window=window, output_reserve=window // 8)
    report = replay(
        "system", messages, policy, pace=Pace(seconds=pace), job_seconds=job_seconds, thinking=model
    )
    assert model.invalid == []
    assert all(f.thinking_valid for f in report.fetches)
    if not any(f.fallback for f in report.fetches):
        assert all(f.thinking_kept == f.thinking_due for f in report.fetches)


def test_a_model_that_does_not_bind_thinking_is_served_all_of_it() -> None:
    """An older model checks no prefix: every block it produced stays, across every rewrite."""
    model = Signing()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the tests."}]
    for n in range(30):
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"make {n}"}}
        out = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"step {n} output\n" * 300}
        messages += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [out]}]
    policy = Policy(context_window=16_000, output_reserve=2_000)
    report = replay("system", messages, policy, pace=Pace(0.5), job_seconds=0.0, thinking=model, binds=False)
    assert report.epochs >= 2
    answers = [m for m in report.final_request["messages"] if m["role"] == "assistant"]
    assert len(answers) >= 3 and all(m["content"][0]["type"] == "thinking" for m in answers)
