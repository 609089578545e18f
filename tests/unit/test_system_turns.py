"""Claude Code's role "system" messages fold into user turns the same way whichever form they take."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.compaction.validate import request_problems
from worker.proxy.system_turns import fold_system_messages

ENV = "# Environment\nPrimary working directory: /work"
REMINDER = {"type": "text", "text": f"<system-reminder>\n{ENV}\n</system-reminder>"}
USER = {
    "role": "user",
    "content": [
        {"type": "text", "text": "<system-reminder>attribution</system-reminder>"},
        {"type": "text", "text": "Run the checks"},
    ],
}
AS_BLOCKS = {
    "role": "system",
    "content": [{"type": "text", "text": ENV, "cache_control": {"type": "ephemeral"}}],
}
AS_STRING = {"role": "system", "content": ENV}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"}]}

CASES: dict[str, tuple[list[Any], list[Any]]] = {
    "no system message: the same list": ([USER, CALL, RESULT], [USER, CALL, RESULT]),
    "first request (system last, blocks)": (
        [USER, AS_BLOCKS],
        [{**USER, "content": [*USER["content"], REMINDER]}],
    ),
    "later request (system second, string)": (
        [USER, AS_STRING, CALL, RESULT],
        [{**USER, "content": [*USER["content"], REMINDER]}, CALL, RESULT],
    ),
    "after an assistant turn: after the next user message's results": (
        [USER, CALL, AS_STRING, RESULT],
        [USER, CALL, {**RESULT, "content": [*RESULT["content"], REMINDER]}],
    ),
    "system first: into the next user message": (
        [AS_STRING, USER],
        [{**USER, "content": [*USER["content"], REMINDER]}],
    ),
    "empty system message: dropped": ([USER, {"role": "system", "content": ""}], [USER]),
}


@pytest.mark.parametrize("name", CASES)
def test_system_messages_fold_into_user_turns(name: str) -> None:
    """Each shape Claude Code sends folds to the expected user and assistant turns."""
    given_messages, expected = CASES[name]
    assert fold_system_messages(given_messages) == expected


def test_the_first_and_second_request_fold_to_the_same_start() -> None:
    """Blocks with cache_control (request 1) and a string (request 2) fold to the same first turn,
    so the conversation reconciles instead of diverging at its second request."""
    first = fold_system_messages([USER, AS_BLOCKS])
    second = fold_system_messages([USER, AS_STRING, CALL, RESULT])
    assert second[: len(first)] == first


turns = st.lists(st.sampled_from([USER, AS_STRING, AS_BLOCKS, CALL, RESULT]), min_size=1, max_size=8)


@given(turns)
def test_folding_leaves_no_system_message_and_keeps_a_valid_history_valid(messages: list[Any]) -> None:
    """No role "system" message survives; a history valid without its system messages stays valid."""
    folded = fold_system_messages(messages)
    assert all(m["role"] in ("user", "assistant") for m in folded)
    without = [m for m in messages if m["role"] != "system"]
    if without and not request_problems({"messages": without}):
        assert request_problems({"messages": folded}) == []
