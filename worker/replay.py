"""Replay: feed a transcript turn by turn as an agent would, and measure what it is served.

The agent appends each message and fetches before each model call (every time the next message
is the assistant's). Between appends the worker runs in the agent's idle time, exactly as the
service does: pipeline.compact on snapshot + tail, then epochs.decide. Deterministic, offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from worker.compaction.assemble import status_note
from worker.compaction.epochs import (
    Decision,
    decide,
    extend,
    request_bytes,
    served_request,
    shared_prefix_share,
)
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.normalize import normalize_message
from worker.compaction.pipeline import compact, ingest, is_quiet
from worker.compaction.redact import Redactor
from worker.compaction.tokens import count_message, count_request
from worker.compaction.validate import request_problems


@dataclass(frozen=True, slots=True)
class Fetch:
    """One fetch: what was served before a model call."""

    turn: int  # index of the assistant message about to be generated
    prompt_tokens: int
    raw_tokens: int  # what an uncompacted client would have sent
    reused_share: float  # byte-identical prefix shared with the previous fetch
    epoch: int
    valid: bool


@dataclass(frozen=True, slots=True)
class ReplayReport:
    fetches: tuple[Fetch, ...]
    epochs: int
    budget_tokens: int
    price_per_mtok: float
    archive_refs: tuple[str, ...]

    @property
    def max_prompt_tokens(self) -> int:
        return max((f.prompt_tokens for f in self.fetches), default=0)

    @property
    def share_of_fetches_reusing_90(self) -> float:
        later = self.fetches[1:]
        return sum(f.reused_share >= 0.9 for f in later) / len(later) if later else 1.0

    def cost(self, *, compacted: bool) -> float:
        tokens = sum(f.prompt_tokens if compacted else f.raw_tokens for f in self.fetches)
        return tokens / 1e6 * self.price_per_mtok

    def summary(self) -> dict[str, Any]:
        return {
            "fetches": len(self.fetches),
            "epochs": self.epochs,
            "budget_tokens": self.budget_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "all_under_budget": self.max_prompt_tokens <= self.budget_tokens,
            "all_valid": all(f.valid for f in self.fetches),
            "fetches_reusing_90pct": round(self.share_of_fetches_reusing_90, 3),
            "mean_reused_share": round(
                sum(f.reused_share for f in self.fetches) / max(1, len(self.fetches)), 3
            ),
            "input_cost_usd_compacted": round(self.cost(compacted=True), 4),
            "input_cost_usd_uncompacted": round(self.cost(compacted=False), 4),
            "price_per_mtok": self.price_per_mtok,
        }

    def rows(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self.fetches]


def replay(
    system: str, messages: Sequence[dict[str, Any]], policy: Policy, *, price_per_mtok: float = 3.0
) -> ReplayReport:
    """Append, fetch before each assistant message, let the worker compact in between."""
    redactor = Redactor(b"replay")
    turns = ingest(messages, first_seq=1, redactor=redactor, policy=policy).turns
    raw = [count_message(normalize_message(m)[1]) for m in messages]
    snapshot = Transcript(system=system, turns=())
    tail: list[Turn] = []
    fetches: list[Fetch] = []
    previous = b""
    epoch, raw_tokens = 0, 0
    for i, turn in enumerate(turns):
        tail.append(turn)
        raw_tokens += raw[i]
        if i + 1 < len(turns) and turns[i + 1].role == "assistant":
            request = served_request(snapshot, tail, status_note(0, policy.budget_tokens, ()))
            body = request_bytes(request)
            fetches.append(
                Fetch(
                    turn=i + 1,
                    prompt_tokens=count_request(request),
                    raw_tokens=raw_tokens,
                    reused_share=shared_prefix_share(previous, body) if previous else 0.0,
                    epoch=epoch,
                    valid=not request_problems(request),
                )
            )
            previous = body
        # the worker's turn, in the idle time before the next append
        current = extend(snapshot, tail)
        result = compact(current, policy, quiet=is_quiet(current))
        verdict = decide(current, result.transcript, policy)
        if verdict.decision is Decision.NEW_EPOCH:
            snapshot, tail, epoch = result.transcript, [], epoch + 1
        elif verdict.decision is Decision.EXTEND:
            snapshot, tail = current, []
    refs = snapshot.handoff.archive_refs if snapshot.handoff else ()
    return ReplayReport(tuple(fetches), epoch, policy.budget_tokens, price_per_mtok, refs)


def plot(report: ReplayReport, path: str, title: str) -> None:
    """Prompt size per fetch, compacted vs raw, with the budget line (the slope is the bug)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [f.turn for f in report.fetches]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(xs, [f.raw_tokens for f in report.fetches], label="without compaction", color="#bbbbbb")
    ax.plot(xs, [f.prompt_tokens for f in report.fetches], label="served by compactd", color="#1f77b4")
    ax.axhline(report.budget_tokens, color="#d62728", linestyle="--", label="budget")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
