"""Pricing: a model of Anthropic's prompt cache that bills a conversation's Messages requests.

It compares compacted and uncompacted histories honestly: a rewrite that saves tokens but throws
away the cached prefix may cost more than it saves. The rules follow the provider's documentation:

- The prompt is read as blocks in order: `system` (a string or text blocks), then each message's
  content blocks (string content is one text block). A block with `cache_control` is a breakpoint;
  a request carries at most 4.
- A cache entry is the exact prefix up to a block boundary: each block's canonical JSON without
  its `cache_control`, and the role holding it, chained through sha256. The model and the tools
  seed the chain (they come first in the prompt: changing them invalidates everything), but their
  tokens are not counted, as in `count_request`.
- Each breakpoint looks for a live entry at its boundary and up to `lookback_blocks` boundaries
  before it; the longest hit is read (0.1×), the rest up to the last breakpoint is written
  (1.25×) and what follows is billed at 1×. Prefixes under `min_tokens` are never cached.
- Every breakpoint's prefix is cached after the request; an entry lives `ttl_seconds` from its
  last write or read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from worker.compaction.model import Block, canonical_json
from worker.compaction.tokens import MESSAGE_OVERHEAD_TOKENS, count_block, count_text

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20  # block boundaries a breakpoint looks back for a cached prefix
READ_RATE = 0.1  # share of the base input price for tokens read from the cache
WRITE_RATE = 1.25  # the 5-minute cache write premium


@dataclass(frozen=True, slots=True)
class Billed:
    """The input tokens of one request (or a run of them) by how the provider bills them."""

    read_tokens: int = 0
    write_tokens: int = 0
    uncached_tokens: int = 0

    @property
    def input_tokens(self) -> int:
        return self.read_tokens + self.write_tokens + self.uncached_tokens

    @property
    def read_share(self) -> float:
        """The share of input tokens read from the cache (0 for no input)."""
        return self.read_tokens / self.input_tokens if self.input_tokens else 0.0

    def cost_usd(self, price_per_mtok: float) -> float:
        """The input cost at a base price per million tokens, with cache reads and writes priced."""
        weighted = self.read_tokens * READ_RATE + self.write_tokens * WRITE_RATE + self.uncached_tokens
        return weighted * price_per_mtok / 1_000_000

    def uncached_cost_usd(self, price_per_mtok: float) -> float:
        """What the same tokens would cost with no prompt caching at all."""
        return self.input_tokens * price_per_mtok / 1_000_000

    def __add__(self, other: Billed) -> Billed:
        return Billed(
            self.read_tokens + other.read_tokens,
            self.write_tokens + other.write_tokens,
            self.uncached_tokens + other.uncached_tokens,
        )


def total(billed: Iterable[Billed]) -> Billed:
    """The sum of a run's bills."""
    return sum(billed, Billed())


def breakpoints(request: dict[str, Any]) -> int:
    """How many cache_control markers a request carries (tools, system and messages)."""
    blocks: list[Any] = list(request.get("tools") or [])
    if isinstance(request.get("system"), list):
        blocks += request["system"]
    for message in request.get("messages", []):
        if isinstance(message["content"], list):
            blocks += message["content"]
    # a tool_result's own content blocks may carry markers too, and the API counts them
    nested = [
        p for b in blocks if isinstance(b, dict) and isinstance(b.get("content"), list) for p in b["content"]
    ]
    return sum(1 for b in blocks + nested if isinstance(b, dict) and "cache_control" in b)


@dataclass(frozen=True, slots=True)
class _Boundary:
    """The end of one block: the hash of the prefix up to it, its tokens, and whether it is marked."""

    key: bytes
    tokens: int
    marked: bool


def _seed(request: dict[str, Any]) -> bytes:
    """The key the prefix chain starts from: the model and the tools come first in the prompt."""
    seed = {"model": request.get("model"), "tools": [_unmarked(t) for t in request.get("tools") or []]}
    return hashlib.sha256(canonical_json(seed)).digest()


def _chained(key: bytes, role: str, block: Block) -> bytes:
    return hashlib.sha256(key + role.encode() + canonical_json(_unmarked(block))).digest()


