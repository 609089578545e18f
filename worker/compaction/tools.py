"""Anthropic tool definitions an agent can include so the model follows compactd's pointers itself."""

from __future__ import annotations

from typing import Any

READ_FILE = {
    "name": "read_file",
    "description": (
        "Read back content that compactd clipped, offloaded or archived to save context. Every "
        "'[compactd: ...]' marker and the handoff note name a ref (f_... for tool outputs and "
        "arguments, h_... for archived conversation turns as JSON lines). Give a line range to "
        "read part of it; reads are limited to 2,000 lines at a time."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ref": {"type": "string", "description": "The ref named in the marker, e.g. f_0123456789abcdef."},
            "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line (inclusive)."},
        },
        "required": ["ref"],
    },
}

GREP = {
    "name": "grep",
    "description": (
        "Search a compactd virtual file (a ref from a '[compactd: ...]' marker or the handoff note) "
        "for lines matching a regular expression (RE2 syntax). Returns numbered lines."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ref": {"type": "string"},
            "pattern": {"type": "string", "description": "RE2 regular expression."},
            "max_matches": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
        },
        "required": ["ref", "pattern"],
    },
}


def tool_definitions() -> list[dict[str, Any]]:
    """The tools to pass as `tools=` to messages.create, alongside the agent's own."""
    return [READ_FILE, GREP]
