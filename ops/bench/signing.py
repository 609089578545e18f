"""The model's side of a bench replay with preserved thinking (ops.bench.thinking, ops.bench.policy
--thinking): a signed thinking block on every assistant turn, every request checked as the
provider checks it (tests/fakes/preserved_thinking.py)."""

from __future__ import annotations

from typing import Any

from tests.fakes.preserved_thinking import THINKING, Binder


class SignedThinking:
    """A model with preserved thinking, for a replay: answers, signs, checks (one per replay)."""

    def __init__(self) -> None:
        self.binder = Binder(b"bench")
        self.epoch_of: dict[str, str] = {}  # signature -> the epoch (or fallback) it was produced in

    def answer(self, request: dict[str, Any], message: dict[str, Any], epoch: str) -> dict[str, Any]:
        """The transcript's assistant message, its own thinking replaced by one signed block."""
        content = (
            message["content"]
            if isinstance(message["content"], list)
            else [{"type": "text", "text": message["content"]}]
        )
        own = [b for b in content if b.get("type") in THINKING]
        text = str(own[0].get("thinking", "")) if own else ""
        block = self.binder.block(request, text or "Reading the last result before the next step.")
        self.epoch_of[block["signature"]] = epoch
        return {**message, "content": [block, *(b for b in content if b.get("type") not in THINKING)]}

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
