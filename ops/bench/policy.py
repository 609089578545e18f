"""The cost policy study (issue 27): Policy variants replayed offline, judged by what the provider
charges, on the shared long sessions and on long sessions generated from real turns.

Run: python -m ops.bench.policy [--variants today,chosen] [--sessions fa812bfe,...]
                                [--windows 200000,64000,32000] [--paces 0.25]
Per (variant, session, window, pace): the cost under the provider's cache prices against the
uncompacted history (`cost_ratio`), the share of consecutive fetches that read a prefix from the
cache (`hit`), that read the whole previous prompt (`whole`, from the bills) and that start with
the previous prompt through its last breakpoint (`prefix`, from the prompts: `pricing.keeps_prefix`,
issue 27's "read the previous prefix"; `python -m ops.bench.bound` bounds it), the share of input tokens read
from the cache, epochs, fetches over budget and the fidelity of the last prompt served (and its
mean over 16 fetches of the run's second half, `fidelity_run`).
Jobs take a fixed JOB_SECONDS, so every figure is a token count, whatever the machine's load.

Sessions (`SESSIONS`): the two long Claude Code sessions; `258c7280x2`, that session twice in a
row (the second copy's tool ids renamed: a ~290k-token session that outgrows the 200k window);
`medium`, every medium-sized shared transcript (Claude Code subagents and viewer, SWE-agent,
OpenHands) one after the other as one session of consecutive tasks; `<session>+sys`, the session
behind a 12k-token system prompt; `<session>+proxy` (e.g. `fa812bfe+sys+proxy`), billed as the
drop-in proxy sends it upstream (the client's system prompt marked, at most 4 breakpoints);
`gen1`, `gen2` and `gen3`, 150, 300 and 300 tool calls with their results drawn from the real sessions in a
seeded order (`generated`); `gen4`, `gen5`, `gen6` (300, 200, 250), orders first replayed as held out
(session 8); `gen7`, `gen8`, `gen9` (300, 250, 300), held out in session 10.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from ops.bench.common import data_dir, table
from ops.bench.fidelity import final_fidelity
from ops.bench.signing import SignedThinking
from worker.compaction.epochs import Step
from worker.compaction.formats import load_transcript
from worker.compaction.model import Policy, Transcript
from worker.compaction.prefixes import extends
from worker.flows import simulate
from worker.flows.simulate import Fetch, parse_pace, replay

JOB_SECONDS = 0.05
FIDELITY_SAMPLES = 16
SPOTTER = "transcripts/claude-code/spotter/"
LONG = {
    "fa812bfe": SPOTTER + "fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl",
    "258c7280": SPOTTER + "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
}
MEDIUM = (
    SPOTTER + "fa812bfe-b295-4cca-9c2f-fdf01028cb46/subagents/agent-aa84377.jsonl",
    SPOTTER + "fa812bfe-b295-4cca-9c2f-fdf01028cb46/subagents/agent-a93ccab.jsonl",
    SPOTTER + "258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl",
    SPOTTER + "subagent.jsonl",
    "transcripts/claude-code/claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
    "transcripts/swe-agent/marshmallow-1867__function_calling_replace_from_source.traj",
    "transcripts/swe-agent/pydicom__pydicom-1458.traj",
    "transcripts/swe-agent/ctf_web_i_got_id_demo.traj",
    "transcripts/swe-agent/ctf_crypto_katy.traj",
    "transcripts/openhands/basic_gui_mode.json",
)

# Policy overrides per variant ("default": DEFAULT_POLICY). The engine before this study is run
# with PYTHONPATH at a checkout of it (its Policy ignores the knobs it does not have).
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-standing": {"standing_breakpoint": False},
    "worth0.1": {"worth_it_share": 0.1},
    "worth0.5": {"worth_it_share": 0.5},
    "gain5k": {"worth_it_tokens": 5_000},
    "struct0.15": {"structural_trigger": 0.15},
    "struct0.5": {"structural_trigger": 0.5},
    "keep0.05": {"keep_share": 0.05},
    "clip1000": {"clip_tokens": 1_000},
    "target0.35": {"summary_target_share": 0.35},
    "target0.4t": {"summary_target_share": 0.35, "summary_target_of_trigger": 0.4},
    # with keep_share 0.05 as the default (chosen), the small-window knob on top of it
    "chosen+target0.4t": {"summary_target_share": 0.35, "summary_target_of_trigger": 0.4},
    # second pass (issue 27): each reverts or moves one knob of the chosen engine
    "no-stack": {"stack_notes": False},
    "notes0.15": {"notes_max_share": 0.15},
    "notes0.25": {"notes_max_share": 0.25},
    "notes0.35": {"notes_max_share": 0.35},
    "clip1500": {"clip_tokens": 1_500},
    "clip500": {"clip_tokens": 500},
    "clip750": {"clip_tokens": 750},  # the default before session 8
    "struct0.3": {"structural_trigger": 0.3},
    "clip1500+struct0.3": {"clip_tokens": 1_500, "structural_trigger": 0.3},
    "args1000": {"arg_clip_chars": 1_000},
    "keep0.03": {"keep_share": 0.03},
    "keep0.1": {"keep_share": 0.1},
    # re-tuned on the faithful simulator (issue 27): the reverted knobs, each with stacking off too
    "clip1500+no-stack": {"clip_tokens": 1_500, "stack_notes": False},
    "struct0.3+no-stack": {"structural_trigger": 0.3, "stack_notes": False},
    "clip1500+struct0.3+no-stack": {"clip_tokens": 1_500, "structural_trigger": 0.3, "stack_notes": False},
    # fourth pass (issue 27, 32k): the rewrite past the trigger for any saving (the default before)
    "shrink0": {"shrink_min_tokens": 0},
    "shrink5k": {"shrink_min_tokens": 5_000},  # the default since session 12
    "shrink2k": {"shrink_min_tokens": 2_000},  # the default before it
    # fewer, larger steps: a smaller headroom (later summaries), no worth-it structural rounds
    "struct0.6": {"structural_trigger": 0.6},
    "no-worth-it": {"worth_it_tokens": 10**9},
    # session 10 (32k hit): fold-ups back to notes_max_share, stacking up to a higher ceiling
    # (0.40 chosen; `fold-at-ceiling` is the rule before: stacked notes only up to the fold's)
    "fold-at-ceiling": {"notes_stack_share": 0.0},
    "stack0.35": {"notes_stack_share": 0.35},
    "stack0.50": {"notes_stack_share": 0.50},
    # session 12 (64k prefix): fewer structural rounds that each pay back more
    "shrink5k+worth0.5": {"shrink_min_tokens": 5_000, "worth_it_share": 0.5},
    # session 13 (issue 40): a model that binds thinking prices the reasoning a rewrite drops
    # (the default rule for such a model); `unbound`, the rule for one that does not
    "reason0": {"reasoning_rewrite_tokens": 0},
    "reason5k": {"reasoning_rewrite_tokens": 5_000},
    "reason10k": {"reasoning_rewrite_tokens": 10_000},
    "reason20k": {"reasoning_rewrite_tokens": 20_000},
    "reason30k": {"reasoning_rewrite_tokens": 30_000},
}

# `<variant>+memory-every-summary`: the block refreshed at every summary round, stacked on the
# earlier notes or not (the service's rule before issue 27's fourth pass)
MEMORY_EVERY_SUMMARY = "+memory-every-summary"


def every_summary(current: Transcript, s: Step) -> bool:
    """`rewrites_top` for the old memory rule: every summary round counts as rewriting the top."""
    return s.publish.handoff != current.handoff


Loaded = tuple[str, list[dict[str, Any]], list[float | None] | None]  # system, messages, times


def _messages(root: Path, path: str, suffix: str = "") -> Loaded:
    imported = load_transcript(root / path)
    messages = imported.messages
    if suffix:
        messages = [_renamed(m, suffix) for m in messages]
    return imported.system, messages, imported.meta.get("timestamps")


def _renamed(message: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The message with its tool ids made unique again (a copy of a session played twice)."""
    content = message["content"]
    if not isinstance(content, list):
        return message
    out = []
    for b in content:
        if b.get("type") == "tool_use":
            b = {**b, "id": b["id"] + suffix}
        elif b.get("type") == "tool_result":
            b = {**b, "tool_use_id": b["tool_use_id"] + suffix}
        out.append(b)
    return {**message, "content": out}


