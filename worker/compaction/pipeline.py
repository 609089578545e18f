"""The recipe: compact a session's transcript, stage by stage.

Public entry points (the worker, the API and the CLI call only these):
    compact(transcript, policy, summarize=, force=, focus=, summarizer=) -> Compacted  (dedup, clip, summarize)
and, in assemble.py, assemble(transcript) -> {"system": [...], "messages": [...]}.
Ingesting an append (normalize, redact, offload, count) is worker/ingest.py: it uses redaction too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.compaction.clip import Clip
from worker.compaction.dedup import Dedup
from worker.compaction.model import Policy, StageReport, Transcript
from worker.compaction.ports import Summarizer, SummarizerError
from worker.compaction.summarize import Summarize


class Stage(Protocol):
    def __call__(self, t: Transcript) -> Transcript: ...


@dataclass(frozen=True, slots=True)
class Compacted:
    transcript: Transcript
    reports: tuple[StageReport, ...]
    error: str | None = None  # a summarizer failure, recorded; the structural result stands

    @property
    def tokens(self) -> int:
        return self.transcript.tokens()


def default_stages(
    policy: Policy,
    *,
    summarize: bool = False,
    force: bool = False,
    focus: str | None = None,
    summarizer: Summarizer | None = None,
    trigger_tokens: int | None = None,
) -> list[Stage]:
    """The compaction recipe, cheapest layer first; summarization only when asked for (from
    `trigger_tokens`, default the policy's summarize trigger)."""
    keep = policy.keep_tokens
    stages: list[Stage] = [
        Dedup(min_tokens=policy.dedup_min_tokens, keep_tokens=keep),
        Clip(policy.clip_tokens, policy.clip_head_share, policy.arg_clip_chars, keep_tokens=keep),
    ]
    if summarize:
        stages.append(
            Summarize(
                trigger_tokens=policy.summarize_trigger_tokens if trigger_tokens is None else trigger_tokens,
                target_tokens=policy.summary_target_tokens,
                keep_tokens=keep,
                max_note_tokens=int(policy.budget_tokens * policy.handoff_max_share),
                max_notes_tokens=int(policy.budget_tokens * policy.notes_max_share),
                max_stack_tokens=int(policy.budget_tokens * policy.notes_stack_share),
                turn_trigger=policy.turn_trigger,
                force=force,
                focus=focus,
                summarizer=summarizer,
                stack=policy.stack_notes,
            )
        )
    return stages


def run_stages(t: Transcript, stages: Sequence[Stage]) -> Compacted:
    """Run stages in order, reporting tokens before and after each."""
    reports = []
    for stage in stages:
        before = t
        t = stage(t)
        reports.append(_report(stage, before, t))
    return Compacted(t, tuple(reports))


def _report(stage: Stage, before: Transcript, after: Transcript) -> StageReport:
    old = {turn.seq: turn for turn in before.turns}
    changed = sum(1 for turn in after.turns if old.get(turn.seq, turn) is not turn)
    new_files = len(after.files) - len(before.files)
    counts = {
        "turns_changed": changed,
        "files": new_files,
        "turns_evicted": len(before.turns) - len(after.turns),
    }
    return StageReport(type(stage).__name__, before.tokens(), after.tokens(), counts)


def compact(
    t: Transcript,
    policy: Policy,
    *,
    summarize: bool = False,
    force: bool = False,
    focus: str | None = None,
    summarizer: Summarizer | None = None,
    trigger_tokens: int | None = None,
) -> Compacted:
    """Compact a transcript. Below the structural trigger (and unforced) it comes back unchanged.

    `summarize` lets the Summarize stage run (it acts only past its trigger, or when forced; a
    summary prepared ahead passes the pre-trigger as `trigger_tokens`). It
    evicts only the settled span: the keep window holds at least the last tool unit, so a tool
    call still waiting for its result is never summarized. A failing summarizer leaves the
    structural result and reports why.
    """
    over_turns = policy.turn_trigger > 0 and len(t.turns) > policy.turn_trigger
    if t.tokens() <= policy.structural_trigger_tokens and not force and not over_turns:
        return Compacted(t, ())
    try:
        out = run_stages(
            t,
            default_stages(
                policy,
                summarize=summarize,
                force=force,
                focus=focus,
                summarizer=summarizer,
                trigger_tokens=trigger_tokens,
            ),
        )
    except SummarizerError as exc:
        structural = run_stages(t, default_stages(policy))
        failed = StageReport("Summarize", structural.tokens, structural.tokens, {"failed": 1})
        return Compacted(
            structural.transcript, (*structural.reports, failed), error=str(exc) or type(exc).__name__
        )
    # Safety net for the "never grows" invariant: a stage that would grow the prompt is undone.
    return out if out.tokens <= t.tokens() else Compacted(t, out.reports)


def summarized(result: Compacted) -> bool:
    """Whether a compaction evicted turns into a handoff note."""
    return any(r.stage == "Summarize" and r.counts.get("turns_evicted") for r in result.reports)
