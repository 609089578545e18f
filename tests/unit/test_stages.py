"""Table tests for each stage: what it rewrites, what it leaves, and the pointers it leaves behind."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.strategies import text_of
from worker.compaction import pointers
from worker.compaction.clip import Clip
from worker.compaction.dedup import Dedup
from worker.compaction.facts import extract
from worker.compaction.model import Policy, Transcript, Turn, block_text
from worker.compaction.offload import Offload
from worker.compaction.pipeline import default_stages
from worker.compaction.summarize import Summarize, common_root, render_note
from worker.compaction.tokens import count_message, count_text
from worker.compaction.zones import keep_start


def turn(seq: int, role: str, *blocks: dict[str, Any]) -> Turn:
    return Turn(seq=seq, role=role, content=blocks, tokens=count_message(blocks))  # type: ignore[arg-type]


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def call(tid: str, name: str = "Bash", **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def result(tid: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": body, **extra}


def session(outputs: list[str], names: list[str] | None = None) -> Transcript:
    """task, then one call+result unit per output, then a final assistant text."""
    turns = [turn(1, "user", text("Fix the bug in src/app.py"))]
    for n, body in enumerate(outputs):
        name = names[n] if names else "Bash"
        turns.append(turn(len(turns) + 1, "assistant", call(f"toolu_{n}", name, command=f"cmd {n}")))
        turns.append(turn(len(turns) + 1, "user", result(f"toolu_{n}", body)))
    turns.append(turn(len(turns) + 1, "assistant", text("done")))
    return Transcript(system="sys", turns=tuple(turns))


BIG = text_of(1, 900)  # ~9k tokens


class TestClip:
    def test_old_outputs_keep_head_and_tail_with_a_pointer(self) -> None:
        """An old long output keeps 60% head / 40% tail of clip_tokens and names the full file."""
        t = session([BIG, "short"])
        out = Clip(clip_tokens=1_500, keep_tokens=10)(t)
        clipped = block_text(out.turns[2].content[0])
        assert clipped.startswith(BIG[:200]) and clipped.endswith(BIG[-200:])
        assert pointers.file_ref(BIG) in clipped and "clipped" in clipped
        assert 1_400 <= count_text(clipped) <= 1_700
        assert [f.content for f in out.files] == [BIG]

    def test_head_is_sixty_percent(self) -> None:
        """The head gets about 60% of the kept tokens, the tail about 40%."""
        out = Clip(clip_tokens=1_000, keep_tokens=10)(session([BIG, "x"]))
        head, _, tail = block_text(out.turns[2].content[0]).partition("[compactd: clipped")
        assert 0.5 < count_text(head) / (count_text(head) + count_text(tail.split("]", 1)[1])) < 0.7

    @pytest.mark.parametrize("body", ["short", text_of(2, 100)])
    def test_outputs_under_the_limit_are_untouched(self, body: str) -> None:
        """Outputs at or under clip_tokens (plus margin) are not rewritten."""
        t = session([body, "x"])
        assert Clip(clip_tokens=1_500, keep_tokens=10)(t).turns == t.turns

    def test_keep_window_is_not_clipped(self) -> None:
        """The newest unit (the keep window) stays verbatim even when long."""
        t = session(["x", BIG])
        assert Clip(clip_tokens=500, keep_tokens=10)(t).turns[4] == t.turns[4]

    def test_write_like_arguments_are_clipped_and_others_kept(self) -> None:
        """Old Write/Edit payloads keep their start and a pointer; name, id and small args stay."""
        big = "x = 1\n" * 1_000
        turns = (
            turn(1, "user", text("task")),
            turn(2, "assistant", call("toolu_w", "Write", file_path="a.py", content=big)),
            turn(3, "user", result("toolu_w", "ok")),
            turn(4, "assistant", call("toolu_r", "Bash", command=big)),
            turn(5, "user", result("toolu_r", "ok")),
            turn(6, "assistant", text("done")),
        )
        out = Clip(arg_clip_chars=2_000, keep_tokens=1)(Transcript("s", turns))
        write = out.turns[1].content[0]
        assert write["name"] == "Write" and write["id"] == "toolu_w" and write["input"]["file_path"] == "a.py"
        assert (
            write["input"]["content"].startswith("x = 1")
            and pointers.file_ref(big) in write["input"]["content"]
        )
        assert out.turns[3] == turns[3]  # Bash is not write-like

    def test_clipping_twice_changes_nothing(self) -> None:
        """A clipped output is recognised by its marker and never clipped again."""
        once = Clip(clip_tokens=500, keep_tokens=10)(session([BIG, "x"]))
        assert Clip(clip_tokens=500, keep_tokens=10)(once).turns == once.turns


class TestDedup:
    def test_older_identical_output_points_to_the_newest(self) -> None:
        """The first of two identical outputs becomes a pointer naming the later call and seq."""
        body = text_of(3, 80)
        out = Dedup(min_tokens=50, keep_tokens=1)(
            session([body, "edit ok", body, "x"], ["Read", "Edit", "Read", "Bash"])
        )
        assert block_text(out.turns[2].content[0]) == pointers.identical("Read", "toolu_2", 7)
        assert block_text(out.turns[6].content[0]) == body

    def test_a_re_read_after_an_edit_is_new_content(self) -> None:
        """Different content (the file changed) is never deduplicated."""
        t = session([text_of(3, 80), "edit ok", text_of(4, 80), "x"], ["Read", "Edit", "Read", "Bash"])
        assert Dedup(min_tokens=50, keep_tokens=1)(t).turns == t.turns

    def test_small_outputs_are_left_alone(self) -> None:
        """Below min_tokens a pointer would save nothing."""
        t = session(["ok " * 30, "ok " * 30, "x"])
        assert Dedup(min_tokens=200, keep_tokens=1)(t).turns == t.turns

    def test_a_clipped_copy_is_matched_by_its_original_hash(self) -> None:
        """An older copy that was already clipped still dedups against a fresh identical copy."""
        clipped = Clip(clip_tokens=500, keep_tokens=1)(session([BIG, "x"]))
        later = session([BIG, "x", BIG, "y"])
        t = later.with_turns([*clipped.turns[:3], *later.turns[3:]])
        out = Dedup(min_tokens=50, keep_tokens=1)(t)
        assert block_text(out.turns[2].content[0]).startswith(
            "[compactd: identical to the output of Bash call toolu_2"
        )


class TestOffload:
    def test_huge_block_becomes_preview_and_file(self) -> None:
        """A block over the threshold keeps its first preview_tokens and a pointer; the file holds it all."""
        huge = text_of(5, 2_000)
        out = Offload(offload_tokens=5_000, preview_tokens=300)(session([huge]))
        kept = block_text(out.turns[2].content[0])
        assert kept.startswith(huge[:100]) and pointers.file_ref(huge) in kept
        assert count_text(kept) < 400
        assert out.files[0].content == huge and out.files[0].kind == "offload"

    def test_images_are_never_turned_into_text(self) -> None:
        """Image blocks pass through untouched whatever their size."""
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "A" * 200_000},
        }
        t = Transcript("s", (turn(1, "user", text("look"), image),))
        assert Offload(offload_tokens=100)(t) == t


class TestSummarize:
    def make(self) -> Transcript:
        turns = [turn(1, "user", text("Refactor the parser in src/parse.py"))]
        for n in range(20):
            turns += [
                turn(
                    len(turns) + 1,
                    "assistant",
                    text(f"I'll check step {n}."),
                    call(f"toolu_{n}", "Bash", command=f"pytest tests/t{n}.py"),
                ),
                turn(
                    len(turns) + 2,
                    "user",
                    result(f"toolu_{n}", "ERROR: boom in parse()\n" + text_of(n, 60), is_error=n % 5 == 0),
                ),
            ]
            if n == 7:
                turns += [
                    turn(len(turns) + 1, "assistant", text("Should I keep going?")),
                    turn(len(turns) + 2, "user", text("Yes, but never touch setup.py")),
                ]
        return Transcript("sys", tuple(turns))

    def stage(self, **kw: Any) -> Summarize:
        return Summarize(
            **{
                "trigger_tokens": 3_000,
                "target_tokens": 1_500,
                "keep_tokens": 300,
                "max_note_tokens": 1_000,
                **kw,
            }
        )

    def test_note_keeps_instructions_commands_errors_and_names_the_archive(self) -> None:
        """The handoff note carries user instructions verbatim, commands, errors and the archive ref."""
        t = self.make()
        out = self.stage(max_note_tokens=4_000)(t)
        note = out.handoff.text if out.handoff else ""
        archive = next(f for f in out.files if f.kind == "archive")
        assert "Yes, but never touch setup.py" in note
        assert "pytest tests/t0.py" in note and "ERROR: boom in parse()" in note
        assert archive.ref in note
        assert [orjson.loads(x)["seq"] for x in archive.content.splitlines()] == list(
            range(2, 2 + len(archive.content.splitlines()))
        )
        assert out.turns[0] == t.turns[0]

    def test_previous_note_is_folded_not_archived(self) -> None:
        """A second round's note still has the first round's facts; the archive only holds turns."""
        first = self.stage()(self.make())
        second = self.stage(trigger_tokens=200, target_tokens=100, stack=False)(self.later(first))
        assert second.handoff and first.handoff
        assert second.handoff.archived_seqs != first.handoff.archived_seqs  # a second round ran
        assert "Yes, but never touch setup.py" in second.handoff.text
        assert second.handoff.archive_refs[:1] == first.handoff.archive_refs
        new_archive = [f for f in second.files if f.kind == "archive"][-1]
        assert "compactd handoff note" not in new_archive.content

    def test_below_the_trigger_nothing_happens(self) -> None:
        """Under trigger_tokens and unforced, summarize is a no-op."""
        t = self.make()
        assert self.stage(trigger_tokens=10**9)(t) == t

    def test_note_respects_its_ceiling(self) -> None:
        """Over max_note_tokens, older low-priority items are dropped and counted."""
        out = self.stage(max_note_tokens=250)(self.make())
        assert out.handoff and out.handoff.tokens <= 250

    def later(self, first: Transcript) -> Transcript:
        """Sixty more turns after a first round, the last a tool unit (the keep window)."""
        more = [
            turn(100 + i, r, text(f"later {i}") if r == "user" else text(f"ok {i} " + "done " * 40))
            for i, r in enumerate(["user", "assistant"] * 30)
        ]
        more += [
            turn(200, "assistant", call("toolu_last", "Bash", command="make lint")),
            turn(201, "user", result("toolu_last", "ok")),
        ]
        return first.with_turns([*first.turns, *more])

    def test_a_second_note_stacks_after_the_first_byte_for_byte(self) -> None:
        """With room under the ceiling, the first note is kept as it was and the new span's note
        (its own archive, no task restated) follows it; every fact is still in the notes."""
        first = self.stage(max_note_tokens=4_000)(self.make())
        second = self.stage(trigger_tokens=200, target_tokens=100, max_note_tokens=4_000)(self.later(first))
        assert first.handoff and second.handoff
        assert second.handoff.earlier == (first.handoff.text,)
        assert "## Task" not in second.handoff.text and "later 0" in second.handoff.text
        assert second.handoff.archive_refs[-1] in second.handoff.text
        assert second.handoff.archive_refs[-1] not in first.handoff.text
        assert second.handoff.tokens > first.handoff.tokens
        assert "Yes, but never touch setup.py" in second.handoff.full_text

    def test_notes_past_the_ceiling_fold_into_one(self) -> None:
        """When the new note would not fit beside the earlier ones, all of them fold into one;
        with stacking off, every round folds."""
        first = self.stage(max_note_tokens=4_000)(self.make())
        assert first.handoff
        ceiling = first.handoff.tokens + 20  # no room for a second note
        second = self.stage(trigger_tokens=200, target_tokens=100, max_note_tokens=ceiling)(self.later(first))
        assert second.handoff and second.handoff.earlier == ()
        assert "Yes, but never touch setup.py" in second.handoff.text
        unstacked = self.stage(trigger_tokens=200, target_tokens=100, max_note_tokens=4_000, stack=False)
        folded = unstacked(self.later(first)).handoff
        assert folded and folded.earlier == () and "Yes, but never touch setup.py" in folded.text

    def test_a_stack_ceiling_above_the_fold_leaves_room_after_a_fold_up(self) -> None:
        """With max_stack_tokens above the ceiling, a note stacks past the fold's ceiling (no
        rewrite of the earlier notes); once the stack would pass max_stack_tokens, all fold back
        under the ceiling."""
        first = self.stage(max_note_tokens=4_000)(self.make())
        assert first.handoff
        ceiling = first.handoff.tokens + 20  # no room for a second note under the fold's ceiling
        roomy = self.stage(
            trigger_tokens=200, target_tokens=100, max_note_tokens=ceiling, max_stack_tokens=4 * ceiling
        )
        second = roomy(self.later(first))
        assert second.handoff and second.handoff.earlier == (first.handoff.text,)
        assert second.handoff.tokens > ceiling
        tight = self.stage(
            trigger_tokens=200, target_tokens=100, max_note_tokens=ceiling, max_stack_tokens=ceiling + 30
        )
        folded = tight(self.later(first)).handoff
        assert folded and folded.earlier == () and folded.tokens <= ceiling
        assert "Yes, but never touch setup.py" in folded.text


def test_the_policy_sets_both_notes_ceilings() -> None:
    """The policy's shares reach the summary stage: notes fold into notes_max_share of the budget
    and stack up to notes_stack_share; an LLM summarizer's note has only its own ceiling."""
    policy = Policy(context_window=32_000, output_reserve=8_000)
    stage = next(s for s in default_stages(policy, summarize=True) if isinstance(s, Summarize))
    assert stage.ceiling == int(policy.budget_tokens * policy.notes_max_share)
    assert stage.stack_ceiling == int(policy.budget_tokens * policy.notes_stack_share) > stage.ceiling
    unstacked = Policy(context_window=32_000, output_reserve=8_000, stack_notes=False)
    stage = next(s for s in default_stages(unstacked, summarize=True) if isinstance(s, Summarize))
    assert stage.stack_ceiling == stage.ceiling


