"""Prometheus at /metrics: the totals of every API process and worker, read from Redis at scrape time.

Counts are recorded into the process's buffer (worker/metrics.py), flushed to one Redis hash
every FLUSH_SECONDS by a background thread, and the scrape reads the hash back: whichever API
process Prometheus scrapes, it reports everyone's totals (another process's last FLUSH_SECONDS may
be missing from one scrape, never lost). Label values are bounded: routes are templates, methods a
fixed set, kinds and sources come from the code; no session or tenant ids.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import redis
import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.cache.client import make_redis
from worker.metrics import (
    CATALOG,
    COUNTER,
    GAUGE,
    HISTOGRAM,
    SPECS,
    Recorder,
    Spec,
    field_of,
    histogram_fields,
    parse_field,
    record_append,
)
from worker.resources import Resources
from worker.settings import Settings

log = structlog.get_logger("compactd.metrics")

FLUSH_SECONDS = 0.5
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
# kombu's Redis transport keeps priority messages in sibling lists: name + "\x06\x16" + priority
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
_LATENCY = SPECS["compactd_http_request_seconds"]
_SHARE = SPECS["compactd_prompt_budget_share"]


class _Series:
    """One labelled series of a metric, with prometheus_client's verbs (inc, observe)."""

    def __init__(self, recorder: Recorder, name: str, labels: tuple[object, ...]) -> None:
        self.recorder, self.name, self.values = recorder, name, labels

    def inc(self, amount: float = 1) -> None:
        self.recorder.inc(self.name, amount, self.values)

    def observe(self, value: float) -> None:
        self.recorder.observe(self.name, value, self.values)


class _Family(_Series):
    """A metric of the catalog; `labels(...)` picks a series, as with prometheus_client."""

    def __init__(self, recorder: Recorder, name: str) -> None:
        super().__init__(recorder, name, ())
        self.spec = SPECS[name]

    def labels(self, *values: object) -> _Series:
        if "method" in self.spec.labels:
            i = self.spec.labels.index("method")
            values = (*values[:i], values[i] if values[i] in METHODS else "other", *values[i + 1 :])
        return _Series(self.recorder, self.name, values)


class Metrics:
    """The API's metrics: families to record into, and a registry that reads the shared totals.

    Until `attach` (the app's lifespan) there is no Redis: counts wait in the buffer.
    """

    def __init__(self) -> None:
        self.recorder = Recorder(None, "")  # buffers only, until attach()
        self.registry = CollectorRegistry()
        self.requests = self.family("compactd_http_requests")
        self.latency = self.family("compactd_http_request_seconds")
        self.appends = self.family("compactd_appends")
        self.turns = self.family("compactd_turns_appended")
        self.fetches = self.family("compactd_prompt_fetches")
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._queues: tuple[Any, str] | None = None
        self._request_fields: dict[tuple[str, str, int], tuple[str, tuple[str, str]]] = {}

    def family(self, name: str) -> _Family:
        return _Family(self.recorder, name)

    def attach(self, res: Resources) -> None:
        """Start sharing: counts go to the resources' Redis under their key prefix; the scrape
        also reports the length of the Celery queue when the broker is a Redis it can reach."""
        self.recorder.connect(res.cache.client, res.settings.redis_prefix)
        broker = broker_client(res.settings, res.cache.client)
        self._queues = (broker, res.settings.queue) if broker is not None else None
        self.registry.register(_Totals(self))
        self._flusher = threading.Thread(target=self._flush_loop, name="metrics-flush", daemon=True)
        self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            try:
                self.recorder.flush()
            except Exception as exc:  # never let the thread die: the next flush retries
                log.warning("metrics.flush_failed", error=type(exc).__name__)

    def close(self) -> None:
        """Stop the flusher and send what is left."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
            self.recorder.flush()
        if self._queues is not None and self._queues[0] is not self.recorder.client:
            self._queues[0].close()

    def record_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """A request was answered: its count and latency (what `requests` and `latency` record),
        in one buffer update with the series' fields built once per (method, route, status)."""
        fields = self._request_fields.get((method, route, status))
        if fields is None:
            shown = method if method in METHODS else "other"
            fields = (field_of("compactd_http_requests", (shown, route, str(status))), (shown, route))
            if len(self._request_fields) > 10_000:  # bounded anyway: routes are templates
                self._request_fields.clear()
            self._request_fields[(method, route, status)] = fields
        deltas = histogram_fields(_LATENCY, fields[1], seconds)
        deltas[fields[0]] = 1
        self.recorder.add(deltas)

    def record_fetch(self, source: str, tokens: int, budget_tokens: int) -> None:
        """A prompt was served: its source, tokens, and how much of the budget it used."""
        deltas = histogram_fields(_SHARE, (), tokens / budget_tokens) if budget_tokens > 0 else {}
        deltas[field_of("compactd_prompt_fetches", (source,))] = 1
        if tokens:
            deltas[field_of("compactd_prompt_served_tokens")] = tokens
        self.recorder.add(deltas)

    def record_append(self, turns: int, redactions: Mapping[str, int]) -> None:
        """An append was stored: one append, its turns, and the secrets redacted by kind."""
        record_append(self.recorder, turns, redactions)

    def queue_length(self) -> int | None:
        if self._queues is None:
            return None
        broker, queue = self._queues
        try:
            pipe = broker.pipeline(transaction=False)
            for suffix in _PRIORITY_SUFFIXES:
                pipe.llen(queue + suffix)
            return sum(pipe.execute())
        except redis.RedisError:
            return None


