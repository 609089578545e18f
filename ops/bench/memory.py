"""Working memory under real use: the two long Claude Code sessions appended over HTTP to a real
`compactd up` at an agent's pace, memory read back at checkpoints and checked against the transcript.

Run: python -m ops.bench memory [--pace 0.25] [--every 25] [--window 200000]

Every `--every` appended messages (a checkpoint) the bench waits for the worker to catch up (at
most 20 s; the wait is reported), then reads GET /memory and GET /prompt. What the transcript
shows at that point is computed here, independently of the observer, from the messages so far:
files read/edited/created by tool calls (and not deleted or moved away since), and which shell
commands are still failing: the latest run failed (`is_error` on its result) and no later run of
the same program and subcommand (`git push`, `mix credo`) passed — keyed by the observer's command
normalization so the two can be compared.

- files true: share of important_files the transcript has touched by then and not removed;
  recent edits kept: share of the 3 most recently edited/created files that are in important_files.
- blockers true: share of open blockers whose command is still failing; failing kept: share of
  the commands still failing (failed in the last 50 messages, not a probe such as grep/ls) that
  are open blockers.
- pinned changes within an epoch: how often the memory block at the top of the served prompt
  differed between two checkpoints of the same epoch (must be 0: changes go to the memory note of the next user turn).
- still true at the end: share of observed items (files, blockers, last edit) the transcript
  still supports at the end of the session.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from api.cli.drive import replay_http
from ops.bench.common import data_dir, table
from ops.bench.paced import running_up
from ops.bench.replay import SESSIONS
from worker.compaction.formats import load_transcript
from worker.flows.simulate import parse_pace
from worker.memory.commands import is_probe, normalize

KEY = "bench-memory-key-0123456789"
EDITS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
READS = frozenset({"Read"})
_MOVE = re.compile(r"(?:^|&&|;)\s*(?:git\s+)?(mv|rm)\s+(?:-\w+\s+)*(\S+)(?:\s+(\S+))?")


@dataclass
class Truth:
    """What the transcript shows after some messages."""

    touched: set[str] = field(default_factory=set)
    edited: list[str] = field(default_factory=list)  # newest last, each path once
    gone: set[str] = field(default_factory=set)
    latest: dict[str, tuple[bool, int]] = field(default_factory=dict)  # command -> (failed, message index)
    passed: dict[str, int] = field(default_factory=dict)  # program + subcommand -> last passing message

    def failing(self, key: str) -> bool:
        """Whether a command is still failing: its latest run failed, and nothing of its kind passed since."""
        bad, at = self.latest.get(key, (False, 0))
        return bad and self.passed.get(_kind(key), -1) < at


def _kind(key: str) -> str:
    return " ".join(key.split()[:2])


def truth(messages: Sequence[dict[str, Any]]) -> Truth:
    """Files touched and each command's latest outcome, read straight from the messages."""
    t, calls = Truth(), {}
    for i, m in enumerate(messages):
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") == "tool_use":
                calls[b["id"]] = (b["name"], b.get("input") or {})
                _file_call(t, b["name"], b.get("input") or {})
            elif b.get("type") == "tool_result" and b.get("tool_use_id") in calls:
                name, args = calls[b["tool_use_id"]]
                if name == "Bash" and isinstance(args.get("command"), str):
                    key, failed = normalize(args["command"]), bool(b.get("is_error"))
                    t.latest[key] = (failed, i)
                    if not failed:
                        t.passed[_kind(key)] = i
                    _moves(t, args["command"])
    return t


def _file_call(t: Truth, name: str, args: dict[str, Any]) -> None:
    path = args.get("file_path") or args.get("notebook_path")
    if not isinstance(path, str) or name not in EDITS | READS:
        return
    t.touched.add(path)
    t.gone.discard(path)
    if name in EDITS:
        t.edited = [p for p in t.edited if p != path] + [path]


def _moves(t: Truth, command: str) -> None:
    for verb, a, b in _MOVE.findall(command):
        t.gone.add(a)
        if verb == "mv" and b:
            t.touched.add(b)


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 3) if total else None


@dataclass
class Checkpoint:
    turn: int
    tokens: int
    waited_s: float
    files: list[str]
    blockers: list[str]
    epoch: int
    pinned: str


def checkpoint_row(cp: Checkpoint, t: Truth) -> dict[str, Any]:
    """One checkpoint's figures against what the transcript shows at that point."""
    files_true = sum(f in t.touched and f not in t.gone for f in cp.files)
    recent = t.edited[-3:]
    failing = [
        k for k, (_, at) in t.latest.items() if t.failing(k) and at >= cp.turn - 50 and not is_probe(k)
    ]
    return {
        "turn": cp.turn,
        "memory_tokens": cp.tokens,
        "waited_s": cp.waited_s,
        "files": len(cp.files),
        "files_true": _share(files_true, len(cp.files)),
        "recent_edits_kept": _share(sum(f in cp.files for f in recent), len(recent)),
        "blockers": len(cp.blockers),
        "blockers_true": _share(sum(t.failing(k) for k in cp.blockers), len(cp.blockers)),
        "failing_kept": _share(sum(k in cp.blockers for k in failing), len(failing)),
    }


