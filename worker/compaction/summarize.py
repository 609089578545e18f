"""Summarize: near the ceiling, at a quiet point, evict the oldest span into one handoff note.

The span is archived verbatim (JSON lines) in a new content-addressed archive chunk, never
overwritten; the note names every chunk. A previous note is folded into the new one, not
archived. Default summarizer: extractive and deterministic; an LLM one plugs in via the port.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.compaction import facts as F
from worker.compaction import pointers
from worker.compaction.model import DEFAULT_POLICY, FileWrite, Handoff, Transcript, Turn, block_text
from worker.compaction.ports import Summarizer, SummaryRequest
from worker.compaction.render import archive_jsonl, span_text
from worker.compaction.tokens import BLOCK_OVERHEAD_TOKENS, count_text, head_text
from worker.compaction.zones import first_kept, is_cut_point, keep_start

SECTIONS = (  # (facts key, heading), in the note's order
    ("instructions", "User instructions (verbatim, oldest first)"),
    ("files_read", "Files read"),
    ("files_edited", "Files edited"),
    ("files_created", "Files created"),
    ("commands", "Commands run (-> outcome)"),
    ("errors", "Errors (-> what came next)"),
    ("decisions", "Decisions"),
    ("questions", "Open questions"),
)
# When the note is over its ceiling, items are dropped from these sections first (oldest first).
TRIM_ORDER = (
    "decisions",
    "questions",
    "commands",
    "errors",
    "files_read",
    "files_edited",
    "files_created",
    "instructions",
)


@dataclass(frozen=True, slots=True)
class Summarize:
    """Evict turns between the task and the keep window until the prompt is under `target_tokens`."""

    trigger_tokens: int
    target_tokens: int
    keep_tokens: int
    max_note_tokens: int
    turn_trigger: int = DEFAULT_POLICY.turn_trigger
    force: bool = False
    focus: str | None = None
    summarizer: Summarizer | None = None
    stack: bool = DEFAULT_POLICY.stack_notes  # keep earlier notes byte for byte, the new one after them
    # the extractive notes' ceiling when folded into one (0: max_note_tokens, an LLM note's):
    # they cost nothing to write, and room for them means fewer, larger rounds and fewer fold-ups
    max_notes_tokens: int = 0
    # their ceiling while stacked (0: the fold's): the room between is where the rounds after a
    # fold-up stack instead of each folding (and rewriting the notes) again
    max_stack_tokens: int = 0

    def __call__(self, t: Transcript) -> Transcript:
        if not self._due(t):
            return t
        # a forced (/compact) round keeps the newest 10% of what is there, not of the whole budget
        keep = min(self.keep_tokens, t.tokens() // 10) if self.force else self.keep_tokens
        start, end = first_kept(t.turns), keep_start(t.turns, keep)
        cut = self._cut(t.turns, start, end, self._notes_reserve(t.handoff))
        if cut <= start:
            return t
        span = t.turns[start:cut]
        archive = archive_jsonl(span)
        ref = pointers.archive_ref(archive)
        handoff = self._handoff(t, span, ref, archive)
        evicted = sum(x.tokens for x in span) + (t.handoff.tokens if t.handoff else 0)
        if handoff.tokens >= evicted:
            return t  # a note as big as what it replaces saves nothing
        out = replace(t, turns=t.turns[:start] + t.turns[cut:], handoff=handoff)
        return out.add_files(
            FileWrite(ref=ref, kind="archive", content=archive, media_type="application/jsonl")
        )

    @property
    def ceiling(self) -> int:
        """The handoff's ceiling: an LLM note's, or the extractive notes' folded into one."""
        return (
            (self.max_notes_tokens or self.max_note_tokens)
            if self.summarizer is None
            else self.max_note_tokens
        )

    @property
    def stack_ceiling(self) -> int:
        """The notes' ceiling while a round stacks its note on the earlier ones (extractive notes
        only); a fold-up writes them again within `ceiling`."""
        if self.stack and self.summarizer is None:
            return max(self.ceiling, self.max_stack_tokens)
        return self.ceiling

    def _due(self, t: Transcript) -> bool:
        over_tokens = t.tokens() > self.trigger_tokens
        over_turns = self.turn_trigger > 0 and len(t.turns) > self.turn_trigger
        return self.force or over_tokens or over_turns

    def _notes_reserve(self, prev: Handoff | None) -> int:
        """The room the cut leaves for the notes after this round: the fold's ceiling, or, when the
        earlier notes are already near it, what they take with a new note stacked in the room the
        stacking ceiling adds (a fold-up is not expected at every round past the fold's ceiling)."""
        room = self.stack_ceiling - self.ceiling
        if prev is None or room <= 0:
            return self.ceiling
        return min(self.stack_ceiling, max(self.ceiling, prev.tokens + room))

    def _cut(self, turns: Sequence[Turn], start: int, end: int, reserve: int) -> int:
        """The earliest cut point that brings tokens (and turns) under target, `reserve` kept for
        the notes; at most `end`."""
        tokens = sum(t.tokens for t in turns) + reserve
        turn_goal = self.turn_trigger // 2 if self.turn_trigger else 0
        for i in range(start, end):
            tokens -= turns[i].tokens
            n = i + 1
            under = tokens <= self.target_tokens and (not turn_goal or len(turns) - n <= turn_goal)
            if n > start and is_cut_point(turns, n) and under and not self.force:
                return n
        while end > start and not is_cut_point(turns, end):
            end -= 1
        return end

    def _handoff(self, t: Transcript, span: Sequence[Turn], ref: str, archive: str) -> Handoff:
        prev = t.handoff
        task = (
            block_text(t.turns[0].content[0])
            if t.turns and t.turns[0].role == "user" and t.turns[0].content
            else ""
        )
        new = F.extract(span, task=task)
        facts = F.fold(prev.facts if prev else {}, new)
        refs = (*prev.archive_refs, ref) if prev else (ref,)
        ranges = _merge_ranges([*(prev.archived_seqs if prev else ()), (span[0].seq, span[-1].seq)])
        if self.stack and prev is not None and self.summarizer is None:
            stacked = self._stacked(prev, span, ref, new)
            if stacked is not None:
                return replace(stacked, archive_refs=refs, archived_seqs=ranges, facts=facts)
        header = _header(ranges, refs, self.focus)
        if self.summarizer is None:
            # stacking, a first note states full paths as its successors do (see _stacked)
            text = render_note(header, facts, self.ceiling, shorten=not self.stack or prev is not None)
            return Handoff(text, refs, ranges, count_text(text), facts)
        result = self.summarizer.summarize(
            SummaryRequest(
                span_text=span_text(span),
                previous_note=prev.full_text if prev else None,
                focus=self.focus,
                archive_ref=ref,
                max_tokens=self.max_note_tokens,
            )
        )
        text = header + "\n\n" + head_text(result.text.strip(), self.max_note_tokens)
        return Handoff(
            text,
            refs,
            ranges,
            count_text(text),
            facts,
            result.model,
            result.input_tokens,
            result.output_tokens,
        )

    def _stacked(self, prev: Handoff, span: Sequence[Turn], ref: str, new: F.Facts) -> Handoff | None:
        """The span's own note after the earlier ones (kept byte for byte), if it fits whole in
        the room they leave under `stack_ceiling`; None: fold them all into one instead."""
        header = _header(((span[0].seq, span[-1].seq),), (ref,), self.focus)
        facts = {**new, "task": ""}  # the first note states the task
        items = {k: list(facts.get(k, [])) for k, _ in SECTIONS}
        # full paths: one span's root is deeper than the session's, and a reader of several notes
        # (or a search of the prompt) should not have to join paths across them
        text = _render(header, facts, items, dict.fromkeys(items, 0), shorten=False)
        tokens = count_text(text) + BLOCK_OVERHEAD_TOKENS
        if prev.tokens + tokens > self.stack_ceiling:
            return None
        return Handoff(text, (), (), prev.tokens + tokens, earlier=prev.notes)


