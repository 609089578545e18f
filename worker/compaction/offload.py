"""Offload: at ingest, any single block over the threshold moves to a virtual file.

What stays is a head preview and a pointer; the payload is returned as a FileWrite for the job to
persist under its content-addressed ref. Images and base64 documents are never turned into text.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.compaction import pointers
from worker.compaction.model import (
    DEFAULT_POLICY,
    Block,
    FileWrite,
    Transcript,
    block_text,
    retokened,
    with_text,
)
from worker.compaction.tokens import count_message, count_text, head_text


@dataclass(frozen=True, slots=True)
class Offload:
    """Move blocks over `offload_tokens` to virtual files, keeping the first `preview_tokens`."""

    offload_tokens: int = DEFAULT_POLICY.offload_tokens
    preview_tokens: int = DEFAULT_POLICY.preview_tokens

    def __call__(self, t: Transcript) -> Transcript:
        files: list[FileWrite] = []
        turns = []
        for turn in t.turns:
            content = tuple(self._block(b, files) for b in turn.content)
            turns.append(retokened(turn, content, count_message))
        return t.with_turns(turns).add_files(*files)

    def _block(self, block: Block, files: list[FileWrite]) -> Block:
        kind = block.get("type")
        if kind in ("text", "tool_result"):
            text = block_text(block)
            new = self._text(text, files)
            return block if new is text else with_text(block, new)
        if kind == "tool_use":
            data = block.get("input", {})
            new_input = {k: self._text(v, files) if isinstance(v, str) else v for k, v in data.items()}
            return block if all(new_input[k] is data[k] for k in data) else {**block, "input": new_input}
        return block

    def _text(self, text: str, files: list[FileWrite]) -> str:
        # a block can't have more tokens than characters: skip the tokenizer for short text
        if len(text) <= self.offload_tokens or pointers.is_marked(text) or pointers.is_tagged(text):
            return text
        total = count_text(text)
        if total <= self.offload_tokens:
            return text
        ref = pointers.file_ref(text)
        files.append(FileWrite(ref=ref, kind="offload", content=text))
        preview = head_text(text, self.preview_tokens)
        return preview + pointers.offloaded(total, text.count("\n") + 1, ref)
