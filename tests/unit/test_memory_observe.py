"""Observed working memory: each rule on small synthetic turns, then on every real transcript."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import data_params, transcript_files
from worker.compaction.model import Turn
from worker.memory import commands as C
from worker.memory.model import MAX_FILES, Change, Item, apply
from worker.memory.observe import mentioned, observations, observe, resolved_by

T0 = datetime(2025, 1, 1)


def text(role: str, seq: int, s: str) -> Turn:
    return Turn(seq=seq, role=role, content=({"type": "text", "text": s},))  # type: ignore[arg-type]


def unit(seq: int, tid: str, name: str, body: str, *, is_error: bool = False, **args: Any) -> list[Turn]:
    """An assistant tool call at seq and its result at seq + 1."""
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": body}
    if is_error:
        result["is_error"] = True
    return [
        Turn(seq, "assistant", ({"type": "tool_use", "id": tid, "name": name, "input": args},)),
        Turn(seq + 1, "user", (result,)),
    ]


def bash(seq: int, command: str, body: str = "ok", *, is_error: bool = False) -> list[Turn]:
    return unit(seq, f"b{seq}", "Bash", body, is_error=is_error, command=command)


def run(turns: Sequence[Turn], items: Sequence[Item] = (), *, through: int = 0) -> tuple[Item, ...]:
    """Observe then apply, the way the worker does."""
    out = tuple(items)
    for o in observations(turns, out, observed_through=through):
        out = apply(
            out, [o.change], origin="observed", now=T0 + timedelta(seconds=len(out)), reason=o.reason
        ).items
    return out


def section(items: Sequence[Item], name: str) -> dict[str, Item]:
    return {i.key: i for i in items if i.section == name}


PYTEST_FAIL = "Exit code 1\n=== FAILURES ===\nFAILED tests/test_x.py::test_a - AssertionError: 1 != 2\n=== 1 failed, 3 passed in 0.2s ==="
PYTEST_PASS = "=== 4 passed in 0.2s ==="


@pytest.mark.parametrize(
    ("command", "key"),
    [
        ("pytest tests/test_x.py -q", "pytest tests/test_x.py -q"),
        (
            "cd /repo && .venv/bin/python -m pytest tests/test_x.py -q 2>&1 | tail -5",
            "pytest tests/test_x.py -q",
        ),
        ("CI=true uv run pytest -q >/dev/null 2>&1", "pytest -q"),
        ("mix test 2>&1 | tail -5", "mix test"),
        ("timeout 60 npx jest src || true", "jest src"),
        ("git commit -m \"$(cat <<'EOF'\nbody\nEOF\n)\"", "git commit -m \"$(cat <<'EOF'"),
    ],
)
def test_normalize(command: str, key: str) -> None:
    """A command's key drops cd, env, wrappers, redirections and viewer pipes, and keeps the first line."""
    assert C.normalize(command) == key


@pytest.mark.parametrize(
    ("body", "is_error", "kind", "summary"),
    [
        (PYTEST_PASS, False, "pass", ""),
        (
            PYTEST_FAIL,
            True,
            "fail",
            "1 failed, 3 passed in 0.2s — FAILED tests/test_x.py::test_a - AssertionError: 1 != 2",
        ),
        ("13 tests, 1 failure\n", False, "fail", "13 tests, 1 failure"),
        ("14 doctests, 373 tests, 0 failures", False, "pass", ""),
        ("--- FAIL: TestParse (0.00s)\nFAIL\tpkg 0.01s", False, "fail", "--- FAIL: TestParse (0.00s)"),
        (
            'Traceback (most recent call last):\n  File "x.py"\nValueError: bad',
            False,
            "fail",
            "ValueError: bad",
        ),
        ("Exit code 128\nfatal: no upstream branch", True, "fail", "fatal: no upstream branch"),
        ("Exit code 1\n", True, "fail", "exit code 1"),
        ("Command running in background with ID: b7b23b2.", False, "unknown", ""),
        (
            "The user doesn't want to proceed with this tool use. The tool use was rejected.",
            True,
            "unknown",
            "",
        ),
    ],
)
def test_outcome(body: str, is_error: bool, kind: str, summary: str) -> None:
    """A command's output is read as pass, fail with a one-line summary, or not known yet."""
    got = C.outcome(body, is_error)
    assert (got.kind, got.summary) == (kind, summary)