def test_facts_classify_files_and_commands() -> None:
    """Read/Edit/Write paths land in their lists; shell commands carry their outcome."""
    turns = [
        turn(
            1,
            "assistant",
            call("a", "Read", file_path="src/a.py"),
            call("b", "Edit", file_path="src/b.py", old_string="x", new_string="y"),
        ),
        turn(2, "user", result("a", "1 x"), result("b", "ok")),
        turn(
            3,
            "assistant",
            call("c", "Write", file_path="src/c.py", content="z"),
            call("d", "Bash", command="make test"),
        ),
        turn(4, "user", result("c", "ok"), result("d", "FAILED tests/x.py - boom", is_error=True)),
        turn(5, "assistant", call("e", "str_replace_editor", command="view", path="/repo/d.py")),
        turn(6, "user", result("e", "content")),
    ]
    facts = extract(turns)
    assert facts["files_read"] == ["src/a.py", "/repo/d.py"]
    assert facts["files_edited"] == ["src/b.py"] and facts["files_created"] == ["src/c.py"]
    assert facts["commands"] == ["make test -> error: FAILED tests/x.py - boom"]
    assert facts["errors"][0].startswith("FAILED tests/x.py - boom (from Bash) -> next: str_replace_editor")


def test_file_contents_are_not_errors() -> None:
    """'Error' in a file that was read or grepped, or in the file a write echoes, is content; a
    write's own status line, a shell's output and an is_error result count."""
    turns = [
        turn(
            1,
            "assistant",
            call("a", "Read", file_path="src/a.py"),
            call("b", "Grep", pattern="Error", path="src"),
            call("c", "Write", file_path="src/c.py", content="raise Error('x')"),
            call("d", "apply_patch", patch="*** Begin Patch"),
            call("e", "Bash", command="make test"),
            call("f", "Read", file_path="src/gone.py"),
            call("g", "shell", command=["bash", "-lc", "ls"]),
        ),
        turn(
            2,
            "user",
            result("a", "1 raise Error('bad input')"),
            result("b", "src/a.py:1: raise Error('bad input')"),
            result("c", "The file src/c.py has been updated.\n1 raise Error('x') failed to parse"),
            result("d", "Error: patch failed: src/c.py:3\n1 unchanged line"),
            result("e", "tests ok\nError: database not found"),
            result("f", "File does not exist.", is_error=True),
            result("g", "ls: cannot access 'x'"),
        ),
    ]
    assert [e.split(" (from")[0] for e in extract(turns)["errors"]] == [
        "Error: patch failed: src/c.py:3",
        "Error: database not found",
        "File does not exist.",
        "ls: cannot access 'x'",
    ]


