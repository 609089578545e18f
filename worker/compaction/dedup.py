"""Dedup: keep the newest copy of repeated tool output; older copies point to it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from worker.compaction import pointers
from worker.compaction.model import DEFAULT_POLICY, Block, Transcript, block_text, retokened, with_text
from worker.compaction.tokens import count_message, count_text
from worker.compaction.zones import first_kept, keep_start


@dataclass(frozen=True, slots=True)
class Dedup:
    """Replace older identical tool outputs (same content hash, whatever call made them) with a
    pointer to the newest copy. Only the old zone is rewritten; the keep window stays verbatim."""

    min_tokens: int = DEFAULT_POLICY.dedup_min_tokens  # below this a pointer saves nothing
    keep_tokens: int = DEFAULT_POLICY.keep_tokens

    def __call__(self, t: Transcript) -> Transcript:
        copies: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for i, _, b in t.blocks():
            text = block_text(b) if b.get("type") == "tool_result" else ""
            # a block has at most as many tokens as characters: short ones can't qualify
            if len(text) >= self.min_tokens and not text.startswith("[compactd: identical"):
                copies[pointers.original_hash(text)].append((t.turns[i].seq, b["tool_use_id"]))
        newest = {h: seen[-1] for h, seen in copies.items() if len(seen) > 1}
        if not newest:
            return t
        names = {b["id"]: str(b.get("name", "tool")) for _, _, b in t.blocks() if b.get("type") == "tool_use"}
        start, end = first_kept(t.turns), keep_start(t.turns, self.keep_tokens)

        def rewrite(b: Block) -> Block:
            if b.get("type") != "tool_result":
                return b
            text = block_text(b)
            later = newest.get(pointers.original_hash(text)) if len(text) >= self.min_tokens else None
            if later is None or later[1] == b["tool_use_id"] or count_text(text) < self.min_tokens:
                return b
            return with_text(b, pointers.identical(names.get(later[1], "tool"), later[1], later[0]))

        turns = [
            retokened(turn, tuple(rewrite(b) for b in turn.content), count_message)
            if start <= i < end
            else turn
            for i, turn in enumerate(t.turns)
        ]
        return t.with_turns(turns)