@pytest.mark.parametrize(
    ("blocker", "passed", "resolves"),
    [
        ("pytest tests/test_x.py -q", "pytest tests/test_x.py -q", True),
        ("pytest tests/test_x.py -q", "pytest -q", True),  # the whole suite passed
        ("pytest tests/test_x.py -q", "pytest tests/test_y.py -q", False),
        ("mix credo --strict lib/a.ex", "mix compile && mix credo --strict lib/a.ex", True),
        ("git push", "git push --set-upstream origin main", True),  # same family, not a check
        ("python run.py", "python other.py", False),
        ("pytest tests/test_x.py", "npm test", False),
    ],
)
def test_resolved_by(blocker: str, passed: str, resolves: bool) -> None:
    """A pass resolves a blocker when it is the same command, the runner's whole suite, or a same-family command."""
    assert (resolved_by(blocker, passed) is not None) is resolves


def test_files_are_counted_ranked_and_capped() -> None:
    """Edited files outrank read ones, counts accumulate across observations, and at most 7 are kept."""
    turns: list[Turn] = []
    for n in range(9):
        turns += unit(2 * n + 1, f"r{n}", "Read", "content", file_path=f"src/read{n}.py")
    turns += unit(100, "e1", "Edit", "ok", file_path="src/app.py", old_string="a", new_string="b")
    items = run(turns)
    files = section(items, "important_files")
    assert len(files) == MAX_FILES
    assert files["src/app.py"].value == "src/app.py — edited 1×"
    assert "src/read0.py" not in files  # the oldest reads dropped
    more = unit(102, "e2", "Edit", "ok", file_path="src/app.py", old_string="b", new_string="c")
    more += unit(104, "r9", "Read", "content", file_path="src/app.py")
    items = run([*turns, *more], items, through=101)
    assert section(items, "important_files")["src/app.py"].value == "src/app.py — edited 2×, read 1×"


def test_failed_edits_searches_and_scratch_reads_are_not_files() -> None:
    """A failed edit, a grep over a folder and `tail` of a /tmp output are not important files."""
    turns = [
        *unit(
            1,
            "e",
            "Edit",
            "String not found",
            is_error=True,
            file_path="a.py",
            old_string="x",
            new_string="y",
        ),
        *unit(3, "g", "Grep", "hits", pattern="foo", path="src"),
        *bash(5, "tail -30 /tmp/claude/tasks/x.output"),
        *bash(7, "sed -n '1,40p' src/b.py"),
    ]
    assert set(section(run(turns), "important_files")) == {"src/b.py"}
    assert section(run(turns), "important_files")["src/b.py"].value == "src/b.py — viewed 1×"


def test_a_moved_file_carries_its_counts() -> None:
    """`git mv a b` retires a and adds b with a's history; the removal says why."""
    turns = unit(1, "e", "Edit", "ok", file_path="src/a.py", old_string="x", new_string="y")
    items = run(turns)
    moved = bash(3, "git mv src/a.py src/b.py")
    obs = observations([*turns, *moved], items, observed_through=2)
    removal = next(o for o in obs if o.change.op == "remove")
    assert removal.change.key == "src/a.py" and "moved to src/b.py" in removal.reason
    files = section(run([*turns, *moved], items, through=2), "important_files")
    assert set(files) == {"src/b.py"} and files["src/b.py"].value == "src/b.py — edited 1×"