def _take(client: httpx.Client, sid: str, turn: int, wait_s: float = 20.0) -> Checkpoint:
    started = time.monotonic()
    while time.monotonic() - started < wait_s:
        info = client.get(f"/v1/sessions/{sid}").json()
        if info.get("compacted_through", 0) >= turn:
            break
        time.sleep(0.2)
    waited = round(time.monotonic() - started, 2)
    memory = client.get(f"/v1/sessions/{sid}/memory").json()
    prompt = client.get(f"/v1/sessions/{sid}/prompt").json()
    sections = memory["sections"]
    pinned = next((b["text"] for b in prompt["system"] if "<working_memory>" in b.get("text", "")), "")
    return Checkpoint(
        turn,
        memory["tokens"],
        waited,
        [i["key"] for i in sections["important_files"] if i["status"] == "open"],
        [i["key"] for i in sections["blockers"] if i["status"] == "open"],
        prompt["epoch"],
        pinned,
    )


def one(path: Path, port: int, pace: str, every: int, window: int) -> dict[str, Any]:
    """Replay one session with checkpoints; its rows and its end-of-session figures."""
    imported = load_transcript(path)
    taken: list[Checkpoint] = []

    def after_append(client: httpx.Client, sid: str, i: int) -> None:
        if (i + 1) % every == 0 or i + 1 == len(imported.messages):
            taken.append(_take(client, sid, i + 1))

    sid = f"memory-{path.name[:8]}"
    replay_http(
        f"http://127.0.0.1:{port}",
        KEY,
        imported.system,
        imported.messages,
        pace=parse_pace(pace),
        timestamps=imported.meta.get("timestamps"),
        context_window=window,
        session_id=sid,
        after_append=after_append,
    )
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"}) as c:
        memory = c.get(f"/v1/sessions/{sid}/memory").json()
        history = c.get(f"/v1/sessions/{sid}/memory/history").json()
    rows = [checkpoint_row(cp, truth(imported.messages[: cp.turn])) for cp in taken]
    end = _end_figures(memory, truth(imported.messages), history)
    end["pinned_changes_within_epoch"] = sum(
        a.epoch == b.epoch and a.pinned != b.pinned for a, b in pairwise(taken)
    )
    end["epochs"] = max((cp.epoch for cp in taken), default=0)
    end["budget_tokens"] = memory["budget_tokens"]
    end["max_memory_tokens"] = max((r["memory_tokens"] for r in rows), default=0)
    return {"session": path.name[:8], "rows": rows, "end": end}


def _end_figures(memory: dict[str, Any], t: Truth, history: dict[str, Any]) -> dict[str, Any]:
    """Share of observed items the transcript still supports at the end; events by origin."""
    sections = memory["sections"]
    observed = [i for s in ("important_files", "blockers", "last_edit") for i in sections[s]]
    observed = [i for i in observed if i["origin"] == "observed" and i["status"] == "open"]
    last = t.edited[-1] if t.edited else None

    def still_true(item: dict[str, Any]) -> bool:
        if item["section"] == "important_files":
            return item["key"] in t.touched and item["key"] not in t.gone
        if item["section"] == "blockers":
            return t.failing(item["key"])
        return last is not None and item["value"].startswith(last)

    origins: dict[str, int] = {}
    for version in history.get("versions", []):
        for event in version.get("events", []):
            origins[event["origin"]] = origins.get(event["origin"], 0) + 1
    return {
        "observed_open": len(observed),
        "still_true": _share(sum(still_true(i) for i in observed), len(observed)),
        "events": origins,
    }


COLUMNS = [
    "turn",
    "memory_tokens",
    "waited_s",
    "files",
    "files_true",
    "recent_edits_kept",
    "blockers",
    "blockers_true",
    "failing_kept",
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pace", default="0.25")
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--window", type=int, default=200_000)
    args = parser.parse_args(argv or [])
    root = data_dir() / "transcripts" / "claude-code" / "spotter"
    with running_up(KEY) as port, ThreadPoolExecutor(max_workers=len(SESSIONS)) as pool:
        futures = [
            pool.submit(one, root / name, port, args.pace, args.every, args.window) for name in SESSIONS
        ]
        results = [f.result() for f in futures]
    for r in results:
        print(f"\n{r['session']} (pace {args.pace} s, checkpoint every {args.every} messages)")
        print(table(r["rows"], COLUMNS))
        print("end:", r["end"])
    return {"sessions": results}


if __name__ == "__main__":
    main(sys.argv[1:])
