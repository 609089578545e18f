"""Assemble: a transcript becomes the Anthropic request layout of DESIGN §4 (placeholder)."""

from __future__ import annotations

from typing import Any

from worker.compaction.model import Transcript


def assemble(t: Transcript) -> dict[str, Any]:
    """{"system": [text blocks], "messages": [...]}: system, memory, handoff, then the turns."""
    system = [{"type": "text", "text": t.system}] if t.system else []
    return {"system": system, "messages": [turn.as_message() for turn in t.turns]}
