"""Service metrics kept in Redis: the catalog, a buffered recorder, and the shared totals.

Every API process and every worker adds its counts to one Redis hash (`{prefix}metrics`), so a
scrape of any one API process reports the totals of all of them: with two uvicorn workers or two
hosts behind a load balancer, Prometheus never sees a random process's share. prometheus_client's
multiprocess mode would only sum the processes of one host. Writes are buffered and sent in one
pipelined MULTI/EXEC (HINCRBY / HINCRBYFLOAT) per flush, and are best effort: a Redis outage never
fails a request; its counts wait in the buffer until Redis answers again.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis

from worker.redaction import Redactor
from worker.store.tables import utcnow
from worker.store.turns import appended_at

COUNTER, HISTOGRAM, GAUGE = "counter", "histogram", "gauge"
SEP = "\x1f"  # between a field's metric name and its label values (never inside a label value)
LABEL_CHARS = 100

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_JOB_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LAG_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900)
_SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)


@dataclass(frozen=True, slots=True)
class Spec:
    """One metric as /metrics exposes it. `stats` names where an older counter lives in the
    `{prefix}stats` hash instead: a field prefix (labelled) or the field itself (unlabelled)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    stats: str = ""


CATALOG: tuple[Spec, ...] = (
    Spec("compactd_http_requests", COUNTER, "HTTP requests by method, route and status", ("method", "route", "status")),
    Spec("compactd_http_request_seconds", HISTOGRAM, "HTTP request latency by route (fetch latency: route /v1/sessions/{sid}/prompt)", ("method", "route"), _SECONDS),
    Spec("compactd_appends", COUNTER, "Appends accepted (idempotent replays not counted)"),
    Spec("compactd_turns_appended", COUNTER, "Turns appended"),
    Spec("compactd_redactions", COUNTER, "Secrets redacted at ingest, by kind", ("kind",)),
    Spec("compactd_prompt_fetches", COUNTER, "Prompts served by source: cache (Redis hit), db, pending or fit (fallbacks)", ("source",)),
    Spec("compactd_prompt_served_tokens", COUNTER, "Tokens of the prompts served (token_count summed)"),
    Spec("compactd_prompt_budget_share", HISTOGRAM, "Served prompt tokens as a share of the session's budget", (), _SHARES),
    Spec("compactd_prompt_fallbacks", COUNTER, "Fetches served a fallback (the worker had not kept up), by kind", ("kind",), stats="fallbacks_"),
    Spec("compactd_prompt_over_budget", COUNTER, "Fetches served over budget (must stay 0)", stats="fetches_over_budget"),
    Spec("compactd_proxy_diverged", COUNTER, "Proxied requests (POST /v1/messages) whose history diverged from the stored session: continued in a new linked session", stats="proxy_diverged"),
    Spec("compactd_jobs", COUNTER, "Compaction jobs run, by outcome", ("outcome",)),
    Spec("compactd_job_seconds", HISTOGRAM, "Compaction job duration, by outcome", ("outcome",), _JOB_SECONDS),
    Spec("compactd_queue_lag_seconds", HISTOGRAM, "From an append to the published snapshot that covers it (its oldest new turn)", (), _LAG_SECONDS),
    Spec("compactd_queue_length", GAUGE, "Compaction jobs waiting in the Celery queue (LLEN)"),
    Spec("compactd_compactions", COUNTER, "Snapshots published, by decision", ("decision",), stats="compactions_"),
    Spec("compactd_epochs", COUNTER, "New epochs published, by cause: summary, structural or system", ("cause",)),
    Spec("compactd_compaction_input_tokens", COUNTER, "Tokens of the sessions before compaction, per published snapshot"),
    Spec("compactd_compaction_output_tokens", COUNTER, "Tokens of the published snapshots' prompts"),
    Spec("compactd_compaction_ratio", HISTOGRAM, "Published prompt tokens over the tokens before compaction", (), _SHARES),
    Spec("compactd_tokens_saved", COUNTER, "Tokens removed by new epochs", stats="tokens_saved"),
    Spec("compactd_summary_switches", COUNTER, "Prepared summaries switched in, by reason", ("reason",), stats="switches_"),
    Spec("compactd_summaries", COUNTER, "Summaries written by an LLM summarizer"),
    Spec("compactd_summarizer_tokens", COUNTER, "LLM summarizer tokens, by direction (input, output)", ("direction",)),
    Spec("compactd_summarizer_cost_usd", COUNTER, "LLM summarizer cost in USD (the pricing table's prices)"),
    Spec("compactd_metrics_store_up", GAUGE, "1 when the totals were read from Redis; 0: last known totals plus this process's counts since"),
)  # fmt: skip
SPECS: dict[str, Spec] = {s.name: s for s in CATALOG}


