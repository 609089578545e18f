"""Clip: in the old zone, long tool outputs keep their head and tail; bulky write/edit arguments
keep their start. The full text goes to a virtual file named in the elision marker."""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.compaction import pointers
from worker.compaction.model import (
    DEFAULT_POLICY,
    Block,
    FileWrite,
    Transcript,
    Turn,
    block_text,
    retokened,
    with_text,
)
from worker.compaction.tokens import count_message, encoding, end_ids, known_count
from worker.compaction.zones import first_kept, keep_start

# Calls whose bulky arguments are file contents already on disk (write, edit, patch and kin).
WRITE_LIKE = re.compile(r"(?i)write|edit|patch|create|replace|insert|apply|notebook|save")
_MARGIN_TOKENS = 100  # clip only when it saves at least this much beyond the marker


@dataclass(frozen=True, slots=True)
class Clip:
    """Clip tool outputs over `clip_tokens` (head/tail split) and write-like arguments over
    `arg_clip_chars`, in turns older than the keep window (the first task is never touched)."""

    clip_tokens: int = DEFAULT_POLICY.clip_tokens
    head_share: float = DEFAULT_POLICY.clip_head_share
    arg_clip_chars: int = DEFAULT_POLICY.arg_clip_chars
    keep_tokens: int = DEFAULT_POLICY.keep_tokens
    # last resort of a fetch that must fit: every turn, the keep window included, and text blocks
    # too (the full text stays readable through the marker's ref); the task as well with `task`
    whole: bool = False
    task: bool = True

    def __call__(self, t: Transcript) -> Transcript:
        if self.whole:
            start, end = 0 if self.task else first_kept(t.turns), len(t.turns)
        else:
            start, end = first_kept(t.turns), keep_start(t.turns, self.keep_tokens)
        files: list[FileWrite] = []
        turns = [self._turn(turn, files) if start <= i < end else turn for i, turn in enumerate(t.turns)]
        return t.with_turns(turns).add_files(*files)

    def _turn(self, turn: Turn, files: list[FileWrite]) -> Turn:
        content = tuple(self._block(b, files) for b in turn.content)
        return retokened(turn, content, count_message)

    def _block(self, block: Block, files: list[FileWrite]) -> Block:
        kind = block.get("type")
        if kind == "tool_result":
            text = block_text(block)
            new = self._output(text, files)
            return block if new is text else with_text(block, new)
        if kind == "text" and self.whole:
            text = block_text(block)
            new = self._output(text, files)
            return block if new is text else with_text(block, new)
        if kind == "tool_use" and (self.whole or WRITE_LIKE.search(str(block.get("name", "")))):
            data = block.get("input", {})
            new_input = {k: self._argument(v, files) if isinstance(v, str) else v for k, v in data.items()}
            return block if all(new_input[k] is data[k] for k in data) else {**block, "input": new_input}
        return block

    def _output(self, text: str, files: list[FileWrite]) -> str:
        limit = self.clip_tokens + _MARGIN_TOKENS
        if len(text) <= limit or (pointers.is_marked(text) and not self.whole) or pointers.is_tagged(text):
            return text
        known = known_count(text)
        if known is not None and known <= limit:
            # counted at ingest in this process: no need to tokenize it again to learn it fits
            return text
        head_n = int(self.clip_tokens * self.head_share)
        tail_n = self.clip_tokens - head_n
        # counted and over: only its two ends need tokenizing
        ends = end_ids(text, head_n, tail_n) if known is not None else None
        if known is None or ends is None:
            ids = encoding().encode_ordinary(text)
            if len(ids) <= limit:
                return text
            known, ends = len(ids), (ids[:head_n], ids[-tail_n:])
        head = _to_line_end(encoding().decode(ends[0]))
        tail = _from_line_start(encoding().decode(ends[1]))
        ref = pointers.file_ref(text)
        files.append(FileWrite(ref=ref, kind="clip", content=text))
        total_lines = text.count("\n") + 1
        first = head.count("\n") + 1
        last = max(first, total_lines - tail.count("\n") - 1)
        cut = known - head_n - tail_n
        return head + pointers.clipped(cut, ref, first, last) + tail

    def _argument(self, value: str, files: list[FileWrite]) -> str:
        if len(value) <= self.arg_clip_chars or pointers.is_marked(value):
            return value
        keep = self.arg_clip_chars // 10
        ref = pointers.file_ref(value)
        files.append(FileWrite(ref=ref, kind="clip", content=value))
        return value[:keep] + pointers.argument_clipped(len(value) - keep, ref)


def _to_line_end(head: str) -> str:
    """Trim a head back to its last full line when that loses little."""
    cut = head.rfind("\n")
    return head[: cut + 1] if cut >= len(head) * 0.8 else head


def _from_line_start(tail: str) -> str:
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut <= len(tail) * 0.2 else tail
