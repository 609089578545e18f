"""The recipe: ingest one append's messages, and compact a session's transcript, stage by stage.

Public entry points (the worker, the API and the CLI call only these):
    ingest(messages, first_seq=, redactor=, policy=) -> Ingested   (normalize, redact, offload, count)
    compact(transcript, policy, quiet=, summarizer=) -> Compacted  (clip, dedup, summarize)
and, in assemble.py, assemble(transcript) -> {"system": [...], "messages": [...]}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.compaction.model import FileWrite, Policy, StageReport, Transcript, Turn
from worker.compaction.normalize import normalize_message
from worker.compaction.redact import Redactor
from worker.compaction.tokens import count_message


class Stage(Protocol):
    def __call__(self, t: Transcript) -> Transcript: ...


@dataclass(frozen=True, slots=True)
class Ingested:
    turns: tuple[Turn, ...]
    files: tuple[FileWrite, ...]


@dataclass(frozen=True, slots=True)
class Compacted:
    transcript: Transcript
    reports: tuple[StageReport, ...]

    @property
    def tokens(self) -> int:
        return self.transcript.tokens()


def ingest(messages: Sequence[Any], *, first_seq: int, redactor: Redactor, policy: Policy) -> Ingested:
    """Normalize, redact and count each message; raises InvalidTranscript naming the bad message."""
    turns = []
    for i, message in enumerate(messages):
        role, blocks = normalize_message(message, f"messages[{i}]")
        blocks = tuple(redactor.redact_block(b) for b in blocks)
        turns.append(Turn(seq=first_seq + i, role=role, content=blocks, tokens=count_message(blocks)))  # type: ignore[arg-type]
    return Ingested(turns=tuple(turns), files=())


def default_stages(policy: Policy, *, quiet: bool = False, summarizer: Any = None) -> list[Stage]:
    """The compaction recipe, cheapest layer first."""
    return []


def run_stages(t: Transcript, stages: Sequence[Stage]) -> Compacted:
    reports = []
    for stage in stages:
        before = t.tokens()
        t = stage(t)
        reports.append(StageReport(type(stage).__name__, before, t.tokens()))
    return Compacted(t, tuple(reports))


def compact(t: Transcript, policy: Policy, *, quiet: bool = False, summarizer: Any = None) -> Compacted:
    """Compact a transcript; below the structural trigger it comes back unchanged."""
    if t.tokens() <= policy.structural_trigger_tokens:
        return Compacted(t, ())
    return run_stages(t, default_stages(policy, quiet=quiet, summarizer=summarizer))