def _header(ranges: Sequence[tuple[int, int]], refs: Sequence[str], focus: str | None) -> str:
    seqs = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)
    lines = [
        "[compactd handoff note] Earlier turns of this conversation were compacted to fit the context window.",
        f"Turns {seqs} are archived verbatim (JSON lines, one turn per line) in: {', '.join(refs)}.",
        "Read them with the read_file or grep tools when you need an exact detail.",
    ]
    if focus:
        lines.append(f"Focus requested for this summary: {focus}")
    return "\n".join(lines)


def render_note(header: str, facts: F.Facts, max_tokens: int, *, shorten: bool = True) -> str:
    """The extractive note; over `max_tokens`, the least important items go first, counted."""
    trimmed = {k: list(facts.get(k, [])) for k, _ in SECTIONS}
    dropped = dict.fromkeys(trimmed, 0)
    text = _render(header, facts, trimmed, dropped, shorten=shorten)
    for key in TRIM_ORDER:
        while trimmed[key] and count_text(text) > max_tokens:
            # drop a batch at a time: re-counting the whole note per item would be quadratic
            n = max(1, len(trimmed[key]) // 4)
            del trimmed[key][:n]
            dropped[key] += n
            text = _render(header, facts, trimmed, dropped, shorten=shorten)
    return text if count_text(text) <= max_tokens else head_text(text, max_tokens)


FILE_KEYS = ("files_read", "files_edited", "files_created")


def _render(
    header: str, facts: F.Facts, items: dict[str, list[str]], dropped: dict[str, int], *, shorten: bool = True
) -> str:
    """The note's text; `shorten`: file paths relative to their common root, stated once."""
    parts = [header]
    if facts.get("task"):
        parts.append("## Task (the first user message, kept above)\n" + str(facts["task"]))
    root = common_root([p for k in FILE_KEYS for p in facts.get(k, [])]) if shorten else ""
    if root:
        parts.append(f"File paths below are relative to {root}/")
    for key, heading in SECTIONS:
        if items[key] or dropped[key]:
            shown = items[key]
            if root and key in FILE_KEYS:
                shown = relative_to(root, shown)
            elif root and key == "errors":
                # their "-> next: Edit <path>" labels
                shown = [e.replace(" " + root + "/", " ") for e in shown]
            lines = [f"- {x}" for x in shown]
            if dropped[key]:
                lines.insert(0, f"- ({dropped[key]} older items are in the archive)")
            parts.append(f"## {heading}\n" + "\n".join(lines))
    if facts.get("next_action"):
        parts.append("## Last stated plan / next action\n" + str(facts["next_action"]))
    return "\n\n".join(parts)


def common_root(paths: Sequence[str]) -> str:
    """The deepest directory holding every absolute path (two or more of them), or "".

    Long absolute paths repeat the same prefix item after item; the note states it once.
    """
    absolute = [p for p in paths if p.startswith("/")]
    if len(absolute) < 2 or len(absolute) != len(paths):
        return ""
    root = posixpath.commonpath([posixpath.dirname(p.rstrip("/")) for p in absolute])
    # commonpath normalizes ("//", "/./"): a root the paths do not literally start with is none
    if root.count("/") < 2 or not all(p.startswith(root + "/") for p in absolute):
        return ""
    return root


def relative_to(root: str, paths: Sequence[str]) -> list[str]:
    """The paths under `root` written relative to it (its own directory as "."), the others as they are."""
    return [(p[len(root) + 1 :] or ".") if root and p.startswith(root + "/") else p for p in paths]


def _merge_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


NOTE_MARK = "[compactd handoff note]"
CLIENT_SUMMARY_HEADER = (
    "[compactd summary] What this conversation has done so far, from compactd's compacted history"
    " (every earlier turn is kept verbatim in compactd's archive; compactd's read_file and grep tools"
    " read it back)."
)


def prompt_summary(messages: Sequence[dict[str, object]], memory: str, max_tokens: int) -> str:
    """A summary of a served prompt for a client that asks for one (its own compaction), without a
    model: the working memory, the handoff notes the prompt holds, verbatim, and the extractive
    facts of its turns. Deterministic; at most `max_tokens` (the facts give way first)."""
    contents = [m["content"] for m in messages if isinstance(m.get("content"), list)]
    notes = [
        str(b.get("text"))
        for content in contents
        for b in content  # type: ignore[attr-defined]
        if isinstance(b, dict) and str(b.get("text", "")).startswith(NOTE_MARK)
    ]
    turns = [
        Turn(seq=i, role=str(m.get("role")), content=tuple(m["content"]))  # type: ignore[arg-type]
        for i, m in enumerate(messages)
        if isinstance(m.get("content"), list)
    ]
    task = next((block_text(b) for t in turns[:1] for b in t.content if b.get("type") == "text"), "")
    parts = [CLIENT_SUMMARY_HEADER]
    if memory:
        parts.append(memory)
    parts += notes
    head = "\n\n".join(parts)
    room = max(200, max_tokens - count_text(head))
    facts = F.extract(
        [t for t in turns if not any(NOTE_MARK in str(b.get("text", "")) for b in t.content)], task
    )
    return head + "\n\n" + render_note("## Since then", facts, room)