def test_a_write_after_deleting_a_file_of_that_name_is_a_move() -> None:
    """`rm old/x.py` then a Write of new/x.py moves the item; a plain `rm` just retires it."""
    turns = [
        *unit(1, "e", "Edit", "ok", file_path="old/x.py", old_string="a", new_string="b"),
        *unit(3, "r", "Read", "c", file_path="old/y.py"),
        *bash(5, "rm old/x.py old/y.py"),
        *unit(7, "w", "Write", "ok", file_path="new/x.py", content="print(1)\n"),
    ]
    files = section(run(turns), "important_files")
    assert set(files) == {"new/x.py"}
    assert files["new/x.py"].value == "new/x.py — edited 1×, created 1×"


def test_agent_files_are_kept_and_left_alone() -> None:
    """An important file the agent set is neither rewritten nor retired by observation."""
    mine = apply(
        [], [_change("important_files", "src/core.py — the engine", "src/core.py")], origin="agent", now=T0
    )
    turns = unit(1, "r", "Read", "c", file_path="src/core.py")
    files = section(run(turns, mine.items), "important_files")
    assert files["src/core.py"].value == "src/core.py — the engine" and files["src/core.py"].origin == "agent"


AGENT_BLOCKER = Change("add", "blockers", "my note: flaky fixture", key="pytest -q")
OBSERVED = {
    "fail": bash(1, "pytest -q", PYTEST_FAIL, is_error=True),
    "edit": unit(1, "e", "Edit", "ok", file_path="src/a.py", old_string="a\n", new_string="b\n"),
}


@pytest.mark.parametrize(
    ("agent", "observed"),
    [
        (AGENT_BLOCKER, "fail"),  # the agent's blocker: a failure observed again does not take it over
        (Change("resolve", "blockers", key="pytest -q"), "fail"),  # resolved by PATCH: not reopened
        (Change("set", "last_edit", "src/a.py — my summary"), "edit"),
    ],
)
def test_an_observation_never_changes_what_the_agent_set(agent: Change, observed: str) -> None:
    """Whatever the turns say, an item whose origin is not "observed" keeps its value, status and origin."""
    start = apply([], [AGENT_BLOCKER], origin="agent", now=T0).items
    items = apply(start, [agent], origin="agent", now=T0).items
    after = {(i.section, i.key): i for i in run(OBSERVED[observed], items)}
    for before in items:
        now = after[(before.section, before.key)]
        assert (now.value, now.status, now.origin) == (before.value, before.status, "agent")


def test_a_passing_command_does_not_resolve_the_agents_blocker() -> None:
    """Resolving is a change too: the agent's blocker stays open until the agent resolves it."""
    items = apply([], [AGENT_BLOCKER], origin="agent", now=T0).items
    after = run(bash(1, "pytest -q", PYTEST_PASS), items)
    assert section(after, "blockers")["pytest -q"].status == "open"


def test_mentioned_names_the_files_and_commands_of_the_new_calls() -> None:
    """Files read, edited, viewed or moved and commands run after the watermark, whatever their outcome."""
    turns = [
        *unit(1, "r", "Read", "c", file_path="src/old.py"),
        *unit(3, "e", "Edit", "ok", file_path="src/a.py", old_string="a", new_string="b"),
        *bash(5, "cd /r && pytest -q 2>&1", PYTEST_FAIL, is_error=True),
        *bash(7, "git mv src/b.py src/c.py"),
        *bash(9, "sed -n 1,20p src/d.py"),
    ]
    assert mentioned(turns, observed_through=2) == {
        ("important_files", "src/a.py"),
        ("important_files", "src/b.py"),
        ("important_files", "src/c.py"),
        ("important_files", "src/d.py"),
        ("blockers", "pytest -q"),
        ("blockers", "git mv src/b.py src/c.py"),
        ("blockers", "sed -n 1,20p src/d.py"),
    }


def _change(sec: str, value: str, key: str | None = None) -> Any:
    from worker.memory.model import Change

    return Change("set", sec, value, key=key)


