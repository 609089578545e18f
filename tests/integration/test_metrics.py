"""/metrics over real processes: two `compactd api` processes and a worker on one Redis and database
report the same totals, whichever process is scraped."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings, wait_for

pytestmark = [pytest.mark.services]

SECRET = "ghp_R8s2kLq9ZxW4vN7mP3tY6bH1cJ5dF0gA2eK8"


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one process's /metrics, keyed by (sample name, sorted labels)."""
    r = httpx.get(f"{base}/metrics", timeout=10)
    assert r.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(samples: dict, name: str, **labels: str) -> float:
    """The sum of `name` over every series whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


class Deployment:
    def __init__(self, tmp_path: Path, pg_url: str, redis_url: str) -> None:
        self.key = f"cpd_{uuid.uuid4().hex}"
        self.settings = make_settings(tmp_path, pg_url, redis_url, default_api_key=self.key)
        ports = [free_port(), free_port()]
        self.apis = [
            Worker(self.settings.model_copy(update={"port": p}), "api", log=tmp_path / f"api{i}.log")
            for i, p in enumerate(ports)
        ]
        self.bases = [f"http://127.0.0.1:{p}" for p in ports]
        self.worker = Worker(self.settings, "worker", "--concurrency", "1", log=tmp_path / "worker.log")
        self.auth = {"Authorization": f"Bearer {self.key}"}

    def append(self, i: int, sid: str, *messages: dict) -> Any:
        r = httpx.post(
            f"{self.bases[i]}/v1/sessions/{sid}/turns",
            json={"messages": list(messages), "context_window": 8_000},
            headers=self.auth,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return r.json()

    def fetch(self, i: int, sid: str) -> Any:
        r = httpx.get(f"{self.bases[i]}/v1/sessions/{sid}/prompt", headers=self.auth, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, pg_schema_url: str, redis_url: str
) -> Iterator[Deployment]:
    """Started once for this module (three processes): each test uses sessions of its own."""
    d = Deployment(tmp_path_factory.mktemp("metrics"), pg_schema_url, redis_url)
    try:
        for api in d.apis:
            api.wait_ready("api.started", timeout=60)
        d.worker.wait_ready(timeout=60)
        yield d
    finally:
        for proc in (*d.apis, d.worker):
            proc.stop()
        flush_prefix(redis_url, d.settings.redis_prefix)


def test_either_api_process_reports_the_totals_of_both_and_of_the_worker(deployment: Deployment) -> None:
    """Appends and fetches spread over two API processes, a planted secret and a worker compacting:
    a scrape of either process shows the summed counts, the redaction by kind, job durations and
    queue lag, and zero fetches over budget."""
    d = deployment
    appends = fetches = 0
    for n in range(12):
        sid = f"s{n % 3}"
        text = f"step {n}: " + "lorem ipsum dolor sit amet " * 40
        if n == 5:
            text += f" export GITHUB_TOKEN={SECRET}"
        # appends alternate between the processes; each fetch goes to the other one
        d.append(n % 2, sid, {"role": "user", "content": text}, {"role": "assistant", "content": f"ok {n}"})
        appends += 1
        served = d.fetch((n + 1) % 2, sid)
        fetches += 1
        assert served["token_count"] <= served["budget_tokens"]
    assert SECRET not in str(served)

    def settled() -> list[dict] | None:
        both = [scrape(base) for base in d.bases]
        # a request's own count is recorded once it is answered, and may reach Redis a flush after
        # the append it carried: both are waited for
        done = all(
            total(s, "compactd_appends_total") == appends
            and total(s, "compactd_http_requests_total", route="/v1/sessions/{sid}/turns") == appends
            and total(s, "compactd_prompt_fetches_total") == fetches
            and total(s, "compactd_job_seconds_count", outcome="published") >= 3
            for s in both
        )
        return both if done else None

    for s in wait_for(settled, timeout=60, interval=0.25):
        assert total(s, "compactd_turns_appended_total") == 2 * appends
        assert total(s, "compactd_http_requests_total", route="/v1/sessions/{sid}/turns") == appends
        assert total(s, "compactd_redactions_total", kind="github_token") == 1
        assert total(s, "compactd_prompt_over_budget_total") == 0
        assert total(s, "compactd_prompt_served_tokens_total") > 0
        assert total(s, "compactd_prompt_budget_share_count") == fetches
        assert total(s, "compactd_job_seconds_bucket", outcome="published", le="+Inf") == total(
            s, "compactd_job_seconds_count", outcome="published"
        )
        assert total(s, "compactd_jobs_total", outcome="published") >= 3
        assert total(s, "compactd_queue_lag_seconds_count") >= 3
        assert total(s, "compactd_compaction_ratio_count") >= 3
        assert total(s, "compactd_compaction_input_tokens_total") >= total(
            s, "compactd_compaction_output_tokens_total"
        )
        assert total(s, "compactd_metrics_store_up") == 1
        assert ("compactd_queue_length", ()) in s


def test_a_fetch_never_passes_the_budget_under_paced_traffic(deployment: Deployment) -> None:
    """Appends paced faster than the worker's idle interval on a small window, a fetch after each:
    the over-budget counter exists and stays 0 while fallbacks and epochs are counted."""
    d = deployment
    before = scrape(d.bases[0])
    for n in range(20):
        d.append(n % 2, "paced", {"role": "user", "content": f"turn {n} " + "word " * 300})
        d.append(n % 2, "paced", {"role": "assistant", "content": f"reply {n} " + "more " * 200})
        served = d.fetch((n + 1) % 2, "paced")
        assert served["token_count"] <= served["budget_tokens"]

    def counted() -> dict | None:
        s = scrape(d.bases[1])
        return (
            s
            if total(s, "compactd_prompt_fetches_total")
            == total(before, "compactd_prompt_fetches_total") + 20
            else None
        )

    samples = wait_for(counted, timeout=30)
    assert ("compactd_prompt_over_budget_total", ()) in samples
    assert total(samples, "compactd_prompt_over_budget_total") == 0
    assert total(samples, "compactd_epochs_total") > total(before, "compactd_epochs_total")
    share_within = total(samples, "compactd_prompt_budget_share_bucket", le="1.0")
    assert share_within - total(before, "compactd_prompt_budget_share_bucket", le="1.0") == 20
