"""The engine's data: turns of Anthropic content blocks, the transcript, the policy, file writes.

Blocks stay Anthropic JSON dicts (the wire format is the canonical one); the containers around
them are frozen. Stages never mutate a block in place: they build a new dict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

Block = dict[str, Any]
Role = Literal["user", "assistant"]


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys): the basis of hashes and byte-stable prompts."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def content_hash(text: str | bytes) -> str:
    """sha256 hex of content; identical content, identical hash (whatever request produced it)."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def block_text(block: Block) -> str:
    """The human-readable payload of a block, for counting, hashing and summarizing."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "tool_use":
        return orjson.dumps(block.get("input", {})).decode()
    if kind == "tool_result":
        return tool_result_text(block)
    return ""


def tool_result_text(block: Block) -> str:
    """The text of a tool_result: its string content or its text parts joined by newlines."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


@dataclass(frozen=True, slots=True)
class Turn:
    """One Anthropic message with its server-assigned sequence number and token count."""

    seq: int
    role: Role
    content: tuple[Block, ...]
    tokens: int = 0

    def as_message(self) -> dict[str, Any]:
        return {"role": self.role, "content": list(self.content)}

    def tool_use_ids(self) -> list[str]:
        return [b["id"] for b in self.content if b.get("type") == "tool_use"]


@dataclass(frozen=True, slots=True)
class FileWrite:
    """A virtual file a stage produced; the job persists it (content-addressed, so retries are safe).

    kind: "offload" (a huge block moved out at ingest), "clip" (the full text behind a clipped
    output or argument), "archive" (a verbatim span evicted by summarization).
    """

    ref: str
    kind: Literal["offload", "clip", "archive"]
    content: str
    media_type: str = "text/plain"


