"""The model's side of a bench replay with preserved thinking (ops.bench.thinking, ops.bench.policy
--thinking): a signed thinking block on every assistant turn, every request checked as the
provider checks it (tests/fakes/preserved_thinking.py)."""

from __future__ import annotations

from typing import Any

from tests.fakes.preserved_thinking import THINKING, Binder

# about the length of a signature Binder makes (what a placeholder stands in for)
SIGNATURE_CHARS = 125


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def thinking_text(message: dict[str, Any]) -> str:
    """The message's own thinking text, or a line standing for a model's hidden thinking."""
    own = [b for b in _content(message) if b.get("type") in THINKING]
    return str(own[0].get("thinking", "")) if own else "Reading the last result before the next step."


def without_thinking(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in _content(message) if b.get("type") not in THINKING]


class SignedThinking:
    """A model with preserved thinking, for a replay: answers, signs, checks (one per replay)."""

    def __init__(self) -> None:
        self.binder = Binder(b"bench")
        self.epoch_of: dict[str, str] = {}  # signature -> the epoch (or fallback) it was produced in

    def answer(self, request: dict[str, Any], message: dict[str, Any], epoch: str) -> dict[str, Any]:
        """The transcript's assistant message, its own thinking replaced by one signed block."""
        block = self.binder.block(request, thinking_text(message))
        self.epoch_of[block["signature"]] = epoch
        return {**message, "content": [block, *without_thinking(message)]}

    @staticmethod
    def unsigned(message: dict[str, Any]) -> dict[str, Any]:
        """The message as `answer` makes it, its signature a placeholder of a signature's length
        (for an engine that takes no thinking model: the same tokens, no check)."""
        block = {"type": "thinking", "thinking": thinking_text(message), "signature": "s" * SIGNATURE_CHARS}
        return {**message, "content": [block, *without_thinking(message)]}

    def observe(self, request: dict[str, Any], epoch: str) -> tuple[bool, int, int]:
        """Whether every block passes; how many blocks this epoch produced so far, and how many of
        them this request serves on their own prefix."""
        checked = self.binder.check(request)
        due = {s for s, e in self.epoch_of.items() if e == epoch}
        invalid = set(checked.invalid)
        kept = 0
        for i, m in enumerate(request["messages"]):
            for j, b in enumerate(m["content"] if isinstance(m["content"], list) else []):
                if b.get("type") in THINKING and b.get("signature") in due and (i, j) not in invalid:
                    kept += 1
        return checked.valid, len(due), kept
