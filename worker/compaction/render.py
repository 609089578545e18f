"""Render turns as text: verbatim JSON lines for the archive, readable lines for a summarizer."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from worker.compaction.model import Turn, block_text


def archive_jsonl(turns: Sequence[Turn]) -> str:
    """One turn per line, verbatim (already redacted): {"seq", "role", "content"}."""
    return "".join(
        orjson.dumps(
            {"seq": t.seq, "role": t.role, "content": list(t.content)}, option=orjson.OPT_SORT_KEYS
        ).decode()
        + "\n"
        for t in turns
    )


def span_text(turns: Sequence[Turn], max_block_chars: int = 2_000) -> str:
    """A readable rendering for an LLM summarizer; long blocks are cut (the archive has them whole)."""
    lines = []
    for turn in turns:
        for b in turn.content:
            kind = b.get("type")
            if kind == "tool_use":
                body = f"call {b.get('name')} {block_text(b)}"
            elif kind == "tool_result":
                flag = " (error)" if b.get("is_error") else ""
                body = f"result{flag}: {block_text(b)}"
            elif kind in ("text", "thinking"):
                body = block_text(b)
            else:
                body = f"[{kind}]"
            if len(body) > max_block_chars:
                body = (
                    body[:max_block_chars]
                    + f" … [{len(body) - max_block_chars:,} more characters in the archive]"
                )
            lines.append(f"[seq {turn.seq}] {turn.role}: {body}")
    return "\n".join(lines)
