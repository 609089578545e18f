"""The Messages API's preserved-thinking rules, played by the stand-ins (and the thinking bench).

Models with preserved thinking (Fable 5.1+, Mythos 5.x, Opus/Sonnet/Haiku 5.5) bind each thinking
block they produce to its prefix: the top-level `system`, the `tools` and every message before the
block (platform.claude.com, "Preserved thinking", "Prefix checks on thinking blocks"). A request
that sends a block back on a changed prefix is refused with a 400 naming the block, or, with
`thinking.block_binding.prefix_mismatch_behavior: "drop_block"`, the block and every later one are
dropped and listed in `input_transformations`. What is compared, as documented:

- the values of `system`, `tools` and the earlier messages; JSON formatting and key order do not
  count, `cache_control` markers do not count, request parameters outside those three do not count;
- thinking blocks are not part of a later block's prefix: each block records the thinking block
  before it instead, so blocks may be removed from the start of the history, from its end, or all
  of them, but a gap (a block left out between kept ones) invalidates every block after it;
- a signature that was not minted here (tampered, or made up) is refused whatever the setting.

String content and a single text block are taken as the same value: Claude Code sends its
environment `role: "system"` message as blocks on a conversation's first request and as a string
after, and runs append-only against the real API (docs/claude-code.md).

This is an independent implementation of the documented rule (no compactd code), so a green test
against it says compactd keeps the rule, not that compactd agrees with itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

THINKING = ("thinking", "redacted_thinking")
BINDING_BETA = "thinking-binding-controls-2026-08-01"


def _plain(value: Any) -> Any:
    """A value with every cache_control removed and string content as one text block."""
    if isinstance(value, dict):
        out = {k: _plain(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(out.get("content"), str) and "role" in out:
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _without_thinking(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING)]


def prefix_digest(body: Mapping[str, Any], i: int, j: int) -> str:
    """The digest of what block j of message i is bound to: system, tools, the messages before
    it and the blocks before it in its own message, thinking blocks left out."""
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    messages = [
        {**_plain(m), "content": _without_thinking(_plain(m).get("content"))}
        for m in list(body.get("messages") or [])[:i]
        if isinstance(m, dict)
    ]
    here = body["messages"][i] if i < len(body.get("messages") or []) else {}
    own = _plain(here.get("content")) if isinstance(here, dict) else []
    before = _without_thinking(own[:j]) if isinstance(own, list) else []
    value = {
        "system": _plain(system or []),
        "tools": _plain(body.get("tools") or []),
        "messages": messages,
        "open": {"role": here.get("role") if isinstance(here, dict) else None, "content": before},
    }
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Problem:
    """The first block that fails, and why."""

    path: str  # messages.i.content.j
    kind: str  # "prefix" (bound to a different conversation) or "signature" (not minted here)
    detail: str


@dataclass(frozen=True, slots=True)
class Checked:
    """Every thinking block of a request and what the API makes of them."""

    blocks: tuple[tuple[int, int], ...]  # (message, block) of every thinking block, in order
    invalid: tuple[tuple[int, int], ...]  # those that fail (the first failure and every later one)
    problem: Problem | None

    @property
    def valid(self) -> bool:
        return self.problem is None


@dataclass
class Binder:
    """Signs the thinking blocks a stand-in produces and checks the ones a request sends back."""

    secret: bytes = b"stand-in"
    signed: int = 0  # blocks signed so far (each gets an id of its own)

    def sign(self, body: Mapping[str, Any], reply_blocks_before: Sequence[Mapping[str, Any]] = ()) -> str:
        """The signature of a thinking block produced in answer to `body`, after
        `reply_blocks_before` in the same reply message."""
        n = len(body.get("messages") or [])
        answer = {
            **body,
            "messages": [
                *list(body.get("messages") or []),
                {"role": "assistant", "content": list(reply_blocks_before)},
            ],
        }
        digest = prefix_digest(answer, n, len(reply_blocks_before))
        previous = self._last_id(answer["messages"])
        block_id = hashlib.sha256(f"{digest}:{previous}:{self.signed}".encode()).hexdigest()[:24]
        self.signed += 1
        payload = base64.urlsafe_b64encode(json.dumps([block_id, digest, previous]).encode()).decode()
        mac = hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{payload}.{mac}"

    def block(
        self, body: Mapping[str, Any], text: str = "", before: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        """A signed thinking block answering `body` (its text may be empty, as with display "omitted")."""
        return {"type": "thinking", "thinking": text, "signature": self.sign(body, before)}

    def _decode(self, signature: Any) -> tuple[str, str, str] | None:
        if not isinstance(signature, str) or "." not in signature:
            return None
        payload, mac = signature.rsplit(".", 1)
        if not hmac.compare_digest(
            mac, hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()[:32]
        ):
            return None
        try:
            block_id, digest, previous = json.loads(base64.urlsafe_b64decode(payload.encode()))
        except ValueError:
            return None
        return str(block_id), str(digest), str(previous)

    def _last_id(self, messages: Sequence[Any]) -> str:
        for m in reversed(messages):
            content = m.get("content") if isinstance(m, dict) else None
            for b in reversed(content if isinstance(content, list) else []):
                if isinstance(b, dict) and b.get("type") in THINKING:
                    decoded = self._decode(b.get("signature") or b.get("data"))
                    return decoded[0] if decoded else "?"
        return ""

    def check(self, body: Mapping[str, Any]) -> Checked:
        """Every thinking block of `body` against its binding: the first that fails and every later
        one are invalid (a redacted_thinking block carries its signature in `data`)."""
        found: list[tuple[int, int]] = []
        problem: Problem | None = None
        previous: str | None = None  # the id of the thinking block before, in this request
        invalid_from: int | None = None
        for i, m in enumerate(body.get("messages") or []):
            content = m.get("content") if isinstance(m, dict) else None
            for j, b in enumerate(content if isinstance(content, list) else []):
                if not (isinstance(b, dict) and b.get("type") in THINKING):
                    continue
                found.append((i, j))
                if problem is not None:
                    continue
                decoded = self._decode(b.get("signature") or b.get("data"))
                path = f"messages.{i}.content.{j}"
                if decoded is None:
                    problem, invalid_from = (
                        Problem(path, "signature", "not a signature this API minted"),
                        len(found) - 1,
                    )
                    continue
                block_id, digest, recorded_previous = decoded
                if prefix_digest(body, i, j) != digest:
                    problem = Problem(
                        path, "prefix", "Content before this block differs from when it was created."
                    )
                elif previous is not None and recorded_previous != previous:
                    problem = Problem(
                        path,
                        "prefix",
                        "A thinking block that preceded this block is missing from this request.",
                    )
                if problem is not None:
                    invalid_from = len(found) - 1
                previous = block_id
        invalid = tuple(found[invalid_from:]) if invalid_from is not None else ()
        return Checked(tuple(found), invalid, problem)


def drop_mode(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """ "drop_block" or "error" when the request sets `prefix_mismatch_behavior` (with the beta
    header), None when it leaves it unset (the check is enforced: an account created after
    2026-08-31); a ValueError with the API's message when the field comes without the header."""
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    if binding is None:
        return None
    betas = {b.strip() for b in str(headers.get("anthropic-beta", "")).split(",")}
    if BINDING_BETA not in betas:
        raise ValueError("thinking.block_binding: Extra inputs are not permitted")
    behaviour = binding.get("prefix_mismatch_behavior") if isinstance(binding, dict) else None
    return str(behaviour) if behaviour in ("error", "drop_block") else "error"


