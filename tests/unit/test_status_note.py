"""The status note at the end of every prompt: billed in full at each fetch, so it counts the
virtual files, names only the newest ones read, and stays within the room the engine leaves it."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.compaction.assemble import (
    FILES_NOTE_TOKENS,
    MAX_FILES_SHOWN,
    MAX_RANGES_SHOWN,
    FileInfo,
)
from worker.compaction.assemble import status_note as _status_note
from worker.compaction.tokens import count_text


def status_note(used: int, budget: int, files: list[FileInfo], memory: str = "") -> str:
    """The note for a session's whole file list, as a fetch renders it (the count and the read ones)."""
    return _status_note(used, budget, len(files), [f for f in files if f.read_ranges], memory)


def _files(n: int, read: set[int]) -> list[FileInfo]:
    return [FileInfo(f"f_{i:016x}", "clip", 10 + i, ("lines 1-5",) if i in read else ()) for i in range(n)]


def _named(note: str, n: int) -> list[int]:
    return [i for i, f in enumerate(_files(n, set())) if f.ref in note]


def test_the_note_counts_every_file_and_names_only_those_read() -> None:
    """30 files, 2 read: the count says 30, and only the two read ones are named, with their ranges."""
    note = status_note(1_234, 24_000, _files(30, {3, 17}))
    assert note.startswith("[compactd status] context: 1,234 of 24,000 tokens used.")
    assert "Virtual files: 30." in note
    assert _named(note, 30) == [3, 17]
    assert "- f_0000000000000003 (clip, 13 lines; read: lines 1-5)" in note
    assert "Read so far:\n" in note


def test_a_note_without_files_or_reads_is_one_line_plus_the_memory_changes() -> None:
    """No files: the budget line alone; files none of which was read: no "Read so far" section."""
    assert status_note(10, 100, []) == "[compactd status] context: 10 of 100 tokens used."
    assert "Read so far" not in status_note(10, 100, _files(3, set()))
    assert status_note(10, 100, [], "Working memory changed").endswith("\nWorking memory changed")


def test_past_the_cap_the_newest_read_files_are_named_and_the_reads_counted() -> None:
    """25 of 50 files read: the newest MAX_FILES_SHOWN of those 25 are named, and the header says
    how many were read (not how many files there are)."""
    read = set(range(0, 50, 2))
    note = status_note(10, 100, _files(50, read))
    assert _named(note, 50) == sorted(read)[-MAX_FILES_SHOWN:]
    assert f"Read so far ({len(read)}, the newest):" in note


def test_past_the_cap_the_newest_ranges_of_a_file_are_shown() -> None:
    """A file read 6 times: the last MAX_RANGES_SHOWN ranges, and how many earlier ones."""
    ranges = tuple(f"lines {k}-{k + 9}" for k in range(0, 60, 10))
    note = status_note(10, 100, [FileInfo("f_a", "offload", 60, ranges)])
    shown = ", ".join(ranges[-MAX_RANGES_SHOWN:])
    assert f"read: {len(ranges) - MAX_RANGES_SHOWN} earlier, {shown})" in note


_RANGE = st.one_of(
    st.just("grep"),
    st.builds(lambda a, b: f"lines {a}-{b}", st.integers(1, 10**9), st.integers(1, 10**9)),
    st.builds(lambda a, b: f"bytes {a}-{b}", st.integers(0, 10**12), st.integers(0, 10**12)),
)
_FILE = st.builds(
    FileInfo,
    st.from_regex(r"f_[0-9a-f]{16}", fullmatch=True),
    st.sampled_from(["clip", "offload", "archive", "argument"]),
    st.integers(1, 10**9),
    st.lists(_RANGE, max_size=12).map(tuple),
)


_LONGEST = FileInfo("f_0123456789abcdef", "argument", 10**9, ("bytes 999999999999-999999999999",) * 12)


@settings(max_examples=60, deadline=None)
@given(st.lists(_FILE, max_size=40), st.integers(0, 10**7), st.integers(1, 10**7))
@example([_LONGEST] * 40, 10**7, 10**7)
def test_the_note_without_memory_changes_stays_within_its_room(
    files: list[FileInfo], used: int, budget: int
) -> None:
    """Whatever was read, the budget, files and reads lines fit the FILES_NOTE_TOKENS the engine
    leaves for them (past it, a fetch could pass its budget)."""
    assert count_text(status_note(used, budget, files)) <= FILES_NOTE_TOKENS


def test_a_fetch_reads_the_count_and_the_read_files_back_from_the_cache_entry() -> None:
    """What the entry stores (`encode_files`) is what the fetch's note is made of (`note_files`)."""
    from worker.flows.serve import encode_files, note_files

    files = _files(30, {3, 17})
    files[17] = FileInfo(files[17].ref, "archive", 4, ("lines 1-2", "lines 3-4"))
    count, read = note_files(encode_files(files))
    assert (count, read) == (30, (files[3], files[17]))
    assert note_files(encode_files([])) == (0, ())
