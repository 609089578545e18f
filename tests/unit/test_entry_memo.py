"""The API process's memo of prompt entries (worker/cache/prompts.py EntryMemo): a held copy is served
only while Redis still holds the entry at the copy's rev, and the memo stays within its bytes."""

from __future__ import annotations

from typing import Any

from worker.cache.prompts import FIELDS, STAMP, Entry, EntryMemo, entry_values


class Prompts:
    """The one thing the memo asks of PromptEntries: a session's key."""

    def key(self, session_pk: int) -> str:
        return f"p:{session_pk}"


def entry(head: bytes) -> Entry:
    return Entry(1, 2, 0, b"[]", head, b"", 10, b"[]")


def stamp(rev: bytes, e: Entry) -> list[Any]:
    """What Redis answers to the memo's small read (STAMP's fields) for entry `e` at `rev`."""
    return [rev, b"0", str(e.epoch).encode(), str(e.through).encode(), str(e.memver).encode()]


def full_reply(rev: bytes, e: Entry) -> list[Any]:
    """What Redis answers to the memo's full read: the stamp, then the entry's fields."""
    return [*stamp(rev, e), *[v if isinstance(v, bytes) else str(v).encode() for v in entry_values(e)]]


def test_a_copy_is_held_after_a_full_read_and_served_while_the_rev_is_unchanged() -> None:
    """After a full read the memo asks Redis for the rev alone and serves its copy while the rev is the
    same."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    assert memo.read(prompts, 7) == ("HMGET", "p:7", *STAMP, *FIELDS)
    assert memo.answer(7, full_reply(b"r1", entry(b'{"a":1}'))) == entry(b'{"a":1}')
    assert memo.read(prompts, 7) == ("HMGET", "p:7", *STAMP)
    assert memo.answer(7, stamp(b"r1", entry(b"x"))) == entry(b'{"a":1}')


def test_a_changed_or_missing_rev_drops_the_copy_and_asks_for_a_read() -> None:
    """A rev that changed, or none at all, drops the copy: the caller reads the entry and the next round
    trip asks for it whole."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    held = entry(b"x")
    memo.answer(7, full_reply(b"r1", held))
    assert memo.answer(7, stamp(b"r2", held)) is False  # rewritten since: never the held copy
    assert len(memo.read(prompts, 7)) == 2 + len(STAMP) + len(FIELDS)
    memo.answer(7, full_reply(b"r2", held))
    moved = Entry(held.epoch, held.through + 2, held.memver, b"[]", b"x", b"", 10, b"[]")
    assert memo.answer(7, stamp(b"r2", moved)) is False  # a writer that kept the rev moved `through`
    memo.answer(7, full_reply(b"r3", held))
    assert memo.answer(7, [None] * len(STAMP)) is False  # the entry is gone from Redis
    assert memo.answer(7, None) is False  # an error reply
    assert len(memo.read(prompts, 7)) == 2 + len(STAMP) + len(FIELDS)


def test_no_entry_in_redis_is_none_and_nothing_is_held() -> None:
    """No entry in Redis is None (the fetch assembles from the database) and nothing is held."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    assert memo.answer(7, [None] * (len(STAMP) + len(FIELDS))) is None
    assert len(memo.read(prompts, 7)) == 2 + len(STAMP) + len(FIELDS)


def test_the_memo_keeps_within_its_bytes_dropping_the_least_recently_served() -> None:
    """Past its bytes the memo drops the least recently served copy, and never holds an entry larger than
    itself."""
    memo, prompts = EntryMemo(3_000), Prompts()
    for pk in (1, 2):
        memo.answer(pk, full_reply(b"r", entry(b"h" * 1_000)))
    memo.answer(1, stamp(b"r", entry(b"")))  # served again: now the most recent
    memo.answer(3, full_reply(b"r", entry(b"h" * 1_000)))
    small = 2 + len(STAMP)
    assert [len(memo.read(prompts, pk)) == small for pk in (1, 2, 3)] == [True, False, True]
    assert memo.held <= 3_000
    memo.answer(4, full_reply(b"r", entry(b"h" * 5_000)))  # larger than the whole memo: not held
    assert len(memo.read(prompts, 4)) > small
