"""Fidelity: how much of a compacted span an agent can still see, counted, not eyeballed.

Items of a span: file paths in tool calls, shell commands, user instructions, and error lines
(the first line of an is_error result, and lines that start like an error in any result). An
item counts as kept when its key appears in the text (whitespace folded): a path relative to the
span's common root (summaries write project-relative paths), the first 80 characters of a
command's first line, of an instruction and of an error line. Both summaries are scored alike.

1. served prompt: items of every turn the compactor changed or evicted, looked up in the served
   prompt (the DESIGN target is >= 95%);
2. handoff note vs Claude Code's own compaction summary, on the same evicted span of the two long
   spotter sessions (their `isCompactSummary` line right after a `compact_boundary`).

Run: python -m ops.bench.fidelity
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from ops.bench.common import data_dir, table
from worker.compaction.assemble import assemble
from worker.compaction.formats import load_transcript
from worker.compaction.model import Policy, Transcript, Turn, block_text
from worker.compaction.pipeline import compact
from worker.compaction.summarize import Summarize
from worker.ingest import ingest
from worker.redaction import Redactor

LONG_SESSIONS = ("fa812bfe-b295-4cca-9c2f-fdf01028cb46.jsonl", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
KINDS = ("files", "commands", "instructions", "errors")
ERROR_START = re.compile(
    r"^\s*(\w*Error\b|\w*Exception\b|error\b|ERROR\b|FAILED\b|FAIL\b|Traceback\b|fatal\b|panic\b)"
)
INJECTED = ("<system-reminder>", "<command-", "<local-command-", "Caveat:")


def fold(text: str) -> str:
    return " ".join(text.split())


def span_items(turns: Iterable[Turn]) -> dict[str, list[str]]:
    """The items of a span, each kind deduplicated."""
    found: dict[str, list[str]] = {k: [] for k in KINDS}
    for turn in turns:
        for b in turn.content:
            kind = b.get("type")
            if kind == "tool_use":
                args = b.get("input") or {}
                for key in ("file_path", "path", "notebook_path"):
                    if isinstance(args.get(key), str):
                        found["files"].append(args[key])
                if isinstance(args.get("command"), str) and re.search(
                    r"(?i)bash|shell|run|exec", str(b.get("name"))
                ):
                    found["commands"].append(args["command"])
            elif kind == "text" and turn.role == "user" and not b["text"].strip().startswith(INJECTED):
                found["instructions"].append(b["text"])
            elif kind == "tool_result":
                lines = [ln for ln in block_text(b).splitlines() if ln.strip()]
                if b.get("is_error") and lines:
                    found["errors"].append(lines[0])
                found["errors"].extend(ln for ln in lines if ERROR_START.match(ln))
    # a common root of absolute paths only (SWE-agent's relative ones have none to strip)
    absolute = len(found["files"]) > 1 and all(f.startswith("/") for f in found["files"])
    root = os.path.commonpath(found["files"]) if absolute else ""
    found["files"] = [f[len(root) :].lstrip("/") or f if root.count("/") > 1 else f for f in found["files"]]
    found["commands"] = [c.strip().splitlines()[0] for c in found["commands"] if c.strip()]
    return {k: list(dict.fromkeys(fold(x)[:80] for x in v if x.strip())) for k, v in found.items()}


# a handoff note states its paths' common root once and writes them relative to it
STATED_ROOT = re.compile(r"File paths below are relative to (/\S+?)/?$", re.MULTILINE)


def kept_share(items: dict[str, list[str]], haystack: str) -> dict[str, Any]:
    text = fold(haystack)
    roots = STATED_ROOT.findall(haystack)
    kept = {k: [x in text or _under_stated_root(x, roots, text) for x in items[k]] for k in KINDS}
    out: dict[str, Any] = {k: f"{sum(kept[k])}/{len(kept[k])}" for k in KINDS}
    total = sum(len(v) for v in kept.values())
    # nothing compacted: nothing lost
    out["all"] = round(sum(sum(v) for v in kept.values()) / total, 3) if total else 1.0
    return out


def _under_stated_root(item: str, roots: list[str], text: str) -> bool:
    """An absolute path a note wrote relative to the root it states (`File paths below are
    relative to <root>/`): the rest of the path is in the text."""
    return any(item.startswith(root + "/") and item[len(root) + 1 :] in text for root in roots)


def served_fidelity(path: Path, window: int) -> dict[str, Any]:
    imported = load_transcript(path)
    policy = Policy(context_window=window)
    t = Transcript(
        imported.system, ingest(imported.messages, first_seq=1, redactor=Redactor(b"b"), policy=policy).turns
    )
    out = compact(t, policy, summarize=True).transcript
    after = {x.seq: x for x in out.turns}
    touched = [x for x in t.turns if after.get(x.seq) != x]
    served = _plain_text(assemble(out))
    return {
        "file": path.name[:24],
        "window": window,
        "compacted_turns": len(touched),
        **kept_share(span_items(touched), served),
    }


def _plain_text(request: dict[str, Any]) -> str:
    parts = [b.get("text", "") for b in request["system"]]
    for m in request["messages"]:
        for b in m["content"]:
            parts.append(
                block_text(b) if b.get("type") != "tool_use" else orjson.dumps(b.get("input", {})).decode()
            )
            if b.get("type") == "tool_use":
                parts.extend(str(v) for v in (b.get("input") or {}).values())
    return "\n".join(parts)


def versus_claude_code(path: Path) -> list[dict[str, Any]]:
    """Our handoff note and Claude Code's summary, scored on the span we evicted before its boundary."""
    lines = path.read_bytes().splitlines(keepends=True)
    boundary = next(i for i, ln in enumerate(lines) if b'"compact_boundary"' in ln)
    summary_line = next(
        orjson.loads(ln) for ln in lines[boundary:] if b'"isCompactSummary":true' in ln.replace(b" ", b"")
    )
    theirs = summary_line["message"]["content"]
    theirs = theirs if isinstance(theirs, str) else " ".join(block_text(b) for b in theirs)
    imported = load_transcript(b"".join(lines[:boundary]), format="claude_code")
    policy = Policy(context_window=200_000)
    t = Transcript(
        imported.system, ingest(imported.messages, first_seq=1, redactor=Redactor(b"b"), policy=policy).turns
    )
    stage = Summarize(
        trigger_tokens=0,
        target_tokens=0,
        keep_tokens=policy.keep_tokens,
        max_note_tokens=int(policy.budget_tokens * policy.handoff_max_share),
        force=True,
    )
    out = stage(t)
    evicted = [x for x in t.turns if out.handoff and out.handoff.covers(x.seq)]
    items = span_items(evicted)
    ours = out.handoff.text if out.handoff else ""
    name = path.name[:24]
    return [
        {"session": name, "summary": "compactd handoff", "note_chars": len(ours), **kept_share(items, ours)},
        {
            "session": name,
            "summary": "Claude Code /compact",
            "note_chars": len(theirs),
            **kept_share(items, theirs),
        },
    ]


def main() -> dict[str, Any]:
    root = data_dir() / "transcripts" / "claude-code" / "spotter"
    served = [served_fidelity(root / name, w) for name in LONG_SESSIONS for w in (200_000, 64_000, 32_000)]
    print("Served prompt: items of compacted turns still visible")
    print(table(served, ["file", "window", "compacted_turns", *KINDS, "all"]))
    versus = [row for name in LONG_SESSIONS for row in versus_claude_code(root / name)]
    print("\nHandoff note vs Claude Code's own summary, same evicted span")
    print(table(versus, ["session", "summary", "note_chars", *KINDS, "all"]))
    return {"served": served, "versus": versus}


if __name__ == "__main__":
    main()


def final_fidelity(system: str, messages: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    """The same measure on a served prompt: of the turns not served verbatim, how many of their
    files, commands, instructions and error lines the prompt still shows."""
    policy = Policy()
    turns = ingest(messages, first_seq=1, redactor=Redactor(b"b"), policy=policy).turns
    served = _plain_text(request)
    folded = fold(served)
    touched = [
        t
        for t in turns
        if not all(fold(block_text(b))[:200] in folded for b in t.content if block_text(b).strip())
    ]
    return {"compacted_turns": len(touched), **kept_share(span_items(touched), served)}
