"""When a proxied reply is recorded: at once, or after a short grace unless the conversation's next
request stores it first.

An agent usually asks again soon after a reply (its tool ran): that request carries the reply in its
history, so its own append stores it. Recording the reply beside it would only compete with that
request for the process's CPU (and the GIL) before its first byte, to write what it writes anyway
(it would lose the race and be dropped as stale). A reply the next request cannot stand in for is
recorded at once: one with server-side rounds of compactd's tools (the client never saw them) or
with thinking blocks (recorded with their signatures as the upstream sent them, whatever the client
keeps of them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import anyio

THINKING = frozenset({"thinking", "redacted_thinking"})


def may_wait(stored: list[dict[str, Any]], client_message: dict[str, Any]) -> bool:
    """Whether the client's next request can store this reply for compactd: the session would store
    exactly the message the client received, and it holds no thinking block."""
    return stored == [client_message] and not any(
        isinstance(b, dict) and b.get("type") in THINKING for b in client_message["content"]
    )


class ReplyGrace:
    """Per API process: the replies waiting out their grace, by conversation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._waiting: dict[Hashable, set[asyncio.Event]] = {}

    async def superseded(self, conversation: Hashable) -> bool:
        """Wait out the grace; True when a request of the same conversation was reconciled meanwhile
        (it stored the reply, or its history left it out: either way it is not to be recorded)."""
        if self.seconds <= 0:
            return False
        event = asyncio.Event()
        self._waiting.setdefault(conversation, set()).add(event)
        try:
            with anyio.move_on_after(self.seconds):
                await event.wait()
        finally:
            waiting = self._waiting.get(conversation)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[conversation]
        return event.is_set()

    def supersede(self, conversation: Hashable) -> None:
        """A request of this conversation is stored: the replies waiting for it are not recorded."""
        for event in self._waiting.pop(conversation, ()):
            event.set()