@dataclass(frozen=True, slots=True)
class Handoff:
    """The single note that replaces summarized turns; names the archive holding them verbatim."""

    text: str
    archive_refs: tuple[str, ...]
    archived_seqs: tuple[tuple[int, int], ...]  # inclusive (first, last) ranges
    tokens: int = 0
    facts: Mapping[str, Any] = field(default_factory=dict)  # structured content, folded into the next note
    summarizer: str = "extractive"
    input_tokens: int = 0  # the summarizer's own usage for the latest round (LLM summarizers)
    output_tokens: int = 0
    # notes of earlier rounds, kept byte for byte before `text` (stacked, so the prompt up to them
    # stays in the provider's cache when a new round is switched in); `tokens` counts them all
    earlier: tuple[str, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """Every note, oldest first: each is one text block of the prompt."""
        return (*self.earlier, self.text)

    @property
    def full_text(self) -> str:
        """All the notes as one text (what a reader of the prompt sees of the summarized turns)."""
        return "\n\n".join(self.notes)

    def covers(self, seq: int) -> bool:
        return any(a <= seq <= b for a, b in self.archived_seqs)


@dataclass(frozen=True, slots=True)
class Transcript:
    """What stages transform: system prompt, memory, an optional handoff note and the turns."""

    system: str
    turns: tuple[Turn, ...]
    handoff: Handoff | None = None
    memory: str = ""
    files: tuple[FileWrite, ...] = ()  # produced by stages, for the job to persist
    # seq of the turn whose message end carries the snapshot's cache breakpoint: the last fetch
    # boundary before this epoch's first rewritten turn, so the provider reads the previous
    # epoch's prefix up to it (0: the snapshot's end, as before an epoch keeps anything)
    cache_mark: int = 0
    # seq of the turn whose message end carries a second breakpoint, kept for the next epoch: the
    # end of the settled zone before the keep window, which the next structural round leaves alone
    standing_mark: int = 0
    # seq of the snapshot's last turn when its epoch began: fetches since ended at or after it, so
    # the prefixes they cached carry this epoch's content (0: no epoch yet)
    epoch_from: int = 0
    # a breakpoint at the end of the handoff notes: the prefix a new summary round that keeps
    # the earlier notes (stacked) reads from the provider's cache
    notes_mark: bool = False

    def with_turns(self, turns: tuple[Turn, ...] | list[Turn]) -> Transcript:
        return replace(self, turns=tuple(turns))

    def add_files(self, *files: FileWrite) -> Transcript:
        known = {f.ref for f in self.files}
        new = tuple(f for f in dict.fromkeys(files) if f.ref not in known)
        return replace(self, files=self.files + new) if new else self

    def tokens(self) -> int:
        return sum(t.tokens for t in self.turns) + (self.handoff.tokens if self.handoff else 0)

    def blocks(self) -> Iterator[tuple[int, int, Block]]:
        """Every (turn index, block index, block), oldest first."""
        for i, turn in enumerate(self.turns):
            for j, block in enumerate(turn.content):
                yield i, j, block


@dataclass(frozen=True, slots=True)
class Policy:
    """Every knob of the engine, with DESIGN §7's defaults. Per tenant or per session."""

    context_window: int = 200_000
    output_reserve: int = 8_192
    # issue 27, re-tuned with working memory: 0.30 cost 1-5% more at 200k, 2% more held out
    structural_trigger: float = 0.20
    summarize_trigger: float = 0.85
    keep_share: float = 0.05  # issue 27's cost study: 0.10 cost 6-16% more at every window
    # issue 27, re-tuned with working memory: 1,500 cost 6-7% more at 200k, 4% more held out;
    # session 8, with the leaner status note (gone since session 13): 500 (was 750) cost 3-9% less at 200k on every policy
    # session and 2-10% less at every window on three orders never run before (gen4-6), with
    # `ops.bench fidelity` unchanged; +4-5% at 64k on three sessions (BENCHMARKS, session 8)
    clip_tokens: int = 500
    clip_head_share: float = 0.6
    arg_clip_chars: int = 2_000
    offload_tokens: int = 10_000
    preview_tokens: int = 1_000
    dedup_min_tokens: int = 200
    summary_target_share: float = 0.5  # after summarizing, aim for this share of the budget
    summary_target_of_trigger: float = 0.6  # ... and at most this share of the summarize trigger
    handoff_max_share: float = 0.15  # an LLM summarizer's note's ceiling, as a share of the budget
    worth_it_tokens: int = 2_000
    worth_it_share: float = 0.25  # of the tokens a rewrite makes the provider cache again
    # past the summarize trigger (below the deadline), the least a structural rewrite must save:
    # less waits for the summary the next quiet point switches in. Issue 27, 32k: 0 (any saving)
    # made 18-65 epochs instead of 16-57 and cost 1-4% more (BENCHMARKS "Fewer rewrites at 32k").
    # Measured at 32k-200k; below, the deadline (not this) bounds how long a rewrite waits.
    # Session 12: 5,000 (was 2,000; epochs.decide caps it at a tenth of the budget) cost 0.1-12%
    # less at 64k on 8 of 15 policy sessions and 0.8-1.9% less at 32k on 3, the rest unchanged
    # (200k in every cell); at 0.05 s and 1 s and at 16k and 100k never more but once (+1.6%,
    # gen3 at 100k). Tuned on fa812bfe (BENCHMARKS "Session 12")
    shrink_min_tokens: int = 5_000
    # the session's model binds thinking to its prefix (worker/compaction/thinking.py): a rewrite
    # also costs the reasoning it invalidates, priced as `reasoning_rewrite_tokens` more of the
    # prompt rewritten (what a model thinks again once its chain is cut, at output prices), and
    # past the summarize trigger a rewrite is a summary down to the keep window, not one clip after
    # another: fewer, deeper rewrites (issue 40: BENCHMARKS "Session 13")
    binds_thinking: bool = False
    reasoning_rewrite_tokens: int = 15_000
    turn_trigger: int = 0  # summarize past this many turns (0: off)
    pretrigger_share: float = 0.8  # prepare the summary ahead from this share of the summarize trigger
    memory_budget_tokens: int = 800  # the pinned working-memory block (worker/memory/model.render)
    # a snapshot keeps a breakpoint before its keep window, so the next structural epoch reads the
    # prompt up to there from the provider's cache instead of writing it again
    standing_breakpoint: bool = True
    # a new summary round appends its note after the earlier ones, kept byte for byte, while they
    # all fit under notes_stack_share of the budget; past it, every note is folded into one
    stack_notes: bool = True
    # the extractive notes' ceiling when folded into one, as a share of the budget; issue 27,
    # second pass: 0.15 (handoff_max_share's) cost 4-8% more at 32k and folded more often
    notes_max_share: float = 0.30
    # the stacked notes' ceiling (0: notes_max_share). A fold-up still brings the notes back to
    # notes_max_share, so the next rounds stack in the room between and do not each rewrite the
    # notes. Session 10, 32k: at 0.30 every round past the first fold-up folded (and missed the
    # cache); 0.40 cost 0-7% less with cache reads 0.926-0.960 -> 0.97 and fidelity_run up
    # (tuned at 32k on every shared and gen1-3 session, BENCHMARKS "Session 10")
    notes_stack_share: float = 0.40

    @property
    def budget_tokens(self) -> int:
        return max(1, self.context_window - self.output_reserve)

    @property
    def keep_tokens(self) -> int:
        return int(self.budget_tokens * self.keep_share)

    @property
    def structural_trigger_tokens(self) -> int:
        return int(self.budget_tokens * self.structural_trigger)

    @property
    def headroom_tokens(self) -> int:
        """Room kept free for the next append: a fetch may come before the worker has run.

        One append can carry a few blocks of up to offload_tokens each (bigger ones are offloaded
        at ingest), so small windows summarize earlier than the nominal share.
        """
        return min(int(1.5 * self.offload_tokens), int(0.4 * self.budget_tokens))

    @property
    def summarize_trigger_tokens(self) -> int:
        return min(
            int(self.budget_tokens * self.summarize_trigger), self.budget_tokens - self.headroom_tokens
        )

    @property
    def pretrigger_tokens(self) -> int:
        """Past this the worker prepares the next epoch's summary ahead, to switch it in later."""
        return int(self.summarize_trigger_tokens * self.pretrigger_share)

    @property
    def deadline_tokens(self) -> int:
        """Past this a prepared summary is switched in at once, quiet point or not: the next turns
        could otherwise push the served prompt over the budget before the next job runs."""
        # half the headroom past the trigger, so a busy session still has a gap before it
        return self.budget_tokens - self.headroom_tokens // 2

    def for_window(self, context_window: int | None, output_reserve: int | None = None) -> Policy:
        """This policy at a session's window: the output reserve (default this one's) never more than
        a quarter of it. The service's rule (worker/resources.py); benches and the CLI replay use it
        too, or a 32k replay budgets 23,808 tokens where the service budgets 24,000."""
        window = context_window or self.context_window
        reserve = output_reserve if output_reserve is not None else self.output_reserve
        return replace(self, context_window=window, output_reserve=min(reserve, window // 4))

    def reserving(self, tokens: int) -> Policy:
        """The policy for the turns when `tokens` of the budget are taken by the system prompt and memory."""
        return replace(self, output_reserve=self.output_reserve + max(0, tokens))

    @property
    def summary_target_tokens(self) -> int:
        """Where summarization aims: well under the trigger, so the next rounds are spaced out."""
        return min(
            int(self.budget_tokens * self.summary_target_share),
            int(self.summary_target_of_trigger * self.summarize_trigger_tokens),
        )

    def with_overrides(self, overrides: Mapping[str, Any]) -> Policy:
        known = {k: v for k, v in overrides.items() if k in self.__dataclass_fields__ and v is not None}
        return replace(self, **known)


# The one knob table: every engine default is a Policy field above. Stage defaults, Settings'
# engine defaults (worker/settings.py) and the memory budget are read from here, never restated.
DEFAULT_POLICY = Policy()


@dataclass(frozen=True, slots=True)
class StageReport:
    """What one stage did: tokens before and after, and stage-specific counts."""

    stage: str
    tokens_before: int
    tokens_after: int
    counts: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            **dict(self.counts),
        }


def with_text(block: Block, text: str) -> Block:
    """A copy of a text or tool_result block whose text is `text` (non-text parts are kept)."""
    if block.get("type") == "text":
        return {**block, "text": text}
    content = block.get("content", "")
    if isinstance(content, list):
        others = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
        return {**block, "content": [{"type": "text", "text": text}, *others]}
    return {**block, "content": text}


def retokened(turn: Turn, content: tuple[Block, ...], count: Callable[[tuple[Block, ...]], int]) -> Turn:
    """The turn with new content and its token count recomputed (unchanged content: same turn)."""
    if content == turn.content:
        return turn
    return replace(turn, content=content, tokens=count(content))
