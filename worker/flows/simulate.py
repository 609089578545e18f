"""Replay: feed a transcript turn by turn at an agent's pace and measure what it is served.

The agent appends each message and fetches before each model call (every time the next message
is the assistant's). Offline, the worker is simulated on a clock: each append makes sure one job
is pending; a job starts when the worker is free, compacts what had arrived by then (the real
`epochs.step`), and its result is published only when it finishes, its duration measured (or
fixed with `job_seconds`). Fetches in between see the older snapshot plus the tail, and fall
back exactly as the service does. Every served request is priced with the provider's
prompt-cache rules from the breakpoints it carries, next to the uncompacted history.

Served as the service serves it: the working-memory block a job observes from the turns, pinned at
the top and refreshed by the job's own rule (`refreshes_memory`), the changes since in the memory
notes the user turns are appended with, and, to a model that binds thinking to its prefix, each
turn's thinking only while its prefix is the one it was produced on (worker/compaction/thinking.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any, Protocol

from worker.compaction.assemble import MEMORY_NOTE_TOKENS, assemble, finish, served_tokens, with_memory_note
from worker.compaction.epochs import (
    Decision,
    Step,
    Switch,
    covered_through,
    extend,
    fit_fallback,
    rewrites_top,
    served_request,
    step,
)
from worker.compaction.model import Policy, Transcript, Turn
from worker.compaction.normalize import normalize_message
from worker.compaction.prefixes import extends
from worker.compaction.pricing import Billed, PromptCache, keeps_prefix, last_mark_key, total
from worker.compaction.quiet import is_quiet
from worker.compaction.thinking import kept_after_rewrite, strip_all, strip_through
from worker.compaction.tokens import count_message, count_request, count_text
from worker.compaction.validate import request_problems
from worker.flows.compact import job_policy, refreshes_memory
from worker.ingest import ingest
from worker.memory.model import Event, Item, changes_note, pushed_out, render
from worker.memory.observe import observations
from worker.redaction import Redactor
from worker.store.memory import HARD_CAP_TOKENS, apply_groups

# A job's cost beyond its compute: the Celery round trip, loading and publishing (measured ~10 ms).
JOB_OVERHEAD_SECONDS = 0.01
# when the beat's sweep finds a session whose cache expired: half its interval after, on average
COLD_AFTER_SECONDS = 30.0
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # the simulated clock's zero, for memory timestamps


@dataclass(frozen=True, slots=True)
class Pace:
    """When each append happens: every `seconds`, or at the transcript's own times scaled by `factor`."""

    seconds: float = 1.0
    recorded: bool = False
    factor: float = 1.0

    def times(self, timestamps: Sequence[float | None] | None, n: int) -> list[float]:
        """Append times from 0, one per message (a message with no time of its own takes the last one)."""
        if not self.recorded:
            return [i * self.seconds for i in range(n)]
        if not timestamps or all(t is None for t in timestamps):
            raise ValueError("this transcript records no timestamps: use --pace SECONDS")
        first = next(t for t in timestamps if t is not None)
        out, last = [], 0.0
        for t in list(timestamps)[:n]:
            last = max(last, (t - first) * self.factor) if t is not None else last
            out.append(last)
        return out

    def __str__(self) -> str:
        return f"recorded x{self.factor:g}" if self.recorded else f"{self.seconds:g} s"


_RECORDED = re.compile(r"^recorded(?:x([0-9.]+))?$")


