"""Fingerprints of the client's own messages, chained: how a request's history is matched with what is stored.

The stored turns are redacted, offloaded and may hold server-side tool rounds the client never saw,
so the client's history is not compared with them. Instead each proxied append records the keyed
chain hash of the client's messages it covered; a request's history extends the session exactly
when its chain at that length is the recorded one. One sha256 pass over the history per request,
no redaction of it: the cost follows the bytes, not the secret scanner.

The chain is keyed (the deployment's redaction key): a recorded value says nothing about content.

A user message is always the client's own, serialized by the client the same way every time: it is
hashed as sent, only cache_control taken out (clients move their breakpoints). An assistant message
may be compactd's reassembly of a streamed reply, which the client sends back in its own
serialization (string or block content, nulls, extra fields): it is hashed normalized.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import orjson

from worker.redaction.redact import is_reasoning_item

# fields that identify a block's meaning; anything else (cache_control, citations, SDK-added
# nulls) may change between the message compactd streamed and the copy the client sends back
_FIELDS = {
    "text": ("text",),
    "tool_use": ("id", "name", "input"),
    "server_tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id", "content", "is_error"),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
}


def normalize_block(block: Any) -> Any:
    """The block's meaning as plain data: identifying fields only, no cache_control, no nulls."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    items = (
        ((k, block.get(k)) for k in fields)
        if fields
        else ((k, v) for k, v in block.items() if k != "cache_control")
    )
    out: dict[str, Any] = {"type": kind}
    for k, v in items:
        if v is None or (k == "is_error" and v is False):
            continue
        if k == "content":
            v = normalize_content(v)
        out[k] = v
    return out


def normalize_content(content: Any) -> Any:
    """String content as one text block; empty text blocks and OpenAI reasoning items dropped (many
    Responses clients send back only the text of a reply, and the session keeps the item from the
    reply itself: it is what the upstream produced); each block normalized."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return content
    return [
        normalize_block(b)
        for b in content
        if not (isinstance(b, dict) and b.get("type") == "text" and not b.get("text"))
        and not is_reasoning_item(b)
    ]


def normalize_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    return {"role": message.get("role"), "content": normalize_content(message.get("content"))}


def seed(key: bytes) -> bytes:
    """The chain's value before any message: keyed, so no recorded value can be recomputed without the key."""
    return hmac.new(key, b"compactd.proxy.chain.v1", hashlib.sha256).digest()


_MARK = b'"cache_control"'


def message_bytes(message: Any) -> bytes:
    """The bytes a message is fingerprinted by (see the module docstring)."""
    if isinstance(message, dict) and message.get("role") == "user":
        data = orjson.dumps(message)
        if _MARK not in data:
            return data
        return orjson.dumps({**message, "content": _unmarked(message.get("content"))})
    return orjson.dumps(normalize_message(message), option=orjson.OPT_SORT_KEYS)


def _unmarked(content: Any) -> Any:
    """The content with every cache_control key taken out, nothing else changed (key order kept)."""
    if not isinstance(content, list):
        return content
    out = []
    for block in content:
        if isinstance(block, dict):
            block = {
                k: _unmarked(v) if k == "content" else v for k, v in block.items() if k != "cache_control"
            }
        out.append(block)
    return out


def extend(chain: bytes, message: Any) -> bytes:
    """The chain after one more message."""
    return hashlib.sha256(chain + message_bytes(message)).digest()


def chains(key: bytes, messages: Sequence[Any]) -> list[str]:
    """The chain (hex) after 0, 1, ... len(messages) messages."""
    value = seed(key)
    out = [value.hex()]
    for m in messages:
        value = extend(value, m)
        out.append(value.hex())
    return out


class ChainMemo:
    """The chains of each conversation's last request, and a running digest of its messages as
    sent at its last `TAIL` lengths: the next request of a conversation hashes only the messages
    past the longest of those lengths whose running digest it shares (usually the reply and the new
    user turn, plus the turns whose cache_control moved), not its whole history.

    Exact: the running digest after k messages is one sha256 over the first k as a JSON array
    serialized (orjson, key order kept) without its brackets; equal digests mean byte-identical
    prefixes (one array's text parses one way), so the chain up to there is the one computed then.
    A request that shares none of the last TAIL lengths (an edit deeper in the history, another
    conversation) is computed in full.
    One sha256 stream over the history instead of a sha256 per message (1,971 messages, 625 KB:
    ~1 ms CPU instead of ~2.3). Only digests are kept, never a message's text; bounded, least
    recently used first out; in-process (each API process has its own, a miss only costs the full
    computation).
    """

    TAIL = 32

    def __init__(self, key: bytes, size: int = 64) -> None:
        self._seed = seed(key).hex()
        self._size = size
        self._entries: OrderedDict[Hashable, tuple[dict[int, bytes], list[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def chains(self, conversation: Hashable, messages: Sequence[Any]) -> list[str]:
        """chains(key, messages), reusing the conversation's last request's prefix where it is the same."""
        n = len(messages)
        with self._lock:
            entry = self._entries.get(conversation)
        seen, seen_chains = entry if entry is not None else ({}, [self._seed])
        marks: dict[int, bytes] = {}  # running digest after k messages, for the last TAIL k
        same = 0
        running = hashlib.sha256()
        first_mark = max(1, n - self.TAIL)
        hashed = 0  # messages fed to `running`
        for k in [*sorted(k for k in seen if k < first_mark), *range(first_mark, n + 1)]:
            # messages hashed..k as their JSON array serialized, without its brackets: the bulk
            # of the history in one orjson call (a call a message cost ~0.3 ms more at 150k)
            if hashed:
                running.update(b",")
            running.update(orjson.dumps(messages[hashed:k])[1:-1])
            hashed = k
            digest = running.digest()
            if seen.get(k) == digest:
                same = k
            if k >= first_mark:
                marks[k] = digest
        out = seen_chains[: same + 1]
        value = bytes.fromhex(out[-1])
        for m in messages[same:]:
            value = extend(value, m)
            out.append(value.hex())
        with self._lock:
            self._entries[conversation] = (marks, out)
            self._entries.move_to_end(conversation)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return list(out)


def extend_hex(chain_hex: str, message: Any) -> str:
    return extend(bytes.fromhex(chain_hex), message).hex()


def keyed_digest(key: bytes, text: str) -> str:
    """A keyed hash of identifying text (a conversation's start), safe to use in a session id."""
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
