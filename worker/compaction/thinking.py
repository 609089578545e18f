"""Thinking blocks and the prefix they are bound to: which ones a served prompt may carry.

Models with preserved thinking (Anthropic's Fable 5.1+, Mythos 5.x, Opus/Sonnet/Haiku 5.5; OpenAI's
newer reasoning models likewise) bind each thinking block to its prefix: system, tools and every
message before it. A block sent on a changed prefix is refused (a 400) or dropped, with every later
one; blocks may be removed from the start of the history, from its end, or all of them, never from
the middle of the run that is kept (docs/compaction.md, "Thinking and prefixes").

So a served prompt carries a thinking block only where its prefix is the one it was produced on:

- within an epoch the prompt only grows, so every block produced in it stays (the turns after the
  snapshot, from the version the epoch was first served at: `strip_through`);
- a rewrite (a new epoch, a fallback) keeps the blocks before its first changed position, as
  they were, and drops every block from there on (`kept_after_rewrite`): those were produced on
  the old prompt. The blocks it keeps are a run from the start, the ones it drops the rest, so no
  gap is ever left; a dropped block is never put back (the snapshot stores the prompt as served).

Older models do not bind thinking to a prefix (they only require the current tool loop's thinking,
unchanged): for them nothing is dropped (`binds_thinking`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from worker.compaction.model import Block, Transcript, Turn
from worker.compaction.tokens import count_block

THINKING = ("thinking", "redacted_thinking")
# what an assistant turn holding nothing but thinking keeps when its thinking goes (an empty
# message is not a valid request)
OMITTED = {"type": "text", "text": "(thinking omitted)"}

# claude-<family>-<major>[-<minor>][-<date>] (claude-opus-5-5, claude-sonnet-4-5-20250929) or the
# older claude-<major>[-<minor>]-<family> (claude-3-5-sonnet-20240620)
_NEW_NAME = re.compile(r"^claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:[-.](\d{1,2})(?!\d))?")
_OLD_NAME = re.compile(r"^claude-(\d+)(?:[-.](\d{1,2})(?!\d))?-")
# the first version of each family that runs the prefix check (platform.claude.com, "Preserved
# thinking": from Fable 5.1 and Opus, Sonnet and Haiku 5.5; Mythos 5.1 is taken as binding, the
# safe reading of two pages that differ); every later major binds
_BINDS_FROM = {"fable": (5, 1), "mythos": (5, 1), "opus": (5, 5), "sonnet": (5, 5), "haiku": (5, 5)}


@lru_cache(maxsize=256)
def binds_thinking(model: str | None) -> bool:
    """Whether `model` binds its thinking to the prefix it was produced on. Unknown models (another
    provider's, a gateway's alias) are taken to: dropping a block a model would have kept costs
    reasoning, sending one it refuses costs the request."""
    name = (model or "").strip().lower()
    if (old := _OLD_NAME.match(name)) is not None:
        return int(old.group(1)) >= 6
    new = _NEW_NAME.match(name)
    if new is None:
        return True
    major, minor = int(new.group(2)), int(new.group(3) or 0)
    return (major, minor) >= _BINDS_FROM[new.group(1)] if major == 5 else major > 5


def has_thinking(turn: Turn) -> bool:
    return any(b.get("type") in THINKING for b in turn.content)


def without_thinking(content: Sequence[Block]) -> tuple[tuple[Block, ...], int]:
    """`content` with its thinking blocks removed, and the tokens that takes off (count_message is
    the sum of its blocks' counts): an assistant turn left empty says its thinking was omitted."""
    kept = tuple(b for b in content if b.get("type") not in THINKING)
    removed = sum(count_block(b) for b in content if b.get("type") in THINKING)
    if not kept and content:
        kept = (OMITTED,)
        removed -= count_block(OMITTED)
    return kept, removed


def stripped(turn: Turn) -> Turn:
    """The turn without its thinking (itself when it has none)."""
    if not has_thinking(turn):
        return turn
    content, removed = without_thinking(turn.content)
    return replace(turn, content=content, tokens=turn.tokens - removed)


def strip_through(turns: Sequence[Turn], seq: int | None) -> list[Turn]:
    """The turns after a snapshot as its epoch serves them: thinking kept only in turns after
    `seq`, the version the epoch was first served at (None: not known, none kept)."""
    return [t if seq is not None and t.seq > seq else stripped(t) for t in turns]


def strip_all(t: Transcript) -> Transcript:
    """The transcript with no thinking at all (a fallback's prompt: a rewrite from near the top)."""
    return t.with_turns([stripped(turn) for turn in t.turns])


def changed_from(current: Transcript, publish: Transcript) -> int | None:
    """The first seq whose served form `publish` changes (0: the top, system or memory block;
    None: nothing changed, `publish` only covers what `current` holds)."""
    if (current.system, current.memory) != (publish.system, publish.memory):
        return 0
    if current.handoff != publish.handoff:
        # a new note goes in after the task: everything after it is new
        return (
            current.turns[1].seq
            if len(current.turns) > 1
            else (current.turns[0].seq + 1 if current.turns else 0)
        )
    new = {t.seq: t for t in publish.turns}
    return next((t.seq for t in current.turns if new.get(t.seq) != t), None)


def kept_after_rewrite(current: Transcript, publish: Transcript) -> Transcript:
    """`publish` (a rewrite of `current`, the prompt as served) with the thinking of every turn
    from its first changed position on dropped; the turns before it keep theirs as served."""
    first = changed_from(current, publish)
    if first is None:
        return publish
    return publish.with_turns([stripped(t) if t.seq >= first else t for t in publish.turns])
