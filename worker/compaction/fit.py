"""Fit: a prompt within the budget, computed on the spot, for a fetch the worker has not kept up with.

Deterministic and LLM-free (the extractive note), so a fetch never waits for a model. Used only
when the published snapshot plus the tail would pass the budget (a worker down, a backlog) and no
summary prepared ahead fits either. Each layer runs only if the previous one was not enough.
"""

from __future__ import annotations

from worker.compaction.clip import Clip
from worker.compaction.model import Policy, Transcript
from worker.compaction.pipeline import Compacted, compact

# The last resort clips everything, ever tighter (the full texts stay readable by ref).
SQUEEZE_CLIP_TOKENS = (400, 100, 20)


def fit(t: Transcript, policy: Policy) -> Compacted:
    """The transcript compacted until its tokens are within policy.budget_tokens.

    Layers: the usual stages with an extractive summary; a forced summary that keeps only the
    last tool unit; then clipping every block, the keep window and task included.
    """
    budget = policy.budget_tokens
    out = compact(t, policy, summarize=True)
    if out.tokens <= budget:
        return out
    forced = compact(out.transcript, policy, summarize=True, force=True)
    reports = out.reports + forced.reports
    current = forced.transcript
    for clip_tokens in SQUEEZE_CLIP_TOKENS:
        if current.tokens() <= budget:
            break
        current = Clip(clip_tokens, policy.clip_head_share, arg_clip_chars=200, whole=True)(current)
    return Compacted(current, reports)