def _boundaries(request: dict[str, Any]) -> tuple[list[_Boundary], int]:
    """Every block boundary of the prompt, and the request's total tokens (as `count_request`)."""
    key = _seed(request)
    out: list[_Boundary] = []
    tokens = 0

    def add(role: str, block: Block, block_tokens: int) -> None:
        nonlocal key, tokens
        key = _chained(key, role, block)
        tokens += block_tokens
        out.append(_Boundary(key, tokens, "cache_control" in block))

    system = request.get("system") or []
    blocks: list[Block] = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
    texts: list[str] = []
    for block in blocks:
        # count_request counts the system texts joined by newlines: each block is billed the
        # tokens it adds to that join, so the prefix counts match it exactly.
        before = count_text("\n".join(texts))
        texts.append(str(block.get("text", "")))
        add("system", block, count_text("\n".join(texts)) - before)

    pending = 0
    for message in request.get("messages", []):
        content = message["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else content
        pending += MESSAGE_OVERHEAD_TOKENS
        for block in content:
            add(message["role"], block, count_block(block) + pending)
            pending = 0
    return out, tokens + pending


def _blocks(request: dict[str, Any]) -> Iterator[tuple[str, Block]]:
    """(role, block) of every block of the prompt in order: system, then each message's content."""
    system = request.get("system") or []
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        yield "system", block
    for message in request.get("messages", []):
        content = message["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            yield message["role"], block


def last_mark_key(request: dict[str, Any]) -> tuple[int, bytes] | None:
    """The block index and prefix key of a request's last breakpoint: the longest prefix it makes
    the provider cache (None: no breakpoint)."""
    key, found = _seed(request), None
    for i, (role, block) in enumerate(_blocks(request)):
        key = _chained(key, role, block)
        if "cache_control" in block:
            found = (i, key)
    return found


def keeps_prefix(previous: tuple[int, bytes] | None, request: dict[str, Any]) -> bool:
    """Whether `request` starts, block for block, with the prefix the previous request cached
    through its last breakpoint (`last_mark_key` of it): issue 27's "a fetch reads the previous
    prefix", judged on the prompts alone (no lifetime, no minimum size)."""
    if previous is None:
        return False
    at, want = previous
    key = _seed(request)
    for i, (role, block) in enumerate(_blocks(request)):
        key = _chained(key, role, block)
        if i == at:
            return key == want
    return False


def _unmarked(block: Block) -> Block:
    return {k: v for k, v in block.items() if k != "cache_control"}


class PromptCache:
    """One conversation's provider-side cache: bill its requests in time order."""

    def __init__(
        self, *, ttl_seconds: float = 300.0, lookback_blocks: int = LOOKBACK_BLOCKS, min_tokens: int = 1024
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.lookback_blocks = lookback_blocks
        self.min_tokens = min_tokens
        self._touched: dict[bytes, float] = {}  # prefix key -> time of its last write or read

    def bill(self, request: dict[str, Any], at_seconds: float) -> Billed:
        """Price one request sent at `at_seconds`, then cache its breakpoints' prefixes.

        Raises ValueError for more than 4 breakpoints: the provider refuses such a request.
        """
        if (n := breakpoints(request)) > MAX_BREAKPOINTS:
            raise ValueError(f"{n} cache_control breakpoints; the provider allows {MAX_BREAKPOINTS}")
        self._touched = {k: t for k, t in self._touched.items() if at_seconds - t <= self.ttl_seconds}
        bounds, request_tokens = _boundaries(request)
        marks = [i for i, b in enumerate(bounds) if b.marked]
        if not marks:
            return Billed(uncached_tokens=request_tokens)

        hit = max(
            (
                j
                for i in marks
                for j in range(max(0, i - self.lookback_blocks), i + 1)
                if bounds[j].key in self._touched
            ),
            default=None,
        )
        read = bounds[hit].tokens if hit is not None else 0
        last = bounds[marks[-1]].tokens
        write = max(0, last - read) if last >= self.min_tokens else 0
        if hit is not None:
            self._touched[bounds[hit].key] = at_seconds
        for i in marks:
            if bounds[i].tokens >= self.min_tokens:
                self._touched[bounds[i].key] = at_seconds
        return Billed(read, write, request_tokens - read - write)
