"""The status note at the end of every prompt: billed in full at each fetch, so it names only what
the prompt does not already show."""

from __future__ import annotations

from worker.compaction.assemble import MAX_FILES_SHOWN, FileInfo, status_note


def _files(n: int, read: set[int]) -> list[FileInfo]:
    return [FileInfo(f"f_{i:016x}", "clip", 10 + i, ("lines 1-5",) if i in read else ()) for i in range(n)]


def test_the_note_counts_every_file_and_names_only_those_read() -> None:
    note = status_note(1_234, 24_000, _files(30, {3, 17}))
    assert note.startswith("[compactd status] context: 1,234 of 24,000 tokens used.")
    assert "Virtual files: 30 " in note
    named = [f for f in _files(30, set()) if f.ref in note]
    assert [f.ref for f in named] == ["f_0000000000000003", "f_0000000000000011"]
    assert "- f_0000000000000003 (clip, 13 lines; read: lines 1-5)" in note


def test_a_note_without_files_or_reads_is_one_line_plus_the_memory_changes() -> None:
    assert status_note(10, 100, []) == "[compactd status] context: 10 of 100 tokens used."
    assert "Read so far" not in status_note(10, 100, _files(3, set()))
    assert status_note(10, 100, [], "Working memory changed").endswith("\nWorking memory changed")


def test_at_most_twenty_read_files_are_named() -> None:
    note = status_note(10, 100, _files(50, set(range(50))))
    assert sum(f.ref in note for f in _files(50, set())) == MAX_FILES_SHOWN
    assert f"… and {50 - MAX_FILES_SHOWN} more" in note