def _joined(parts: list[Loaded]) -> Loaded:
    """One session of the parts in a row (no recorded times: replay it at a fixed pace)."""
    messages: list[dict[str, Any]] = []
    for _, part, _ in parts:
        messages += part
    return parts[0][0], messages, None


def system_prompt(tokens: int) -> str:
    """A deterministic system prompt of about `tokens` tokens (Claude Code sends one of several
    thousand, cached; the shared transcripts carry none): numbered rules, no two lines alike."""
    line = (
        "Rule {n}: when the user asks for change {n}, read the file first, then edit it, then run the tests."
    )
    return "\n".join(line.format(n=n) for n in range(tokens // 27))


def _with_system(loaded: Loaded, tokens: int) -> Loaded:
    _, messages, times = loaded
    return system_prompt(tokens), messages, times


def _steps(messages: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (assistant, user) pair after the task whose user message answers the assistant's calls."""
    out = []
    for a, u in itertools.pairwise(messages[1:]):
        ids = {b["id"] for b in a["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
        answers = {
            b.get("tool_use_id")
            for b in u["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        if a["role"] == "assistant" and u["role"] == "user" and ids and ids == answers:
            out.append((a, u))
    return out


def generated(root: Path, seed: int, steps: int) -> Loaded:
    """A long session generated from real turns: the first long session's task, then `steps` tool
    calls with their results drawn (seeded, each at most once) from both long sessions and the
    Claude Code subagents (334 in all), tool ids made unique. Real sizes and contents, an order no
    session had."""
    import random

    sources = [LONG["fa812bfe"], LONG["258c7280"], *MEDIUM[:4]]
    pool = [pair for path in sources for pair in _steps(_messages(root, path)[1])]
    messages = _messages(root, LONG["fa812bfe"])[1][:1]
    for k, (a, u) in enumerate(random.Random(seed).sample(pool, min(steps, len(pool)))):
        messages += [_renamed(a, f"_g{k}"), _renamed(u, f"_g{k}")]
    return "", messages, None


SESSIONS: dict[str, Callable[[Path], Loaded]] = {
    "fa812bfe": lambda root: _messages(root, LONG["fa812bfe"]),
    "258c7280": lambda root: _messages(root, LONG["258c7280"]),
    "258c7280x2": lambda root: _joined(
        [_messages(root, LONG["258c7280"]), _messages(root, LONG["258c7280"], "_2")]
    ),
    "medium": lambda root: _joined([_messages(root, p, f"_{i}") for i, p in enumerate(MEDIUM)]),
    # a real-size system prompt in front (12k tokens, about Claude Code's)
    "fa812bfe+sys": lambda root: _with_system(_messages(root, LONG["fa812bfe"]), 12_000),
    "258c7280+sys": lambda root: _with_system(_messages(root, LONG["258c7280"]), 12_000),
    # generated from real turns in an order no session had (issue 27: "long sessions you generate")
    "gen1": lambda root: generated(root, 1, 150),
    "gen2": lambda root: generated(root, 2, 300),
    "gen3": lambda root: generated(root, 3, 300),
    # first replayed in session 8, after its choices, as held-out orders (BENCHMARKS, session 8)
    "gen4": lambda root: generated(root, 4, 300),
    "gen5": lambda root: generated(root, 5, 200),
    "gen6": lambda root: generated(root, 6, 250),
    # first replayed in session 10, after its choices (gen4-6 had been replayed twice by then)
    "gen7": lambda root: generated(root, 7, 300),
    "gen8": lambda root: generated(root, 8, 250),
    "gen9": lambda root: generated(root, 9, 300),
}


def reading_previous(fetches: Sequence[Fetch]) -> float:
    """Share of consecutive fetches that read the previous fetch's whole cached prefix (through
    its last breakpoint) from the cache: nothing of the previous prompt was written again (computed here, not in the
    simulator's summary, so the study runs on the engine before it too)."""
    pairs = list(itertools.pairwise(fetches))
    whole = sum(b.billed.read_tokens >= a.billed.read_tokens + a.billed.write_tokens > 0 for a, b in pairs)
    return round(whole / max(1, len(pairs)), 3)


def through_proxy(system: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The request the drop-in proxy sends upstream for a served prompt: the client's system prompt
    with one breakpoint at its end, the served messages, at most 4 breakpoints (worker/proxy)."""
    from worker.proxy.outbound import limit_breakpoints, upstream_system

    def upstream(request: dict[str, Any]) -> dict[str, Any]:
        body = {"system": upstream_system(system, request["system"]), "messages": request["messages"]}
        return limit_breakpoints(body)

    return upstream


class Recorded:
    """The `upstream` hook of `replay` that keeps every request the provider receives, in order."""

    def __init__(self, rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        self.rewrite, self.requests = rewrite, list[dict[str, Any]]()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(self.rewrite(request) if self.rewrite else request)
        return self.requests[-1]


def run_fidelity(
    system: str,
    messages: Sequence[dict[str, Any]],
    fetches: Sequence[Fetch],
    requests: Sequence[dict[str, Any]],
) -> float:
    """Fidelity over the run, less coarse than the last prompt's: the mean of `final_fidelity` at
    FIDELITY_SAMPLES fetches spread evenly over the run's second half (where compaction has
    happened), each scored against the history up to that fetch."""
    half = len(fetches) // 2
    picks = sorted(
        {half + (len(fetches) - 1 - half) * k // (FIDELITY_SAMPLES - 1) for k in range(FIDELITY_SAMPLES)}
    )
    scores = [final_fidelity(system, list(messages[: fetches[i].turn]), requests[i])["all"] for i in picks]
    return round(sum(scores) / max(1, len(scores)), 3)


def one(
    variant: str, session: str, window: int, pace: str, root: Path, thinking: bool = False
) -> dict[str, Any]:
    system, messages, times = SESSIONS[session.removesuffix("+proxy")](root)
    base = variant.removesuffix(MEMORY_EVERY_SUMMARY)
    policy = Policy().for_window(window).with_overrides(VARIANTS[base])
    top = every_summary if variant.endswith(MEMORY_EVERY_SUMMARY) else simulate.rewrites_top
    recorded = Recorded(through_proxy(system) if session.endswith("+proxy") else None)
    # with `thinking`, a signed thinking block on every assistant turn (the engine before issue 40
    # takes none: its runs are measured without, their rewrites counted from the requests)
    extra: dict[str, Any] = (
        {"thinking": SignedThinking()}
        if thinking and "thinking" in inspect.signature(replay).parameters
        else {}
    )
    if thinking and not extra:
        # an engine that takes no thinking model gets the same blocks, unsigned: the same tokens
        messages = [SignedThinking.unsigned(m) if m["role"] == "assistant" else m for m in messages]
    with mock.patch.object(simulate, "rewrites_top", top):
        report = replay(
            system,
            messages,
            policy,
            pace=parse_pace(pace),
            timestamps=times,
            job_seconds=JOB_SECONDS,
            upstream=recorded,
            **extra,
        )
    s = report.summary()
    return {
        "variant": variant,
        "session": session,
        "window": window,
        "pace": s["pace"],
        "fetches": s["fetches"],
        "over_budget": s["over_budget"],
        "epochs": s["epochs"],
        "hit": s["fetches_reading_cache"],
        "whole": reading_previous(report.fetches),
        "prefix": s["fetches_keeping_prefix"],
        "read_share": s["cache_read_share"],
        "cost_usd": s["cost_usd"],
        "uncompacted_usd": s["cost_usd_uncompacted"],
        "cost_ratio": round(s["cost_usd"] / s["cost_usd_uncompacted"], 3),
        "fidelity": final_fidelity(system, messages, report.final_request)["all"],
        "fidelity_run": run_fidelity(system, messages, report.fetches, recorded.requests),
        "rewrites_per_100": rewrites_per_100(recorded.requests, len(messages)),
        **(
            {"valid": s.get("thinking_valid_fetches", 1.0), "own": s.get("thinking_own_prefix", 1.0)}
            if extra
            else {}
        ),
    }


def rewrites_per_100(requests: Sequence[dict[str, Any]], turns: int) -> float:
    """Requests that do not extend the one before (as the provider compares them), per 100 turns."""
    rewrites = sum(not extends(a, b) for a, b in itertools.pairwise(requests))
    return round(100 * rewrites / max(1, turns), 2)


COLUMNS = [
    "variant",
    "session",
    "window",
    "pace",
    "fetches",
    "over_budget",
    "epochs",
    "hit",
    "whole",
    "prefix",
    "read_share",
    "cost_usd",
    "uncompacted_usd",
    "cost_ratio",
    "fidelity",
    "fidelity_run",
    "rewrites_per_100",
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="default")
    parser.add_argument("--sessions", default=",".join(SESSIONS))
    parser.add_argument("--windows", default="200000,64000,32000")
    parser.add_argument("--paces", default="0.25")
    parser.add_argument(
        "--thinking", action="store_true", help="a signed thinking block on every assistant turn"
    )
    args = parser.parse_args(argv or [])
    root = data_dir()
    rows = []
    columns = [*COLUMNS, "valid", "own"] if args.thinking else COLUMNS
    for variant in args.variants.split(","):
        for session in args.sessions.split(","):
            for window in (int(w) for w in args.windows.split(",")):
                for pace in args.paces.split(","):
                    rows.append(one(variant, session, window, pace, root, args.thinking))
                    print(table(rows[-1:], columns).splitlines()[-1], flush=True)
    print(table(rows, columns))
    return {"rows": rows}


if __name__ == "__main__":
    main(sys.argv[1:])
