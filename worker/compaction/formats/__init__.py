"""Transcript importers: other agents' logs as valid Anthropic Messages conversations.

load_transcript(source) detects the format (detect.py) and runs its module's load(data); each
module maps its format onto entries and shaping.py makes them a valid request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from worker.compaction.errors import UnknownFormat
from worker.compaction.formats import anthropic, claude_code, langchain, openai, openhands, swe_agent
from worker.compaction.formats.detect import FORMATS, detect_format
from worker.compaction.formats.imported import Imported

LOADERS: dict[str, Callable[[bytes], Imported]] = {
    "anthropic": anthropic.load,
    "openai": openai.load,
    "claude_code": claude_code.load,
    "swe_agent": swe_agent.load,
    "openhands": openhands.load,
    "langchain": langchain.load,
}

__all__ = ["FORMATS", "LOADERS", "Imported", "detect_format", "load_transcript"]


def load_transcript(source: bytes | str | Path, format: str = "auto") -> Imported:
    """Import a transcript (bytes, or the path of a file) in `format`, or the detected one for "auto".

    Raises UnknownFormat (format not recognised or not supported), InvalidTranscript (the file
    cannot be read as that format) or OSError (the path cannot be read).
    """
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    name = format.strip().lower().replace("-", "_")
    if name == "auto":
        name = detect_format(data)
    loader = LOADERS.get(name)
    if loader is None:
        raise UnknownFormat(f"format {format!r} is not supported; use 'auto' or one of {', '.join(FORMATS)}")
    return loader(data)
