"""Where a snapshot carries its cache breakpoints: the kept prefix a new epoch reads, the standing
one it leaves for the next, and that the provider then reads instead of writing (pure, tabled)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from worker.compaction.assemble import assemble, merged_index
from worker.compaction.codec import transcript_from_json, transcript_to_json
from worker.compaction.epochs import cache_mark, first_changed, new_epoch, served_request, standing_mark
from worker.compaction.model import Handoff, Policy, Transcript, Turn
from worker.compaction.pricing import Billed, PromptCache, breakpoints
from worker.compaction.tokens import count_message, count_text
from worker.flows.simulate import Pace, replay


def unit(seq: int, body: str) -> tuple[Turn, Turn]:
    use = ({"type": "tool_use", "id": f"toolu_{seq}", "name": "Bash", "input": {"command": "ls"}},)
    res = ({"type": "tool_result", "tool_use_id": f"toolu_{seq}", "content": body},)
    return Turn(seq, "assistant", use, count_message(use)), Turn(seq + 1, "user", res, count_message(res))


def session(n: int, body: str = "output " * 300) -> tuple[Turn, ...]:
    """The task (seq 1), then n tool units: assistant seq 2, 4, …; user results seq 3, 5, …"""
    out: list[Turn] = [Turn(1, "user", ({"type": "text", "text": "task"},), 5)]
    for k in range(n):
        out += unit(2 + 2 * k, body)
    return tuple(out)


def clipped(turns: tuple[Turn, ...], seqs: set[int]) -> tuple[Turn, ...]:
    """The turns with the results of `seqs` rewritten (a structural round's change)."""
    res = lambda t: ({**t.content[0], "content": "clipped"},)  # noqa: E731
    return tuple(replace(t, content=res(t), tokens=5) if t.seq in seqs else t for t in turns)


NOTE = Handoff("note", ("archive/a.jsonl",), ((2, 5),), 3)


@pytest.mark.parametrize(
    ("changed", "handoff", "expected"),
    [
        (set(), False, 21),  # nothing changed: past the last turn
        ({9}, False, 8),  # the result of seq 9 is index 8
        ({5, 15}, False, 4),  # the first of several
        ({15}, True, 1),  # a new note: only the task stays
    ],
)
def test_first_changed(changed: set[int], handoff: bool, expected: int) -> None:
    current = Transcript("", session(10))
    new = Transcript("", clipped(current.turns, changed), handoff=NOTE if handoff else None)
    assert first_changed(current, new) == expected


@pytest.mark.parametrize(
    ("changed", "epoch_from", "marks", "expected"),
    [
        # every fetch boundary of this epoch is cached: the newest before the change (seq 7 at index 6)
        ({9}, 0, (0, 0), 7),
        # the boundaries before the change are older than the epoch: its content differs there
        ({9}, 11, (0, 0), 0),
        # ... but the epoch's own marks were written by every fetch since: the newest kept one
        ({9}, 11, (3, 5), 5),
        ({9}, 11, (3, 9), 3),  # a mark on a rewritten turn is not kept
        ({3}, 0, (0, 0), 1),  # the task is the only boundary before it
        ({2}, 0, (0, 0), 1),  # the first call rewritten: the task still precedes it
        ({1}, 0, (0, 0), 0),  # the task itself rewritten: nothing before it
    ],
)
def test_cache_mark(changed: set[int], epoch_from: int, marks: tuple[int, int], expected: int) -> None:
    current = Transcript("", session(10), cache_mark=marks[0], standing_mark=marks[1], epoch_from=epoch_from)
    assert cache_mark(current, Transcript("", clipped(current.turns, changed))) == expected


@pytest.mark.parametrize(
    ("keep_tokens", "after", "expected"),
    [
        (0, 0, 19),  # no keep window: the last boundary before the last tool unit
        (10**9, 0, 1),  # everything is kept: the task is all that is settled
        (2_000, 0, 9),  # ~6 units of ~320 tokens are kept: seq 10 on
        (2_000, 9, 0),  # not past the mark the epoch reads: nothing to add
    ],
)
def test_standing_mark(keep_tokens: int, after: int, expected: int) -> None:
    assert standing_mark(Transcript("", session(10)), keep_tokens, after) == expected


def _marked(request: dict[str, Any]) -> list[str]:
    """Where the request's breakpoints are: "system", or the text of the marked message's block."""
    out = ["system" for b in request["system"] if "cache_control" in b]
    for m in request["messages"]:
        for b in m["content"]:
            if "cache_control" in b:
                out.append(str(b.get("tool_use_id") or b.get("text")))
    return out


@pytest.mark.parametrize(
    ("marks", "handoff", "expected"),
    [
        ((0, 0), False, ["system", "toolu_8"]),  # no epoch marks: system and the snapshot's end
        ((5, 0), False, ["system", "toolu_4"]),  # the kept prefix instead of the end
        ((5, 0), True, ["system", "toolu_4"]),  # the same turn after a note
        ((5, 7), False, ["toolu_4", "toolu_6"]),  # both: their prefixes hold the system prompt
        ((1, 0), True, ["system", "task"]),  # the task keeps its own block, the note merged after it
    ],
)
def test_assemble_places_the_snapshot_breakpoints(
    marks: tuple[int, int], handoff: bool, expected: list[str]
) -> None:
    t = Transcript("sys", session(4), handoff=NOTE if handoff else None)
    t = replace(t, cache_mark=marks[0], standing_mark=marks[1])
    assert _marked(assemble(t)) == expected


def test_merged_index_counts_role_changes() -> None:
    roles = ["user", "user", "assistant", "user", "user", "assistant"]
    messages = [{"role": r, "content": []} for r in roles]
    assert [merged_index(messages, k) for k in range(6)] == [0, 0, 1, 2, 2, 3]


def billed_after(before: Transcript, after: Transcript) -> Billed:
    """What the provider bills the first fetch of `after` once a fetch of `before` was cached
    (each request with at most 4 breakpoints)."""
    cache = PromptCache()
    first, request = served_request(before, []), served_request(after, [])
    assert breakpoints(first) <= 4 and breakpoints(request) <= 4
    cache.bill(first, 0.0)
    return cache.bill(request, 1.0)


def test_a_structural_epoch_reads_the_kept_prefix_from_the_cache() -> None:
    """Served before and after an epoch that rewrote turns after the standing mark, the provider
    reads the prompt up to that mark and writes only what follows; at most 4 breakpoints."""
    body = "line of tool output\n" * 400  # ~2.4k tokens per result: every prefix is cacheable
    before = Transcript("", session(12, body), cache_mark=3, standing_mark=13, epoch_from=13)
    after = replace(before, turns=clipped(before.turns, {15, 17}), cache_mark=13, standing_mark=0)
    billed = billed_after(before, after)
    kept = sum(t.tokens for t in before.turns if t.seq <= 13)
    assert billed.read_tokens >= kept - 50  # message overheads aside
    assert billed.write_tokens < sum(t.tokens for t in after.turns) - kept + 100


@pytest.mark.parametrize(
    ("share", "of_trigger", "expected"),
    [
        (0.5, 0.6, 8_571),  # 32k: 0.6 of the trigger (14,285) binds, not half the budget
        (0.5, 0.4, 5_714),
        (0.2, 0.6, 4_761),  # a small share of the budget binds first
    ],
)
def test_summary_target_is_the_smaller_of_its_two_shares(
    share: float, of_trigger: float, expected: int
) -> None:
    policy = Policy(context_window=32_000, summary_target_share=share, summary_target_of_trigger=of_trigger)
    assert policy.summary_target_tokens == expected


def test_a_summary_round_stacked_on_the_earlier_notes_reads_them_from_the_cache() -> None:
    """A new note after the earlier ones (kept byte for byte): the first fetch of the new epoch
    reads the task and the earlier notes from the cache, through the breakpoint on the notes."""
    policy = Policy(context_window=32_000)
    old_note = "\n".join(f"- earlier fact {n}: ran pytest tests/test_{n}.py -> ok" for n in range(200))
    first = Handoff(old_note, ("archive/a.jsonl",), ((2, 9),), 3_000)
    turns = session(12)
    current = Transcript("", (turns[0], *turns[9:]), handoff=first)
    current = new_epoch(replace(current, handoff=None), current, policy)  # the first note's epoch
    stacked = Handoff(
        "new note", ("archive/a.jsonl", "archive/b.jsonl"), ((2, 17),), 3_005, earlier=(old_note,)
    )
    after = new_epoch(current, Transcript("", (turns[0], *turns[17:]), handoff=stacked), policy)
    assert current.notes_mark and after.notes_mark and after.cache_mark == 0
    billed = billed_after(current, after)
    kept = count_message([turns[0].content[0], {"type": "text", "text": old_note}])
    assert billed.read_tokens >= kept - 10


def _rules(tokens: int) -> str:
    """A system prompt of about `tokens` tokens, no two lines alike (Claude Code's is ~10-20k)."""
    line = (
        "Rule {n}: when the user asks for change {n}, read the file first, then edit it, then run the tests."
    )
    return "\n".join(line.format(n=n) for n in range(tokens // 27))


def test_with_a_real_size_system_prompt_every_fetch_reads_the_cache_within_four_breakpoints() -> None:
    """A 12k-token system prompt, a 32k window and a session long enough for structural and
    summary epochs: every request carries at most 4 breakpoints (the provider refuses more: the
    pricing model raises), every fetch after the first reads at least the system prompt from the
    cache, none is over budget, and the breakpoints sit on the system prompt or the notes, the
    snapshot's marks and the newest messages."""
    system = _rules(12_000)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Refactor the parser, keep the tests green."}
    ]
    for n in range(120):
        tid = f"toolu_{n:03d}"
        call = {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"pytest tests/t{n}.py"}}
        body = "\n".join(f"tests/t{n}.py::case_{k} PASSED line {k} of run {n}" for k in range(60))
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": f"I'll run step {n}."}, call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": body}]},
        ]
    report = replay(system, messages, Policy(context_window=32_000), pace=Pace(0.25), job_seconds=0.05)
    summary = report.summary()
    system_tokens = count_text(system)
    assert summary["over_budget"] == 0 and summary["all_valid"]
    assert report.epochs >= 5 and summary["quiet_switches"] + summary["deadline_switches"] >= 1
    assert all(f.billed.read_tokens >= system_tokens for f in report.fetches[1:])
    request = report.final_request
    assert breakpoints(request) <= 4
    marked = [
        (i, b.get("type"), str(b.get("text", ""))[:24])
        for i, m in enumerate(request["messages"])
        for b in m["content"]
        if "cache_control" in b
    ]
    assert marked[-1][0] == len(request["messages"]) - 1  # the newest message
    notes = [
        b for b in request["messages"][0]["content"] if str(b.get("text", "")).startswith("[compactd handoff")
    ]
    assert notes and ("cache_control" in notes[-1] or "cache_control" in request["system"][-1])


def test_stacked_notes_and_the_notes_mark_survive_the_snapshot_codec() -> None:
    """A stored snapshot resumes with its earlier notes and its notes mark (the next epoch's
    breakpoints and bytes depend on both)."""
    stacked = Handoff("new", ("a", "b"), ((2, 9),), 9, earlier=("old",))
    t = Transcript("sys", session(2), handoff=stacked, notes_mark=True, cache_mark=3, standing_mark=5)
    assert transcript_from_json(orjson.loads(orjson.dumps(transcript_to_json(t)))) == t
    assert transcript_from_json(
        {"handoff": {"text": "x", "archive_refs": [], "archived_seqs": []}}
    ).handoff == (Handoff("x", (), ()))  # a snapshot stored before stacking
