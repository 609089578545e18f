"""Size limits inside a request the body limit lets through: one turn of an append (HTTP and task alike)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from worker.errors import TurnTooLarge


def turn_bytes(message: dict[str, Any]) -> int:
    """A message's size as compact JSON: what it costs to store, whatever the client's spacing."""
    try:
        return len(orjson.dumps(message))
    except orjson.JSONEncodeError:
        # what orjson refuses (integers past 64 bits, lone surrogates) the stdlib writes, escaped;
        # the message is refused later for what it holds, not here for its size
        return len(json.dumps(message, separators=(",", ":")))


def check_turn_sizes(messages: Sequence[dict[str, Any]], max_turn_bytes: int) -> None:
    """TurnTooLarge (a 413 over HTTP) naming the first message over the limit (its index in `messages`) and the limit itself."""
    for index, message in enumerate(messages):
        size = turn_bytes(message)
        if size > max_turn_bytes:
            raise TurnTooLarge(
                f"messages[{index}] is {size:,} bytes as JSON; the per-turn limit is {max_turn_bytes:,} bytes"
                " (COMPACTD_MAX_TURN_BYTES): offload or split the content",
                index=index,
                turn_bytes=size,
                max_turn_bytes=max_turn_bytes,
            )