def test_a_failing_test_is_a_blocker_resolved_when_it_passes() -> None:
    """A failing pytest opens a blocker keyed by the command; the same command passing resolves it."""
    fail = bash(1, "pytest tests/test_x.py -q 2>&1", PYTEST_FAIL, is_error=True)
    items = run(fail)
    blocker = section(items, "blockers")["pytest tests/test_x.py -q"]
    assert blocker.status == "open" and "FAILED tests/test_x.py::test_a" in blocker.value
    items = run([*fail, *bash(3, "pytest tests/test_x.py -q", PYTEST_PASS)], items, through=2)
    assert section(items, "blockers")["pytest tests/test_x.py -q"].status == "resolved"


def test_failing_then_passing_in_one_batch_records_both() -> None:
    """Within one observation the blocker is opened then resolved (history shows both), and probes are ignored."""
    turns = [
        *bash(1, "pytest -q", PYTEST_FAIL, is_error=True),
        *bash(3, "grep -rn foo src", "Exit code 1", is_error=True),
        *bash(5, "pytest -q", PYTEST_PASS),
    ]
    ops = [(c.op, c.section, c.key) for c in observe(turns, [])]
    assert ("add", "blockers", "pytest -q") in ops and ("resolve", "blockers", "pytest -q") in ops
    assert not any(key and key.startswith("grep") for _, _, key in ops)


def test_a_result_arriving_later_is_paired_with_its_earlier_call() -> None:
    """The call was seen in an earlier observation; its failing result, new now, still opens the blocker."""
    turns = bash(1, "npm test", "Tests: 2 failed, 10 passed", is_error=True)
    assert observe(turns[:1], []) == []
    assert [c.key for c in observe(turns, [], observed_through=1)] == ["npm test"]


def test_a_switched_test_framework_retires_the_old_blocker() -> None:
    """pytest failed, then the agent ran npm test three times and never pytest again: the blocker is retired."""
    turns = bash(1, "pytest tests/test_x.py", PYTEST_FAIL, is_error=True)
    items = run(turns)
    for n, seq in enumerate((3, 5)):
        turns += bash(seq, "npm test", "Tests: 4 passed")
        items = run(turns, items, through=seq - 1)
        assert "pytest tests/test_x.py" in section(items, "blockers"), n
    turns += bash(7, "npm test -- --watch=false", "Tests: 4 passed")
    obs = observations(turns, items, observed_through=6)
    assert [(o.change.op, o.change.key) for o in obs if o.change.section == "blockers"] == [
        ("remove", "pytest tests/test_x.py")
    ]
    assert "tests now run with `npm test` (3 runs since turn 2), `pytest` not run again" in obs[-1].reason


def test_the_last_edit_is_a_clipped_diff() -> None:
    """The newest edit becomes last_edit: the path, the tool, then a unified diff within 40 lines."""
    old = "\n".join(f"line {i}" for i in range(200))
    new = old.replace("line 5\n", "line five\n")
    turns = [
        *unit(1, "w", "Write", "ok", file_path="src/a.py", content="x = 1\n"),
        *unit(3, "e", "Edit", "ok", file_path="src/b.py", old_string=old, new_string=new),
    ]
    value = section(run(turns), "last_edit")["last_edit"].value
    assert value.startswith("src/b.py (Edit)\n@@")
    assert "-line 5" in value and "+line five" in value and len(value.splitlines()) <= 42
    big = unit(
        5, "w2", "Write", "ok", file_path="src/c.py", content="\n".join(f"v{i} = {i}" for i in range(500))
    )
    value = section(run([*turns, *big]), "last_edit")["last_edit"].value
    assert len(value.splitlines()) <= 42 and value.endswith("…")


