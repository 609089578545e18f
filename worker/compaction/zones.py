"""Zones by age: where the verbatim keep window starts, and where a span may be cut.

A cut never falls inside a tool unit: a user message carrying tool_result blocks stays with the
assistant message whose tool_use blocks it answers (parallel calls included).
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.compaction.model import Turn


def is_result_turn(turn: Turn) -> bool:
    return turn.role == "user" and any(b.get("type") == "tool_result" for b in turn.content)


def is_cut_point(turns: Sequence[Turn], i: int) -> bool:
    """A span may start at turns[i]: it does not answer a tool call made before it."""
    return 0 < i <= len(turns) and (i == len(turns) or not is_result_turn(turns[i]))


def keep_start(turns: Sequence[Turn], keep_tokens: int) -> int:
    """Index of the first turn of the keep window: the newest ~keep_tokens, whole units, and at
    least the last full tool unit (assistant call plus its results) when there is one, else the
    newest turn (what the model answers next stays verbatim, however large)."""
    if not turns:
        return 0
    total, i = 0, len(turns)
    while i > 1 and total + turns[i - 1].tokens <= keep_tokens:
        i -= 1
        total += turns[i].tokens
    last_unit = _last_unit_start(turns)
    i = min(i, last_unit if last_unit is not None else len(turns) - 1)
    while i > 1 and not is_cut_point(turns, i):
        i -= 1
    return max(i, 1) if len(turns) > 1 else 0


def _last_unit_start(turns: Sequence[Turn]) -> int | None:
    for i in range(len(turns) - 1, 0, -1):
        if turns[i].role == "assistant" and turns[i].tool_use_ids():
            return i
    return None


def first_kept(turns: Sequence[Turn]) -> int:
    """Turns before this index are the task (the first user message) and always stay."""
    return 1 if turns and turns[0].role == "user" else 0
