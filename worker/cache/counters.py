"""Counters in Redis: per-session cache reuse, summarizer usage and summary switches (for GET
session), and the service-wide totals hash (`{prefix}stats`)."""

from __future__ import annotations

from typing import Any

from worker.cache.client import GuardedRedis

# Fetches' cache reuse: the bytes each shares with the session's previous fetch. Within an epoch
# that is everything the previous fetch served (a fetch only appends); across epochs it is at most
# the prefix the worker found the old and new snapshots share (stored at publish). One call per
# session per batch: ARGV holds its fetches in order as runs of identical ones (epoch, total,
# stable, count), since the API's batch is mostly the same prompt fetched again (a run's later
# fetches each share min(stable, total) with the one before: the same fetch).
_REUSE = """
local prev = redis.call('HMGET', KEYS[1], 'epoch', 'stable')
local pe, ps = tonumber(prev[1]), tonumber(prev[2])
local snap = nil
local fetches, share_sum, reused = 0, 0, 0
local function count(shared, total, n)
  local share = 0
  if total > 0 then share = math.min(shared, total) / total end
  fetches = fetches + n
  share_sum = share_sum + share * n
  if share >= 0.9 then reused = reused + n end
end
for i = 1, #ARGV, 4 do
  local epoch, total, stable, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if pe then
    local shared = ps
    if pe ~= epoch then
      snap = snap or redis.call('HMGET', KEYS[2], 'epoch', 'bytes')
      if snap[1] and tonumber(snap[1]) == epoch then shared = math.min(shared, tonumber(snap[2])) else shared = 0 end
    end
    count(shared, total, 1)
  end
  if n > 1 then count(stable, total, n - 1) end
  pe, ps = epoch, stable
end
if fetches > 0 then
  redis.call('HINCRBY', KEYS[1], 'fetches', fetches)
  redis.call('HINCRBYFLOAT', KEYS[1], 'share_sum', share_sum)
  if reused > 0 then redis.call('HINCRBY', KEYS[1], 'reused_90', reused) end
end
redis.call('HSET', KEYS[1], 'epoch', pe, 'stable', ps)
return fetches
"""


def reuse_runs(fetches: list[tuple[int, int, int, int]]) -> dict[int, list[int]]:
    """Each session's fetches, in order, as the script's ARGV: runs of identical (epoch, total,
    stable) as (epoch, total, stable, count)."""
    runs: dict[int, list[int]] = {}
    for pk, epoch, total, stable in fetches:
        args = runs.setdefault(pk, [])
        if args and args[-4:-1] == [epoch, total, stable]:
            args[-1] += 1
        else:
            args += (epoch, total, stable, 1)
    return runs


class Counters:
    """Best-effort counts: a Redis outage loses a count, never fails a request."""

    def __init__(self, r: GuardedRedis) -> None:
        self.r = r
        self._reuse = r.client.register_script(_REUSE)

    def record_shared_prefix(self, session_pk: int, epoch: int, shared_bytes: int) -> None:
        """At publish: how many leading bytes the new epoch's snapshot shares with the old one."""
        key = f"{self.r.prefix}shared:{session_pk}"
        self.r.call(lambda: self.r.client.hset(key, mapping={"epoch": epoch, "bytes": shared_bytes}), 0)

    def record_fetches(self, fetches: list[tuple[int, int, int, int]]) -> None:
        """Count served prompts' byte-identical reuse of the previous one, in fetch order, in one
        round trip: (session pk, epoch, request bytes, stable bytes) each; one script call per
        session, not per fetch (a call per fetch held the API's GIL and Redis long enough to delay
        the fetches behind it: BENCHMARKS.md, session 6). Best effort."""
        if not fetches:
            return

        def write() -> None:
            pipe = self.r.client.pipeline(transaction=False)
            for pk, args in reuse_runs(fetches).items():
                keys = [f"{self.r.prefix}reuse:{pk}", f"{self.r.prefix}shared:{pk}"]
                self._reuse(keys=keys, args=args, client=pipe)
            pipe.execute()

        self.r.call(write, None)

    def add_usage(
        self, session_pk: int, input_tokens: int, output_tokens: int, cost_usd: float | None
    ) -> None:
        """Accumulate a session's summarizer usage (LLM summarizers only)."""
        key = f"{self.r.prefix}usage:{session_pk}"

        def write() -> None:
            pipe = self.r.client.pipeline()
            pipe.hincrby(key, "summaries", 1)
            pipe.hincrby(key, "input_tokens", input_tokens)
            pipe.hincrby(key, "output_tokens", output_tokens)
            if cost_usd is not None:
                pipe.hincrbyfloat(key, "cost_usd", cost_usd)
            pipe.execute()

        self.r.call(write, None)

    def count_switch(self, session_pk: int, reason: str) -> None:
        """A prepared summary was switched in (reason: quiet, deadline or forced)."""
        self.r.call(lambda: self.r.client.hincrby(f"{self.r.prefix}switches:{session_pk}", reason, 1), 0)

    def session_stats(self, session_pk: int) -> dict[str, dict[str, float]]:
        """{"cache_reuse", "summarizer_usage", "switches"} for GET /v1/sessions/{sid}."""

        def read() -> tuple[Any, Any, Any]:
            pipe = self.r.client.pipeline(transaction=False)
            for kind in ("reuse", "usage", "switches"):
                pipe.hgetall(f"{self.r.prefix}{kind}:{session_pk}")
            reuse, usage, switches = pipe.execute()
            return reuse, usage, switches

        got = self.r.call(read, None)
        if got is None:
            return {}
        reuse, usage, switches = got
        r = {k.decode(): float(v) for k, v in reuse.items()}
        n = r.get("fetches", 0.0)
        return {
            "cache_reuse": {
                "fetches_compared": int(n),
                "mean_reused_share": round(r.get("share_sum", 0.0) / n, 4) if n else 0.0,
                "share_of_fetches_reusing_90pct": round(r.get("reused_90", 0.0) / n, 4) if n else 0.0,
            },
            "summarizer_usage": {k.decode(): float(v) for k, v in usage.items()},
            "switches": {k.decode(): int(v) for k, v in switches.items()},
        }

    def count(self, field: str, amount: int = 1) -> None:
        self.r.call(lambda: self.r.client.hincrby(f"{self.r.prefix}stats", field, amount), 0)

    def totals(self) -> dict[str, int]:
        raw = self.r.call(lambda: self.r.client.hgetall(f"{self.r.prefix}stats"), None)
        if raw is None:
            return {}
        return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]
