"""The recipe: ingest one append's messages, and compact a session's transcript, stage by stage.

Public entry points (the worker, the API and the CLI call only these):
    ingest(messages, first_seq=, redactor=, policy=, after=) -> Ingested   (normalize, redact, offload, count)
    compact(transcript, policy, summarize=, force=, focus=, summarizer=) -> Compacted  (dedup, clip, summarize)
and, in assemble.py, assemble(transcript) -> {"system": [...], "messages": [...]}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.compaction.assemble import strip_cache_control
from worker.compaction.clip import Clip
from worker.compaction.dedup import Dedup
from worker.compaction.model import Block, FileWrite, Policy, StageReport, Transcript, Turn
from worker.compaction.normalize import normalize_message
from worker.compaction.offload import Offload
from worker.compaction.ports import Summarizer, SummarizerError
from worker.compaction.summarize import Summarize
from worker.compaction.tokens import count_message
from worker.redaction import Redactor
from worker.redaction.seams import Message, redact_seams


class Stage(Protocol):
    def __call__(self, t: Transcript) -> Transcript: ...


@dataclass(frozen=True, slots=True)
class Ingested:
    turns: tuple[Turn, ...]
    files: tuple[FileWrite, ...]
    # `after`'s blocks with the part of a secret that crosses into the first message redacted
    # (None: nothing crosses)
    after: tuple[Block, ...] | None = None


@dataclass(frozen=True, slots=True)
class Compacted:
    transcript: Transcript
    reports: tuple[StageReport, ...]
    error: str | None = None  # a summarizer failure, recorded; the structural result stands

    @property
    def tokens(self) -> int:
        return self.transcript.tokens()


def ingest(
    messages: Sequence[Any],
    *,
    first_seq: int,
    redactor: Redactor,
    policy: Policy,
    after: Message | None = None,
) -> Ingested:
    """Normalize, redact, offload and count each message, before anything is persisted. A secret
    split between two consecutive messages is redacted on both sides (worker/redaction/seams.py),
    the boundary with `after` (the stored message these follow, redacted already) included.

    Raises InvalidTranscript naming the bad message. Offloaded payloads come back as files.
    """
    normalized = [normalize_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    # a secret cut in two by a message boundary first: neither half is recognisable alone
    # (the stored message this append follows first: its end is scanned with the new first message)
    changed = None
    if after is not None:
        before, *seamed = redact_seams([after, *normalized], redactor, stored_first=True)
        changed = before[1] if before[1] is not after[1] else None
    else:
        seamed = redact_seams(normalized, redactor)
    turns = []
    for i, (role, blocks) in enumerate(seamed):
        blocks = tuple(redactor.redact_block(strip_cache_control(b)) for b in blocks)
        turns.append(Turn(seq=first_seq + i, role=role, content=blocks, tokens=count_message(blocks)))  # type: ignore[arg-type]
    offloaded = Offload(policy.offload_tokens, policy.preview_tokens)(
        Transcript(system="", turns=tuple(turns))
    )
    return Ingested(turns=offloaded.turns, files=offloaded.files, after=changed)


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
                turn_trigger=policy.turn_trigger,
                force=force,
                focus=focus,
                summarizer=summarizer,
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


def is_quiet(t: Transcript, *, busy: bool = False) -> bool:
    """A quiet point: no tool call waiting for its result and the client not busy."""
    last = t.turns[-1] if t.turns else None
    return not busy and not (last is not None and last.role == "assistant" and last.tool_use_ids())


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
