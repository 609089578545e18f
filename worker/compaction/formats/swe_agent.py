"""SWE-agent trajectories (.traj) as an Anthropic conversation, from their model-visible `history`.

- `system` messages form the system prompt;
- function-calling runs: assistant `tool_calls` become tool_use blocks and `role:"tool"` messages
  (`tool_call_ids`, or `tool_call_id`) their tool_result blocks (SWE-agent reuses call ids across
  steps; shaping renames repeats so every id is unique, with a warning);
- text-protocol runs stay text: the command is in the assistant text, the observation is the next
  user message; demonstrations (`is_demo`) are kept, as the model saw them.
`trajectory` (per-step copies of the same messages) and `info` are not imported.
"""

from __future__ import annotations

from typing import Any

from worker.compaction.errors import InvalidTranscript
from worker.compaction.formats.blocks import content_blocks, result
from worker.compaction.formats.chat import Dialect, load_chat
from worker.compaction.formats.documents import parse_document
from worker.compaction.formats.imported import Imported
from worker.compaction.formats.openai import assistant_blocks
from worker.compaction.model import Block


def load(data: bytes) -> Imported:
    """Import a SWE-agent trajectory's history."""
    doc = parse_document(data, "SWE-agent trajectory")
    history = doc.get("history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise InvalidTranscript("SWE-agent trajectory: expected an object with a 'history' list")
    steps = doc.get("trajectory")
    return load_chat(history, None, SWE_AGENT, {"steps": len(steps) if isinstance(steps, list) else 0})


def observation_results(message: dict[str, Any], where: str, warnings: list[str]) -> tuple[Block, ...]:
    """One tool_result per id the observation answers; without ids, its text."""
    ids = message.get("tool_call_ids")
    if not isinstance(ids, list):
        ids = [message.get("tool_call_id")]
    ids = [i for i in ids if isinstance(i, str) and i]
    content = message.get("content")
    if not ids:
        warnings.append(f"{where}: tool observation without tool_call_ids; kept as text")
        return tuple(content_blocks(content, where, warnings))
    return tuple(result(i, content, where, warnings) for i in ids)


SWE_AGENT = Dialect("swe_agent", label="history", assistant=assistant_blocks, tool=observation_results)