def exposed_names(spec: Spec) -> tuple[str, ...]:
    """The sample names a metric adds to the exposition (what PromQL can reference)."""
    if spec.kind == COUNTER:
        return (f"{spec.name}_total",)
    if spec.kind == HISTOGRAM:
        return (f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count")
    return (spec.name,)


def label_value(value: object) -> str:
    """A label value safe to store: no separator, bounded length."""
    return str(value).replace(SEP, " ")[:LABEL_CHARS]


def field_of(name: str, labels: Iterable[object] = (), part: str = "") -> str:
    """The hash field of one series (`part`: a histogram's bucket index or "sum")."""
    # str first: label_value would, and 1 and True must not share a memo entry
    return _field(name, tuple(str(v) for v in labels), part)


# every request records several series: the same few fields, built once (label values are bounded)
@lru_cache(maxsize=4096)
def _field(name: str, labels: tuple[str, ...], part: str) -> str:
    head = f"{name}:{part}" if part else name
    return SEP.join([head, *(label_value(v) for v in labels)])


def parse_field(raw: str) -> tuple[str, str, tuple[str, ...]] | None:
    """(metric, part, label values) of a stored field; None for one this version does not know."""
    head, *values = raw.split(SEP)
    name, _, part = head.partition(":")
    spec = SPECS.get(name)
    if spec is None or len(values) != len(spec.labels) or (spec.kind == HISTOGRAM) != bool(part):
        return None
    return name, part, tuple(values)


def bucket_index(buckets: tuple[float, ...], value: float) -> int:
    """The index of the first bucket `value` fits in (len(buckets): +Inf)."""
    for i, le in enumerate(buckets):
        if value <= le:
            return i
    return len(buckets)


def histogram_fields(spec: Spec, labels: tuple[object, ...], value: float) -> dict[str, float]:
    """The increments one observation makes: its own bucket (not cumulative) and the sum."""
    if math.isnan(value):
        return {}
    return {
        field_of(spec.name, labels, str(bucket_index(spec.buckets, value))): 1,
        field_of(spec.name, labels, "sum"): value,
    }


def merged(*parts: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0) + v
    return out


class Recorder:
    """One process's counts: buffered in memory, flushed to the shared hash, and its view of the
    totals. Thread-safe; every Redis call is best effort."""

    def __init__(self, client: redis.Redis | None, prefix: str) -> None:
        self._lock = threading.Lock()
        self.connect(client, prefix)
        self._buffer: dict[str, float] = {}
        # the totals last read from Redis, and what this process flushed since: together with the
        # buffer they are its best view while Redis does not answer (counters never go back)
        self._known: dict[str, float] = {}
        self._known_stats: dict[str, float] = {}
        self._flushed_since_read: dict[str, float] = {}

    def connect(self, client: redis.Redis | None, prefix: str) -> None:
        """Share counts through `client` under `prefix` (None: buffer only, e.g. before start-up)."""
        self.client = client
        self.key = f"{prefix}metrics"
        self.stats_key = f"{prefix}stats"

    def inc(self, name: str, amount: float = 1, labels: tuple[object, ...] = ()) -> None:
        if amount:
            self._add({field_of(name, labels): amount})

    def observe(self, name: str, value: float, labels: tuple[object, ...] = ()) -> None:
        self._add(histogram_fields(SPECS[name], labels, value))

    def add(self, deltas: Mapping[str, float]) -> None:
        """Several increments (fields as field_of names them) under one lock: the hot paths' way."""
        self._add(deltas)

    def _add(self, deltas: Mapping[str, float]) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._buffer[k] = self._buffer.get(k, 0) + v

    def flush(self) -> bool:
        """Send the buffer in one MULTI/EXEC. On a refused connection the counts stay buffered;
        after a timeout (the write may or may not have landed) they are not sent again, never
        doubled, but stay in this process's view while Redis does not answer (totals())."""
        with self._lock:
            batch, self._buffer = self._buffer, {}
        if not batch:
            return True
        if self.client is None:
            self._add(batch)
            return False
        try:
            pipe = self.client.pipeline(transaction=True)
            for k, v in batch.items():
                if float(v).is_integer():
                    pipe.hincrby(self.key, k, int(v))
                else:
                    pipe.hincrbyfloat(self.key, k, v)
            pipe.execute()
        except redis.TimeoutError:
            with self._lock:
                self._flushed_since_read = merged(self._flushed_since_read, batch)
            return False
        except redis.RedisError:
            self._add(batch)
            return False
        with self._lock:
            self._flushed_since_read = merged(self._flushed_since_read, batch)
        return True

    def totals(self) -> tuple[dict[str, float], dict[str, float], bool]:
        """(metrics fields, stats fields, read from Redis): the shared totals after flushing this
        process's buffer; when Redis does not answer, the last known totals plus this process's counts."""
        self.flush()
        try:
            if self.client is None:
                raise redis.ConnectionError("not attached")
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.key)
            pipe.hgetall(self.stats_key)
            raw, stats = pipe.execute()
        except redis.RedisError:
            with self._lock:
                local = merged(self._known, self._flushed_since_read, self._buffer)
                return local, dict(self._known_stats), False
        known = {k.decode(): float(v) for k, v in raw.items()}
        known_stats = {k.decode(): float(v) for k, v in stats.items()}
        with self._lock:
            self._known, self._known_stats, self._flushed_since_read = known, known_stats, {}
        return known, known_stats, True