@pytest.mark.parametrize(
    ("paths", "root"),
    [
        (["/home/u/proj/src/a.py", "/home/u/proj/tests/b.py"], "/home/u/proj"),
        (["/home/u/proj/a.py", "/home/u/proj/a.py"], "/home/u/proj"),
        (["/home/u/proj", "/home/u/proj/src/a.py"], "/home/u"),
        (["/repo/a.py", "/repo/b.py"], ""),  # too shallow to be worth stating
        (["/home/u/a.py"], ""),  # one path: nothing repeats
        (["/home/u/proj/a.py", "src/b.py"], ""),  # a relative path: no common root
        (["/home/u/proj/a.py", "/home/v/b.py"], ""),
        (["/home/u/proj/", "/home/u/proj/src/a.py"], "/home/u"),  # a directory, written with its slash
        (["/home/u//proj/a.py", "/home/u//proj/b.py"], ""),  # commonpath's "/home/u/proj" is not their start
        (["/home/./u/a.py", "/home/./u/b.py"], ""),
    ],
)
def test_common_root(paths: list[str], root: str) -> None:
    """The deepest directory shared by every path, only when all are absolute and it is deep enough."""
    assert common_root(paths) == root


def test_note_states_the_root_once_and_keeps_every_path() -> None:
    """Paths under a shared root are shown relative to it; root + relative path gives each back."""
    files = ["/home/u/proj/src/a.py", "/home/u/proj/tests/b.py", "/home/u/proj/src/deep/c.py"]
    facts = {"task": "t", "next_action": "", "files_read": files, "files_edited": [], "files_created": []}
    note = render_note("header", facts, 10_000)
    assert "relative to /home/u/proj/" in note and "/home/u/proj/src" not in note
    shown = [ln[2:] for ln in note.splitlines() if ln.startswith("- ")]
    assert ["/home/u/proj/" + p for p in shown] == files


@pytest.mark.parametrize(
    ("tokens", "keep", "expected"),
    [
        ([10, 10, 10, 10, 10], 15, 4),  # the newest turn only: a second would overflow the window
        ([10, 10, 10, 10, 10], 20, 3),  # the newest two
        ([10, 10, 10, 10, 10], 1000, 1),  # everything but the task
    ],
)
def test_keep_start_on_plain_turns(tokens: list[int], keep: int, expected: int) -> None:
    """The keep window takes the newest turns up to keep_tokens."""
    turns = [
        Turn(i + 1, "user" if i % 2 == 0 else "assistant", (text("x"),), tok) for i, tok in enumerate(tokens)
    ]
    assert keep_start(turns, keep) == expected


def test_keep_start_never_splits_a_tool_unit() -> None:
    """A keep window never starts at a tool_result: it moves back to the call."""
    t = session(["a", "b", "c"])
    start = keep_start(t.turns, 1)
    assert t.turns[start].role == "assistant" and t.turns[start].tool_use_ids()