def broker_client(settings: Settings, cache_client: redis.Redis) -> redis.Redis | None:
    """A client for the Celery broker: the cache's own when they share a Redis (the default), a
    short-timeout one for another redis:// broker, None otherwise (no queue gauge)."""
    if not settings.broker_url or settings.broker_url == settings.redis_url:
        return cache_client
    if settings.broker_url.startswith(("redis://", "rediss://", "unix://")):
        return make_redis(settings.broker_url, settings.redis_socket_timeout_seconds)
    return None


class _Totals(Collector):
    """Every metric of the catalog, from the shared totals at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        values, stats, up = self.metrics.recorder.totals()
        yield from families(values, stats, up=up, queue_length=self.metrics.queue_length())


def families(
    values: Mapping[str, float], stats: Mapping[str, float], *, up: bool, queue_length: int | None
) -> Iterator[Metric]:
    """The exposition's families from the stored fields (pure: the scrape's parsing, testable alone)."""
    by_metric: dict[str, dict[tuple[str, ...], dict[str, float]]] = {}
    for raw, value in values.items():
        parsed = parse_field(raw)
        if parsed is not None:
            name, part, labels = parsed
            by_metric.setdefault(name, {}).setdefault(labels, {})[part] = value
    for spec in CATALOG:
        if spec.stats:
            yield _from_stats(spec, stats)
        elif spec.kind == COUNTER:
            yield _counter(spec, by_metric.get(spec.name, {}))
        elif spec.kind == HISTOGRAM:
            yield _histogram(spec, by_metric.get(spec.name, {}))
        elif spec.kind == GAUGE:
            gauge = GaugeMetricFamily(spec.name, spec.help)
            if spec.name == "compactd_metrics_store_up":
                gauge.add_metric([], 1 if up else 0)
            elif spec.name == "compactd_queue_length" and queue_length is not None:
                gauge.add_metric([], queue_length)
            yield gauge


def _counter(spec: Spec, series: Mapping[tuple[str, ...], Mapping[str, float]]) -> Metric:
    family = CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    if not spec.labels:
        family.add_metric([], series.get((), {}).get("", 0.0))
    for labels, parts in sorted(series.items()):
        if spec.labels:
            family.add_metric(list(labels), parts.get("", 0.0))
    return family


def _histogram(spec: Spec, series: Mapping[tuple[str, ...], Mapping[str, float]]) -> Metric:
    family = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    if not spec.labels and () not in series:
        series = {(): {}}
    for labels, parts in sorted(series.items()):
        cumulative, buckets = 0.0, []
        for i, le in enumerate((*spec.buckets, float("inf"))):
            cumulative += parts.get(str(i), 0.0)
            buckets.append(("+Inf" if le == float("inf") else repr(float(le)), cumulative))
        family.add_metric(list(labels), buckets, parts.get("sum", 0.0))
    return family


def _from_stats(spec: Spec, stats: Mapping[str, float]) -> Metric:
    """A counter the workers and the fetch path keep in the `{prefix}stats` hash."""
    family = CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    if not spec.labels:
        family.add_metric([], stats.get(spec.stats, 0.0))
        return family
    for key, value in sorted(stats.items()):
        if key.startswith(spec.stats):
            family.add_metric([key.removeprefix(spec.stats)], value)
    return family