_RECORDERS: weakref.WeakKeyDictionary[Any, Recorder] = weakref.WeakKeyDictionary()


def recorder_for(cache: Any) -> Recorder:
    """The process's recorder for a Cache (one per cache: its client and key prefix)."""
    rec = _RECORDERS.get(cache)
    if rec is None:
        rec = _RECORDERS[cache] = Recorder(cache.client, cache.prefix)
    return rec


@dataclass(frozen=True, slots=True)
class CountingRedactor(Redactor):
    """A Redactor that counts the placeholders it writes, by kind (for `compactd_redactions`).
    A placeholder already in the input matches no detector, so it is never counted twice."""

    counts: Counter[str] = field(default_factory=Counter, compare=False, hash=False)

    @classmethod
    def of(cls, redactor: Redactor, scope: bytes = b"") -> CountingRedactor:
        """One for an append: the redactor's rules and memory of clean texts, keyed by `scope`
        (the tenant)."""
        return cls(redactor.key, redactor.rules, redactor.clean.scoped(scope))

    def placeholder(self, kind: str, secret: str) -> str:
        self.counts[kind] += 1
        return Redactor.placeholder(self, kind, secret)


def record_append(rec: Recorder, turns: int, redactions: Mapping[str, int]) -> None:
    """An append was stored (over HTTP, by the `compactd.append` task or an import): one append,
    its turns, and the secrets redacted by kind."""
    rec.inc("compactd_appends")
    rec.inc("compactd_turns_appended", turns)
    for kind, n in redactions.items():
        rec.inc("compactd_redactions", n, (kind,))


def epoch_cause(new_epoch: bool, summarized: bool, system_changed: bool) -> str | None:
    """Why a job started a new epoch (None: it did not)."""
    if new_epoch:
        return "summary" if summarized else "structural"
    return "system" if system_changed else None


def record_job(cache: Any, outcome: str, seconds: float) -> None:
    """A compaction job ended (outcome: published, current, stale, gone or error): count it, time
    it, and send everything the job recorded in one round trip."""
    rec = recorder_for(cache)
    rec.inc("compactd_jobs", labels=(outcome,))
    rec.observe("compactd_job_seconds", seconds, labels=(outcome,))
    rec.flush()


def record_publish(
    res: Any,
    session_pk: int,
    *,
    first_new_seq: int | None,
    cause: str | None,
    tokens_before: int,
    tokens_after: int,
) -> None:
    """A snapshot was published: its compaction ratio, the epoch it started (if any) and the lag
    from the append of the oldest turn it newly covers (one indexed read)."""
    rec = recorder_for(res.cache)
    rec.inc("compactd_compaction_input_tokens", tokens_before)
    rec.inc("compactd_compaction_output_tokens", tokens_after)
    if tokens_before > 0:
        rec.observe("compactd_compaction_ratio", tokens_after / tokens_before)
    if cause is not None:
        rec.inc("compactd_epochs", labels=(cause,))
    if first_new_seq is not None:
        appended = appended_at(res.engine, session_pk, first_new_seq)
        if appended is not None:
            rec.observe("compactd_queue_lag_seconds", max(0.0, (utcnow() - appended).total_seconds()))


def record_usage(cache: Any, input_tokens: int, output_tokens: int, cost_usd: float | None) -> None:
    """An LLM summary was written: its tokens and cost (unknown prices add no cost)."""
    rec = recorder_for(cache)
    rec.inc("compactd_summaries")
    rec.inc("compactd_summarizer_tokens", input_tokens, labels=("input",))
    rec.inc("compactd_summarizer_tokens", output_tokens, labels=("output",))
    if cost_usd:
        rec.inc("compactd_summarizer_cost_usd", cost_usd)
