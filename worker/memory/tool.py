"""The Anthropic tool `update_working_memory`: its input is the PATCH /memory body, forwarded as is."""

from __future__ import annotations

from typing import Any

from worker.memory.model import OPS, SECTIONS

UPDATE_WORKING_MEMORY: dict[str, Any] = {
    "name": "update_working_memory",
    "description": (
        "Keep your working memory current: a short structured document pinned at the top of your "
        "context that survives every compaction of the conversation. Sections: task (what you are "
        "doing), important_files (3-7 paths), decisions (what was decided and why), open_questions, "
        "next (the next step), blockers (failing command -> error), last_edit, notes (key: value). "
        "Use set to write or replace an item (task, next and last_edit hold one item each), add to add "
        "an item, remove to drop one, resolve to close a blocker or answer an open question. Call it "
        "when the task, a decision, a blocker or the plan changes; keep items short."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ops": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100,
                "description": "Operations, applied in order, all or nothing.",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": list(OPS)},
                        "section": {"type": "string", "enum": list(SECTIONS)},
                        "key": {
                            "type": "string",
                            "description": (
                                "The item: a file path, the failing command, a note's key. For remove "
                                "and resolve, the key shown in memory; omitted for set/add it is derived "
                                "from the value."
                            ),
                        },
                        "value": {"type": "string", "description": "The item's text (set and add)."},
                        "seq": {"type": "integer", "minimum": 0, "description": "The turn it came from."},
                    },
                    "required": ["op", "section"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["ops"],
        "additionalProperties": False,
    },
}


def memory_tool_definitions() -> list[dict[str, Any]]:
    """The working-memory tools a client passes to messages.create with its own."""
    return [UPDATE_WORKING_MEMORY]
