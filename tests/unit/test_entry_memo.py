"""The API process's memo of prompt entries (worker/cache/prompts.py EntryMemo): what it asks Redis
for, what each answer stands for, and that it stays within its bytes. The stamp check itself runs in
Redis: tests/integration/test_entry_memo.py."""

from __future__ import annotations

from typing import Any

from worker.cache.prompts import READ, STAMP, Entry, EntryMemo, entry_values


class Prompts:
    """The one thing the memo asks of PromptEntries: a session's key."""

    def key(self, session_pk: int) -> str:
        return f"p:{session_pk}"


def entry(head: bytes, served_from: int | None = None) -> Entry:
    return Entry(1, 2, 0, b"[]", head, b"", 10, served_from)


def full_reply(rev: bytes, e: Entry) -> list[Any]:
    """What Redis answers with the entry: its stamp, then its fields and `served_from`."""
    stamp = [rev, str(e.epoch).encode(), str(e.through).encode(), str(e.memver).encode()]
    served = None if e.served_from is None else str(e.served_from).encode()
    return [*stamp, *[v if isinstance(v, bytes) else str(v).encode() for v in entry_values(e)], served]


def test_a_held_copy_is_checked_by_its_stamp_and_served_while_unchanged() -> None:
    """Without a copy the memo reads the entry whole; with one it asks for the entry unless the
    copy's stamp still holds, and Redis's 1 (it does) stands for the held copy."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    assert memo.read(prompts, 7) == ("HMGET", "p:7", *STAMP, *READ)
    assert memo.answer(7, full_reply(b"r1", entry(b'{"a":1}'))) == entry(b'{"a":1}')
    command = memo.read(prompts, 7)
    assert command[0] == "EVAL" and command[2:] == (1, "p:7", b"r1", b"1", b"2", b"0")
    assert memo.answer(7, 1) == entry(b'{"a":1}')


def test_a_changed_entry_comes_back_whole_and_replaces_the_copy() -> None:
    """An entry whose stamp moved is answered whole in the same round trip: served, and held with
    its own stamp from then on."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    memo.answer(7, full_reply(b"r1", entry(b"x")))
    assert memo.answer(7, full_reply(b"r2", entry(b"y"))) == entry(b"y")
    assert memo.read(prompts, 7)[4] == b"r2"
    assert memo.answer(7, 1) == entry(b"y")


def test_no_entry_or_an_error_reply_drops_the_copy() -> None:
    """No entry in Redis any more is None (the fetch assembles from the database), an error reply
    is False (the caller reads the entry itself); either way nothing is held after."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    memo.answer(7, full_reply(b"r1", entry(b"x")))
    assert memo.answer(7, [None] * (len(STAMP) + len(READ))) is None
    assert memo.read(prompts, 7)[0] == "HMGET"
    memo.answer(7, full_reply(b"r1", entry(b"x")))
    assert memo.answer(7, None) is False
    assert memo.read(prompts, 7)[0] == "HMGET"
    assert memo.answer(8, 1) is False  # a 1 for a copy it does not hold stands for nothing


def test_the_memo_keeps_within_its_bytes_dropping_the_least_recently_served() -> None:
    """Past its bytes the memo drops the least recently served copy, and never holds an entry larger
    than itself."""
    memo, prompts = EntryMemo(3_000), Prompts()
    for pk in (1, 2):
        memo.answer(pk, full_reply(b"r", entry(b"h" * 1_000)))
    memo.answer(1, 1)  # served again: now the most recent
    memo.answer(3, full_reply(b"r", entry(b"h" * 1_000)))
    assert [memo.read(prompts, pk)[0] for pk in (1, 2, 3)] == ["EVAL", "HMGET", "EVAL"]
    assert memo.held <= 3_000
    memo.answer(4, full_reply(b"r", entry(b"h" * 5_000)))  # larger than the whole memo: not held
    assert memo.read(prompts, 4)[0] == "HMGET"


def test_a_held_copy_learns_the_version_its_epoch_was_first_served_at() -> None:
    """Claiming `served_from` leaves the stamp as it was: the held copy takes the claimed value, and
    only for the same epoch and snapshot."""
    memo = EntryMemo(1 << 20)
    memo.answer(7, full_reply(b"r1", entry(b"x")))
    memo.note_served_from(7, Entry(1, 1, 0, b"[]", b"x", b"", 10, 5))  # another snapshot: ignored
    assert memo.answer(7, 1) == entry(b"x")
    memo.note_served_from(7, entry(b"x", 5))
    assert memo.answer(7, 1) == entry(b"x", 5)
