"""docs/metrics.md's table, the Grafana dashboard and what /metrics exposes agree."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from api.http.prometheus import families
from tests.conftest import REPO
from worker.metrics import (
    CATALOG,
    HISTOGRAM,
    SPECS,
    exposed_names,
    field_of,
    histogram_fields,
    merged,
)

DASHBOARD = REPO / "ops" / "grafana" / "compactd.json"
METRIC = re.compile(r"\bcompactd_[a-z0-9_]+")


def readme_rows() -> dict[str, tuple[str, tuple[str, ...]]]:
    """{metric: (type, labels)} from docs/metrics.md's table."""
    section = (REPO / "docs" / "metrics.md").read_text()
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `compactd_"):
            name, kind, labels = (c.strip() for c in line.strip("|").split(" | ")[:3])
            rows[name.strip("`")] = (kind, tuple(re.findall(r"`([a-z_]+)`", labels)))
    return rows


def one_of_each() -> dict[str, float]:
    """A stored field for one series of every metric (so labelled ones show samples too)."""
    fields: list[dict[str, float]] = []
    for spec in CATALOG:
        labels = tuple("x" for _ in spec.labels)
        if spec.kind == HISTOGRAM:
            fields.append(histogram_fields(spec, labels, 0.5))
        else:
            fields.append({field_of(spec.name, labels): 1})
    return merged(*fields)


class _Fixed(Collector):
    def __init__(self, values: dict[str, float], stats: dict[str, float]) -> None:
        self.values, self.stats = values, stats

    def collect(self) -> Iterator[Metric]:
        return families(self.values, self.stats, up=True, queue_length=3)


def exposition(values: dict[str, float], stats: dict[str, float] | None = None) -> str:
    registry = CollectorRegistry()
    registry.register(_Fixed(values, stats or {}))
    return generate_latest(registry).decode()


def exposed_samples() -> set[str]:
    stats = {"fallbacks_fit": 1.0, "compactions_extend": 1.0, "switches_quiet": 1.0}
    text = exposition(one_of_each(), stats)
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_readme_table_names_every_metric_with_its_type_and_labels() -> None:
    """Every metric /metrics exposes is in docs/metrics.md's table with its type and labels, and nothing else."""
    exposed = {f.name: f.type for f in text_string_to_metric_families(exposition(one_of_each()))}
    assert {n: k for n, (k, _) in readme_rows().items()} == exposed
    assert {n: ls for n, (_, ls) in readme_rows().items()} == {s.name: s.labels for s in CATALOG}


def test_every_dashboard_query_uses_only_exposed_metrics_and_every_metric_has_a_panel() -> None:
    """The Grafana dashboard's PromQL references only sample names /metrics exposes, and every
    metric is shown on some panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = exposed_samples()
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(METRIC.findall(target["expr"]))
            assert names and names <= exposed, (panel["title"], names - exposed)
            used |= names
    assert {s.name for s in CATALOG if set(exposed_names(s)) & used} == set(SPECS)


def test_the_dashboard_is_a_well_formed_grafana_dashboard() -> None:
    """Unique panel ids, a grid position inside 24 columns, a Prometheus datasource and refIds per target."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        assert panel["type"] in {"timeseries", "stat"}
        assert panel["datasource"]["type"] == "prometheus"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))


# no deadline: the first example parses with prometheus_client cold, 260-680 ms on a loaded machine
# (it failed `make test` twice so, at load 8-10); later ones take ~2 ms
@settings(deadline=None)
@given(st.lists(st.lists(st.floats(0, 400, allow_nan=False), max_size=20), min_size=1, max_size=4))
def test_histograms_summed_over_processes_are_cumulative_and_count_every_observation(
    per_process: list[list[float]],
) -> None:
    """Each process's observations stored as single-bucket increments and summed (as Redis sums
    them) expose cumulative buckets whose +Inf equals the number of observations, and their sum."""
    spec = SPECS["compactd_queue_lag_seconds"]
    stored = merged(*(histogram_fields(spec, (), v) for obs in per_process for v in obs))
    family = next(f for f in text_string_to_metric_families(exposition(stored)) if f.name == spec.name)
    buckets = [s for s in family.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    every = [v for obs in per_process for v in obs]
    assert counts == sorted(counts) and counts[-1] == len(every)
    for s in buckets:
        le = float(s.labels["le"])
        assert s.value == sum(1 for v in every if v <= le)
    total = next(s.value for s in family.samples if s.name.endswith("_sum"))
    assert abs(total - sum(every)) < 1e-6 * max(1.0, sum(every))
