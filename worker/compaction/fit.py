"""Fit: a prompt within the budget, computed on the spot, for a fetch the worker has not kept up with.

Deterministic and LLM-free (the extractive note), so a fetch never waits for a model. Used only
when the published snapshot plus the tail would pass the budget (a worker down, a backlog) and no
summary prepared ahead fits either. Each layer runs only if the previous one was not enough.
"""

from __future__ import annotations

from dataclasses import replace

from worker.compaction.clip import Clip
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.pipeline import Compacted, compact
from worker.compaction.tokens import count_message

_THINKING = ("thinking", "redacted_thinking")

# The last resort clips everything, ever tighter (the full texts stay readable by ref).
SQUEEZE_CLIP_TOKENS = (400, 100, 20)


def fit(t: Transcript, policy: Policy) -> Compacted:
    """The transcript compacted until its tokens are within policy.budget_tokens.

    Layers: the usual stages with an extractive summary; a forced summary that keeps only the
    last tool unit; then thinking dropped from all but the newest assistant turn (the API needs
    only that one) and every block clipped, the keep window included, ever tighter, the task too
    if that is not enough.
    """
    budget = policy.budget_tokens
    out = compact(t, policy, summarize=True)
    if out.tokens <= budget:
        return out
    forced = compact(out.transcript, policy, summarize=True, force=True)
    reports = out.reports + forced.reports
    current = forced.transcript
    if current.tokens() > budget:
        current = drop_old_thinking(current)
    # the task spared first: it is what the agent is working on, and the start of the prompt the
    # provider has cached (clipping it makes the whole prompt a cache write); if that is not
    # enough, the same squeeze again from where it started, the task included
    squeezed = squeeze(current, policy, task=False)
    if squeezed.tokens() > budget:
        squeezed = squeeze(current, policy, task=True)
    return Compacted(squeezed, reports)


def squeeze(t: Transcript, policy: Policy, *, task: bool) -> Transcript:
    """Every block clipped (the task too with `task`), ever tighter, until within the budget."""
    for clip_tokens in SQUEEZE_CLIP_TOKENS:
        if t.tokens() <= policy.budget_tokens:
            break
        t = Clip(clip_tokens, policy.clip_head_share, arg_clip_chars=200, whole=True, task=task)(t)
    return t


def drop_old_thinking(t: Transcript) -> Transcript:
    """Thinking blocks removed whole (never edited) from every assistant turn but the newest."""
    last = max((i for i, turn in enumerate(t.turns) if turn.role == "assistant"), default=-1)
    turns = [turn if i == last else _without_thinking(turn) for i, turn in enumerate(t.turns)]
    return t.with_turns(turns)


def _without_thinking(turn: Turn) -> Turn:
    if turn.role != "assistant" or not any(b.get("type") in _THINKING for b in turn.content):
        return turn
    content = tuple(b for b in turn.content if b.get("type") not in _THINKING)
    content = content or ({"type": "text", "text": "(thinking omitted)"},)
    return replace(turn, content=content, tokens=count_message(content))