def test_the_task_is_the_first_user_message_once() -> None:
    """The first user message, clipped to two sentences, is the task; later messages never replace it."""
    turns = [
        text("user", 1, "Fix the failing test in src/app.py. It breaks on empty input. Then refactor."),
        text("assistant", 2, "ok"),
    ]
    items = run(turns)
    assert (
        section(items, "task")["task"].value
        == "Fix the failing test in src/app.py. It breaks on empty input."
    )
    assert observe([*turns, text("user", 3, "Also do X.")], items, observed_through=2) == []


def test_the_task_is_what_the_user_typed_not_a_harness_message() -> None:
    """A slash command is the task as typed; its expansion and hook reminders are not."""
    command = Turn(
        1,
        "user",
        (
            {"type": "text", "text": "<system-reminder>hook output</system-reminder>"},
            {
                "type": "text",
                "text": "<command-message>fix is running…</command-message>\n<command-name>/fix</command-name>"
                "\n<command-args>the login bug</command-args>",
            },
            {"type": "text", "text": "You are fixing a bug. Follow these steps…"},
        ),
        20,
    )
    assert section(run([command]), "task")["task"].value == "/fix the login bug"


def test_observing_past_the_watermark_changes_nothing() -> None:
    """Observing again with every turn already observed gives no change."""
    turns = [
        text("user", 1, "Fix it."),
        *unit(2, "e", "Edit", "ok", file_path="a.py", old_string="x", new_string="y"),
        *bash(4, "pytest -q", PYTEST_FAIL, is_error=True),
    ]
    items = run(turns)
    assert {i.section for i in items} == {"task", "important_files", "last_edit", "blockers"}
    assert observe(turns, items, observed_through=5) == []


# -- real transcripts

CLAUDE_CODE = [p for p in transcript_files() if "claude-code" in p.parts and "subagents" not in p.parts]


def replay(path: Path, step: int = 2) -> tuple[tuple[Item, ...], int]:
    """Observe a real session a few turns at a time, as the worker would; (items, events)."""
    from worker.compaction.formats import load_transcript
    from worker.compaction.model import Policy
    from worker.ingest import ingest
    from worker.redaction import Redactor

    imported = load_transcript(path)
    turns = ingest(imported.messages, first_seq=1, redactor=Redactor(b"k"), policy=Policy()).turns
    items: tuple[Item, ...] = ()
    events, through = 0, 0
    for end in range(step, len(turns) + step, step):
        window = turns[:end]
        for o in observations(window, items, observed_through=through):
            applied = apply(
                items, [o.change], origin="observed", now=T0 + timedelta(seconds=end), reason=o.reason
            )
            items, events = applied.items, events + len(applied.events)
        through = window[-1].seq
    return items, events


@pytest.mark.data
@pytest.mark.parametrize("path", data_params(CLAUDE_CODE), ids=lambda p: p.name[:40])
def test_real_sessions_give_sane_memory(shared_data: Path, path: Path) -> None:
    """On every real Claude Code session: at most 7 files, each one the session touched, blockers keyed by commands it ran."""
    items, _ = replay(path)
    text_of_session = path.read_text(errors="replace")
    files = section(items, "important_files")
    assert len(files) <= MAX_FILES
    assert all(p in text_of_session for p in files)
    assert all(i.origin == "observed" for i in items)
    for key in section(items, "blockers"):
        assert key.split()[0] in text_of_session


@pytest.mark.data
def test_the_long_spotter_sessions_observe_what_happened(shared_data: Path) -> None:
    """The two long spotter sessions: 7 files, the failing mix test resolved, nothing left open."""
    long = [
        p for p in CLAUDE_CODE if p.name.startswith(("fa812bfe", "258c7280")) and p.parent.name == "spotter"
    ]
    assert len(long) == 2
    for path in long:
        items, _ = replay(path)
        blockers = section(items, "blockers")
        assert len(section(items, "important_files")) == MAX_FILES
        assert any(k.startswith("mix test test/") and b.status == "resolved" for k, b in blockers.items())
        assert all(b.status == "resolved" for b in blockers.values())
        assert section(items, "task") and section(items, "last_edit")
