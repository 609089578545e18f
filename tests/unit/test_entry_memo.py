"""The API process's memo of prompt entries (worker/cache/prompts.py EntryMemo): a held copy is served
only while Redis still holds the entry at the copy's rev, and the memo stays within its bytes."""

from __future__ import annotations

from typing import Any

from worker.cache.prompts import FIELDS, Entry, EntryMemo, entry_values


class Prompts:
    """The one thing the memo asks of PromptEntries: a session's key."""

    def key(self, session_pk: int) -> str:
        return f"p:{session_pk}"


def entry(head: bytes) -> Entry:
    return Entry(1, 2, 0, b"[]", head, b"", 10, b"[]")


def full_reply(rev: bytes, e: Entry) -> list[Any]:
    """What Redis answers to the memo's HMGET: the rev, then the entry's fields."""
    return [rev, *[v if isinstance(v, bytes) else str(v).encode() for v in entry_values(e)]]


def test_a_copy_is_held_after_a_full_read_and_served_while_the_rev_is_unchanged() -> None:
    """After a full read the memo asks Redis for the rev alone and serves its copy while the rev is the
    same."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    assert memo.read(prompts, 7) == ("HMGET", "p:7", "rev", *FIELDS)
    assert memo.answer(7, full_reply(b"r1", entry(b'{"a":1}'))) == entry(b'{"a":1}')
    assert memo.read(prompts, 7) == ("HGET", "p:7", "rev")
    assert memo.answer(7, b"r1") == entry(b'{"a":1}')


def test_a_changed_or_missing_rev_drops_the_copy_and_asks_for_a_read() -> None:
    """A rev that changed, or none at all, drops the copy: the caller reads the entry and the next round
    trip asks for it whole."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    memo.answer(7, full_reply(b"r1", entry(b"x")))
    assert memo.answer(7, b"r2") is False  # rewritten since: never the held copy
    assert memo.read(prompts, 7)[0] == "HMGET"
    memo.answer(7, full_reply(b"r2", entry(b"y")))
    assert memo.answer(7, None) is False  # the entry is gone from Redis
    assert memo.read(prompts, 7)[0] == "HMGET"


def test_no_entry_in_redis_is_none_and_nothing_is_held() -> None:
    """No entry in Redis is None (the fetch assembles from the database) and nothing is held."""
    memo, prompts = EntryMemo(1 << 20), Prompts()
    assert memo.answer(7, [None] * (len(FIELDS) + 1)) is None
    assert memo.read(prompts, 7)[0] == "HMGET"


def test_the_memo_keeps_within_its_bytes_dropping_the_least_recently_served() -> None:
    """Past its bytes the memo drops the least recently served copy, and never holds an entry larger than
    itself."""
    memo, prompts = EntryMemo(3_000), Prompts()
    for pk in (1, 2):
        memo.answer(pk, full_reply(b"r", entry(b"h" * 1_000)))
    memo.answer(1, b"r")  # served again: now the most recent
    memo.answer(3, full_reply(b"r", entry(b"h" * 1_000)))
    assert [memo.read(prompts, pk)[0] for pk in (1, 2, 3)] == ["HGET", "HMGET", "HGET"]
    assert memo.held <= 3_000
    memo.answer(4, full_reply(b"r", entry(b"h" * 5_000)))  # larger than the whole memo: not held
    assert memo.read(prompts, 4)[0] == "HMGET"