def parse_pace(text: str) -> Pace:
    """'0.25' (seconds between appends), 'recorded' or 'recordedx0.1' (the transcript's times, scaled)."""
    m = _RECORDED.match(text.strip())
    if m:
        return Pace(recorded=True, factor=float(m.group(1) or 1.0))
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"--pace takes SECONDS or recorded[xF], not {text!r}") from None
    if seconds < 0:
        raise ValueError("--pace must not be negative")
    return Pace(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Fetch:
    """One fetch: what was served before a model call, and what the provider would bill for it."""

    turn: int  # index of the assistant message about to be generated
    at_seconds: float
    prompt_tokens: int  # the served token_count
    request_tokens: int  # the served request counted whole (system, every block)
    budget_tokens: int
    raw_tokens: int  # what an uncompacted client would have sent
    epoch: int
    valid: bool
    fallback: str | None
    billed: Billed
    raw_billed: Billed
    latency_ms: float = 0.0  # over HTTP: the fetch's round trip
    # the request starts with the previous one through its last breakpoint (pricing.keeps_prefix)
    kept_prefix: bool = False
    # the request repeats the previous one whole and only adds at the end (prefixes.extends): a
    # fetch that does not is a rewrite
    extended: bool = True
    # with a model that signs its thinking (`ThinkingModel`): every thinking block passed the
    # provider's prefix check; of the blocks produced in this fetch's epoch before it, how many
    # were due and how many it served on their own prefix
    thinking_valid: bool = True
    thinking_due: int = 0
    thinking_kept: int = 0


class ThinkingModel(Protocol):
    """The model's side of a replay with preserved thinking: it answers each fetch with a signed
    thinking block bound to the request it was served, and checks every request it gets."""

    def answer(self, request: dict[str, Any], message: dict[str, Any], epoch: str) -> dict[str, Any]:
        """The transcript's assistant `message` as this model returns it for `request`."""
        ...

    def observe(self, request: dict[str, Any], epoch: str) -> tuple[bool, int, int]:
        """(every block valid, blocks produced in `epoch` so far, of them served on their own prefix)."""
        ...


def epoch_label(epoch: int, fallback: str | None) -> str:
    """What a fetch's prompt belongs to: its epoch, or the fallback it served instead (a rewrite
    of its own)."""
    return f"{epoch}" if fallback is None else f"{epoch}:{fallback}"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    fetches: tuple[Fetch, ...]
    epochs: int
    budget_tokens: int
    price_per_mtok: float
    pace: str
    switches: dict[str, int] = field(default_factory=dict)
    final_request: dict[str, Any] = field(default_factory=dict)
    archive_refs: tuple[str, ...] = ()
    turns: int = 0  # messages replayed

    @property
    def max_prompt_tokens(self) -> int:
        return max((f.prompt_tokens for f in self.fetches), default=0)

    @property
    def over_budget(self) -> int:
        """Fetches over budget by the service's token_count or by counting the request itself."""
        return sum(max(f.prompt_tokens, f.request_tokens) > f.budget_tokens for f in self.fetches)

    def summary(self) -> dict[str, Any]:
        bill = total(f.billed for f in self.fetches)
        raw_bill = total(f.raw_billed for f in self.fetches)
        fallbacks = [f.fallback for f in self.fetches if f.fallback]
        later = self.fetches[1:]
        out = {
            "pace": self.pace,
            "fetches": len(self.fetches),
            "over_budget": self.over_budget,
            "all_valid": all(f.valid for f in self.fetches),
            "epochs": self.epochs,
            "budget_tokens": self.budget_tokens,
            "max_prompt_tokens": self.max_prompt_tokens,
            "deadline_switches": self.switches.get("deadline", 0),
            "quiet_switches": self.switches.get("quiet", 0),
            "cold_switches": self.switches.get("cold", 0),
            "fallbacks_pending": fallbacks.count("pending"),
            "fallbacks_fit": fallbacks.count("fit"),
            "fetches_reading_cache": round(
                sum(f.billed.read_tokens > 0 for f in later) / max(1, len(later)), 3
            ),
            "fetches_keeping_prefix": round(sum(f.kept_prefix for f in later) / max(1, len(later)), 3),
            "cache_read_share": round(bill.read_share, 3),
            "cost_usd": round(bill.cost_usd(self.price_per_mtok), 4),
            "cost_usd_uncompacted": round(raw_bill.cost_usd(self.price_per_mtok), 4),
            "cost_ratio": round(bill.cost_usd(1) / max(1e-12, raw_bill.cost_usd(1)), 3),
            "uncompacted_cache_read_share": round(raw_bill.read_share, 3),
            "input_tokens": bill.input_tokens,
            "input_tokens_uncompacted": raw_bill.input_tokens,
            "price_per_mtok": self.price_per_mtok,
        }
        out |= self.rewrites_summary()
        latencies = sorted(f.latency_ms for f in self.fetches if f.latency_ms)
        if latencies:
            out["fetch_p50_ms"] = round(latencies[len(latencies) // 2], 2)
            out["fetch_p99_ms"] = round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2)
        return out

    def rewrites_summary(self) -> dict[str, Any]:
        """Rewrites (fetches that do not extend the one before) per 100 turns, and with a thinking
        model, the share of fetches whose thinking passed the prefix check and of the thinking
        produced in each epoch that its later fetches served on its own prefix."""
        later = self.fetches[1:]
        rewrites = sum(not f.extended for f in later)
        out: dict[str, Any] = {
            "rewrites": rewrites,
            "rewrites_per_100_turns": round(100 * rewrites / max(1, self.turns), 2),
        }
        due = sum(f.thinking_due for f in self.fetches)
        if due or any(not f.thinking_valid for f in self.fetches):
            out["thinking_valid_fetches"] = round(
                sum(f.thinking_valid for f in self.fetches) / max(1, len(self.fetches)), 3
            )
            out["thinking_own_prefix"] = round(sum(f.thinking_kept for f in self.fetches) / max(1, due), 3)
        return out

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for f in self.fetches:
            row = asdict(f)
            row["billed"], row["raw_billed"] = asdict(f.billed), asdict(f.raw_billed)
            rows.append(row)
        return rows


class RawHistory:
    """The uncompacted history a client without compactd sends, with the same breakpoint rule
    (end of the system prompt, the newest message, the previous fetch's newest message)."""

    def __init__(self, system: str) -> None:
        self.system = (
            [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}] if system else []
        )
        self.messages: list[dict[str, Any]] = []
        self.tokens = count_text(system) if system else 0

    def add(self, message: dict[str, Any]) -> None:
        role, blocks = normalize_message(message)
        self.messages.append({"role": role, "content": list(blocks)})
        self.tokens += count_message(blocks)

    def request(self) -> dict[str, Any]:
        return {"system": self.system, "messages": finish(self.messages)}


@dataclass(frozen=True, slots=True)
class _Job:
    """A job in flight: what it publishes when it finishes."""

    finish: float
    result: Step
    publish: Transcript  # result.publish with the memory block it pins, its thinking as served
    through: int
    pinned: tuple[Item, ...]  # the memory items the published block renders
    pinned_at: int  # len(_Sim.events) when they were
    noted: bool  # the publish summarized or rendered the block: the next note starts from it
    pending: Transcript | None  # a summary to keep prepared, as the service stores it


@dataclass
class _Sim:
    """The simulated service state for one session: snapshot, tail, prepared summary, the worker,
    working memory (items observed so far, those the pinned block renders, those the prompt shows
    with its memory notes), and the version the epoch was first served at."""

    policy: Policy
    snapshot: Transcript
    binds: bool = True  # the model binds thinking to its prefix (thinking.binds_thinking)
    tail: list[Turn] = field(default_factory=list)
    pending: Transcript | None = None
    epoch: int = 0
    claimed_at: float | None = None  # an append claimed a job at this time
    free_at: float = 0.0
    inflight: _Job | None = None
    switches: dict[str, int] = field(default_factory=dict)
    items: tuple[Item, ...] = ()
    observed_through: int = 0
    pinned: tuple[Item, ...] | None = None  # None: nothing published yet (no block)
    events: list[Event] = field(default_factory=list)  # every memory event, oldest first
    pinned_at: int = 0  # len(events) when the pinned block was rendered
    noted: tuple[Item, ...] = ()  # the memory the prompt shows: the block, then its notes
    noted_at: int = 0  # len(events) then
    restate: bool = False  # a summary archived turns since the block: the next note says it all
    version: int = 0  # the last seq appended
    served_from: int | None = 0  # Entry.served_from of the published epoch (epoch 0: 0)
    cache_ttl_seconds: float = 300.0  # the provider cache's lifetime (Settings.cache_ttl_seconds)
    last_append_at: float = 0.0
    cold_done: float | None = None  # the append time whose idle gap had its cold job


def replay(
    system: str,
    messages: Sequence[dict[str, Any]],
    policy: Policy,
    *,
    pace: Pace | None = None,
    timestamps: Sequence[float | None] | None = None,
    job_seconds: float | None = None,
    price_per_mtok: float = 3.0,
    redactor: Redactor | None = None,
    upstream: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    thinking: ThinkingModel | None = None,
    binds: bool = True,
    cache_ttl_seconds: float = 300.0,
) -> ReplayReport:
    """Append at `pace` (default one message a second), fetch before each assistant message, and
    run the worker's jobs on the same clock. `job_seconds` fixes a job's duration (default: measured);
    `redactor` defaults to the standard profile; `upstream` maps a served prompt to the request
    the provider receives (the drop-in proxy's rewrite; default: the prompt as served); `thinking`
    plays a model with preserved thinking (drive.replay_http's); `binds`: the session's model binds
    thinking to its prefix (the service's rule for it: worker/compaction/thinking.py);
    `cache_ttl_seconds`: the provider cache's lifetime (the bills', and when a session idle past it
    gets its cold job, COLD_AFTER_SECONDS later: the beat's sweep).

    Long on purpose (~65 lines): the simulator's one event loop (appends, fetches, a job's start
    and finish on one clock); split, its loop state would be passed around.
    """
    pace = pace or Pace()
    redactor = redactor or Redactor(b"replay")
    times = pace.times(timestamps, len(messages))
    # served as the service stores it: the system prompt redacted too (the raw history is the client's own)
    sim = _Sim(policy, Transcript(system=redactor.redact_text(system), turns=()), binds)
    sim.cache_ttl_seconds = cache_ttl_seconds
    raw = RawHistory(system)
    provider, raw_provider = (
        PromptCache(ttl_seconds=cache_ttl_seconds),
        PromptCache(ttl_seconds=cache_ttl_seconds),
    )
    fetches: list[Fetch] = []
    request: dict[str, Any] = {}
    sent: dict[str, Any] = {}  # what the provider received for it (the model answers that)
    previous_mark: tuple[int, bytes] | None = None
    label = "0"
    for i, message in enumerate(messages):
        now = times[i]
        _advance(sim, now, job_seconds)
        if thinking is not None and message.get("role") == "assistant" and sent:
            message = thinking.answer(sent, message, label)
        for turn in ingest([message], first_seq=sim.version + 1, redactor=redactor, policy=policy).turns:
            sim.tail.append(_noted(sim, turn) if turn.role == "user" else turn)
            sim.version = turn.seq
        raw.add(message)
        sim.last_append_at = now
        if sim.claimed_at is None:
            sim.claimed_at = now
        if i + 1 < len(messages) and messages[i + 1].get("role") == "assistant":
            _advance(sim, now, job_seconds)
            previous, (request, tokens, fallback) = request, _serve(sim)
            sent = upstream(request) if upstream else request
            kept, previous_mark = keeps_prefix(previous_mark, sent), last_mark_key(sent)
            label = epoch_label(sim.epoch, fallback)
            checked = thinking.observe(sent, label) if thinking is not None else (True, 0, 0)
            fetches.append(
                Fetch(
                    turn=i + 1,
                    at_seconds=round(now, 3),
                    prompt_tokens=tokens,
                    request_tokens=count_request(request),
                    budget_tokens=policy.budget_tokens,
                    raw_tokens=raw.tokens,
                    epoch=sim.epoch,
                    valid=not request_problems(request),
                    fallback=fallback,
                    billed=provider.bill(sent, now),
                    raw_billed=raw_provider.bill(raw.request(), now),
                    kept_prefix=kept,
                    extended=not previous or extends(previous, request),
                    thinking_valid=checked[0],
                    thinking_due=checked[1],
                    thinking_kept=checked[2],
                )
            )
    final = extend(sim.snapshot, sim.tail)
    refs = final.handoff.archive_refs if final.handoff else ()
    return ReplayReport(
        tuple(fetches),
        sim.epoch,
        policy.budget_tokens,
        price_per_mtok,
        str(pace),
        sim.switches,
        request,
        refs,
        turns=len(messages),
    )


def _noted(sim: _Sim, turn: Turn) -> Turn:
    """A user turn as the service appends it: with the memory changes its prompt does not show yet
    (worker/store/sessions.py, noted)."""
    if len(sim.events) == sim.noted_at:
        return turn
    pushed = pushed_out(sim.events[sim.noted_at :])
    changes = changes_note(
        sim.noted, sim.items, MEMORY_NOTE_TOKENS, pushed, "it was last shown", observed=sim.restate
    )
    sim.noted, sim.noted_at, sim.restate = sim.items, len(sim.events), False
    return with_memory_note(turn, changes) if changes else turn


def _advance(sim: _Sim, until: float, job_seconds: float | None) -> None:
    """Run the worker up to `until`: publish jobs that finished, start the pending one when free,
    and the cold job of a session idle past its cache's lifetime (the sweep's)."""
    while True:
        if sim.inflight is not None and sim.inflight.finish <= until:
            _publish(sim, sim.inflight)
            sim.free_at, sim.inflight = sim.inflight.finish, None
            continue
        cold_at = sim.last_append_at + sim.cache_ttl_seconds + COLD_AFTER_SECONDS
        cold = sim.claimed_at is None and sim.cold_done != sim.last_append_at and cold_at <= until
        if sim.inflight is None and (cold or sim.claimed_at is not None):
            start = max(cold_at if cold else sim.claimed_at or 0.0, sim.free_at)
            if start > until:
                return
            sim.claimed_at = None
            if cold:
                sim.cold_done = sim.last_append_at
            began = time.perf_counter()
            job = _job(sim, start, cold=cold)
            seconds = job_seconds if job_seconds is not None else time.perf_counter() - began
            sim.inflight = replace(job, finish=start + seconds + JOB_OVERHEAD_SECONDS)
            continue
        return


def _job(sim: _Sim, start: float, *, cold: bool = False) -> _Job:
    """One compaction job as worker/flows/compact.plan_job decides it: memory observed from the
    new turns first, the prompt as the epoch serves it, the pinned block kept or refreshed by the
    job's rule, a rewrite's thinking dropped from its first change on."""
    _observe(sim, extend(sim.snapshot, sim.tail).turns, _EPOCH + timedelta(seconds=start))
    fresh = render(sim.items, sim.policy.memory_budget_tokens)
    pinned = sim.pinned if sim.pinned is not None else ()
    pinned_at = sim.pinned_at if sim.pinned is not None else 0
    tail = strip_through(sim.tail, sim.served_from) if sim.binds else sim.tail
    current = extend(sim.snapshot, tail)
    policy = replace(job_policy(sim.policy, current, fresh), binds_thinking=sim.binds)
    result = step(current, policy, pending=sim.pending, quiet=is_quiet(current), cold=cold)
    publish = result.publish
    new_epoch = result.verdict.decision is Decision.NEW_EPOCH
    refreshed = refreshes_memory(
        new_epoch=new_epoch, rewrote_top=rewrites_top(current, result), system_changed=False
    )
    if refreshed:
        publish, pinned, pinned_at = replace(publish, memory=fresh), sim.items, len(sim.events)
    if sim.binds:
        publish = kept_after_rewrite(current, publish)
    pending = None
    if result.pending is not None and result.prepared:
        pending = replace(result.pending, memory=fresh)
        pending = strip_all(pending) if sim.binds else pending
    assemble(publish)
    through = current.turns[-1].seq if current.turns else 0
    summarized = publish.handoff != current.handoff
    return _Job(0.0, result, publish, through, pinned, pinned_at, summarized or refreshed, pending)


def _observe(sim: _Sim, turns: Sequence[Turn], now: datetime) -> None:
    """Working memory observed from the turns after the watermark (worker/flows/observe.py)."""
    through = max((t.seq for t in turns), default=sim.observed_through)
    if through <= sim.observed_through:
        return
    found = observations(turns, sim.items, observed_through=sim.observed_through)
    groups = [(why, [o.change for o in group]) for why, group in groupby(found, key=lambda o: o.reason)]
    sim.items, events, _ = apply_groups(sim.items, groups, now, HARD_CAP_TOKENS)
    sim.events += events
    sim.observed_through = through


def _publish(sim: _Sim, job: _Job) -> None:
    result = job.result
    if result.verdict.decision is Decision.NEW_EPOCH:
        sim.epoch += 1
        sim.served_from = None  # not served yet
    if result.switch is not Switch.NONE:
        sim.switches[str(result.switch)] = sim.switches.get(str(result.switch), 0) + 1
    sim.snapshot = replace(job.publish, files=())
    sim.tail = [t for t in sim.tail if t.seq > job.through]
    if result.pending is None or result.prepared:
        sim.pending = job.pending
    sim.pinned, sim.pinned_at = job.pinned, job.pinned_at
    if job.noted:
        sim.noted, sim.noted_at, sim.restate = job.pinned, job.pinned_at, True


def _serve(sim: _Sim) -> tuple[dict[str, Any], int, str | None]:
    """What a fetch returns now, as the service computes it (worker/flows/serve.py)."""
    budget = sim.policy.budget_tokens
    if sim.served_from is None:
        sim.served_from = sim.version  # the epoch's first fetch
    tail = strip_through(sim.tail, sim.served_from) if sim.binds else sim.tail
    request, tokens = _rendered(sim.snapshot, tail)
    if tokens <= budget:
        return request, tokens, None
    # a fallback is a rewrite: no thinking, and the epoch's next fetch serves it anew
    sim.served_from = None
    if sim.pending is not None:
        last = covered_through(sim.pending)
        newer = [t for t in extend(sim.snapshot, sim.tail).turns if t.seq > last]
        request, tokens = _rendered(sim.pending, strip_through(newer, None) if sim.binds else newer)
        if tokens <= budget:
            return request, tokens, "pending"
    fresh = render(sim.items, sim.policy.memory_budget_tokens)
    fitted = fit_fallback(extend(sim.snapshot, sim.tail), fresh, sim.policy)
    request, tokens = _rendered(replace(strip_all(fitted) if sim.binds else fitted, files=()), [])
    return request, tokens, "fit"


def _rendered(snapshot: Transcript, tail: Sequence[Turn]) -> tuple[dict[str, Any], int]:
    tokens = served_tokens(snapshot) + sum(t.tokens for t in tail)
    return served_request(snapshot, tail), tokens


def plot(report: ReplayReport, path: str, title: str) -> None:
    """Prompt size per fetch, compacted vs raw, with the budget line and fallbacks marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [f.turn for f in report.fetches]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(xs, [f.raw_tokens for f in report.fetches], label="without compaction", color="#bbbbbb")
    ax.plot(xs, [f.prompt_tokens for f in report.fetches], label="served by compactd", color="#1f77b4")
    marked = [f for f in report.fetches if f.fallback]
    if marked:
        ax.scatter(
            [f.turn for f in marked], [f.prompt_tokens for f in marked], color="#ff7f0e", label="fallback"
        )
    ax.axhline(report.budget_tokens, color="#d62728", linestyle="--", label="budget")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.set_title(f"{title} (pace {report.pace})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
