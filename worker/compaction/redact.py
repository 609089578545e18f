"""Redaction (placeholder implementation; the full detector set replaces this module).

Interface other modules rely on:
    Redactor(key: bytes)
    .redact_text(text) -> str            typed keyed placeholders [REDACTED:<kind>:<8 hex>]
    .redact_block(block) -> Block        walks text, tool_use input, tool_result content
    .redact_value(value) -> Any          walks any JSON value (strings redacted, keys kept)
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from worker.compaction.model import Block

_PATTERNS = [
    ("anthropic_api_key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b")),
]


@dataclass(frozen=True, slots=True)
class Redactor:
    key: bytes

    def placeholder(self, kind: str, secret: str) -> str:
        digest = hmac.new(self.key, secret.encode(), hashlib.sha256).hexdigest()[:8]
        return f"[REDACTED:{kind}:{digest}]"

    def redact_text(self, text: str) -> str:
        for kind, pattern in _PATTERNS:
            text = pattern.sub(lambda m, k=kind: self.placeholder(k, m.group(0)), text)
        return text

    def redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.redact_value(v) for k, v in value.items()}
        return value

    def redact_block(self, block: Block) -> Block:
        kind = block.get("type")
        if kind == "text":
            return {**block, "text": self.redact_text(block["text"])}
        if kind == "tool_use":
            return {**block, "input": self.redact_value(block.get("input", {}))}
        if kind == "tool_result":
            content = block.get("content", "")
            if isinstance(content, str):
                return {**block, "content": self.redact_text(content)}
            return {**block, "content": [self.redact_block(p) for p in content]}
        if kind == "thinking":
            # thinking blocks are signed: editing them invalidates the signature; see module notes
            return block
        return block
