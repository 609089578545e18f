"""Reading wrk's output in the service bench (ops/bench/service.py): req/s, latency percentiles, errors."""

from __future__ import annotations

import pytest

from ops.bench.service import wrk_figures

OUTPUT = """Running 3s test @ http://127.0.0.1:8123/v1/sessions/s10/prompt
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   512.33us  200.12us   8.01ms   95.00%
    Req/Sec     1.95k   100.00     2.10k    70.00%
  Latency Distribution
     50%  480.00us
     75%  520.00us
     90%  600.00us
     99%    1.20ms
  5850 requests in 3.00s, 25.10MB read
{errors}Requests/sec:   1949.55
Transfer/sec:      8.37MB
"""


@pytest.mark.parametrize(
    ("errors", "non_2xx"),
    [("", 0), ("  Non-2xx or 3xx responses: 12\n", 12)],
)
def test_wrk_figures_reads_rate_percentiles_in_ms_and_errors(errors: str, non_2xx: int) -> None:
    """The req/s line, the 50% and 99% lines converted to ms (us, ms and s units), and the
    non-2xx count (0 when wrk prints none)."""
    got = wrk_figures(OUTPUT.format(errors=errors))
    assert got == {"req_per_s": 1949.55, "p50_ms": 0.48, "p99_ms": 1.2, "non_2xx": non_2xx}


def test_wrk_figures_is_none_without_a_latency_distribution() -> None:
    """Output without --latency (or a wrk that failed) gives None, never a partial row."""
    assert wrk_figures("Requests/sec:   10.0\n") is None
