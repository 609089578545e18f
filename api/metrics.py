"""Prometheus metrics: HTTP by route, appends, fetches by source, and the workers' counters from Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class Metrics:
    """One registry per app, so tests can build many apps in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "compactd_http_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "compactd_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.appends = Counter("compactd_appends", "Appends accepted", registry=self.registry)
        self.turns = Counter("compactd_turns_appended", "Turns appended", registry=self.registry)
        self.fetches = Counter(
            "compactd_prompt_fetches", "Prompt fetches", ["source"], registry=self.registry
        )

    def watch_workers(self, stats: Any) -> None:
        self.registry.register(_WorkerStats(stats))


class _WorkerStats(Collector):
    """Counters the workers keep in Redis (compactions by decision, tokens saved), read at scrape time."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        values = self.stats()
        compactions = CounterMetricFamily("compactd_compactions", "Snapshots published", labels=["decision"])
        for key, value in sorted(values.items()):
            if key.startswith("compactions_"):
                compactions.add_metric([key.removeprefix("compactions_")], value)
        yield compactions
        saved = CounterMetricFamily("compactd_tokens_saved", "Tokens removed by new epochs")
        saved.add_metric([], values.get("tokens_saved", 0))
        yield saved
        switches = CounterMetricFamily(
            "compactd_summary_switches", "Prepared summaries switched in", labels=["reason"]
        )
        fallbacks = CounterMetricFamily(
            "compactd_prompt_fallbacks",
            "Fetches served a fallback (the worker had not kept up)",
            labels=["kind"],
        )
        for key, value in sorted(values.items()):
            if key.startswith("switches_"):
                switches.add_metric([key.removeprefix("switches_")], value)
            if key.startswith("fallbacks_"):
                fallbacks.add_metric([key.removeprefix("fallbacks_")], value)
        yield switches
        yield fallbacks
        over = CounterMetricFamily("compactd_prompt_over_budget", "Fetches served over budget (must stay 0)")
        over.add_metric([], values.get("fetches_over_budget", 0))
        yield over