def refusal(checked: Checked, headers: Mapping[str, str]) -> dict[str, Any]:
    """The 400 body the API answers a failing block with (errors page, "Prefix checks")."""
    problem = checked.problem
    assert problem is not None
    if problem.kind == "signature":
        message = f"{problem.path}: Invalid `signature` in `thinking` block."
    else:
        message = (
            f"{problem.path}: Invalid `signature` in `thinking` block. The block is bound to a different"
            " conversation. Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to"
            ' "drop_block".'
        )
        betas = {b.strip() for b in str(headers.get("anthropic-beta", "")).split(",")}
        if BINDING_BETA not in betas:
            message += f" That setting requires the `{BINDING_BETA}` value in the `anthropic-beta` header."
        message += f" {problem.detail}"
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def dropped(body: dict[str, Any], checked: Checked) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`body` with the invalid blocks dropped, and the `input_transformations` entries that say so."""
    invalid = set(checked.invalid)
    messages = []
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content")
        if isinstance(content, list) and any((i, j) in invalid for j in range(len(content))):
            m = {**m, "content": [b for j, b in enumerate(content) if (i, j) not in invalid]}
        messages.append(m)
    entries = [
        {"type": "thinking_dropped", "path": f"messages.{i}.content.{j}", "reason": "prefix_binding_mismatch"}
        for i, j in checked.invalid
    ]
    return {**body, "messages": messages}, entries
