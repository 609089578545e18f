"""Secret redaction: every secret becomes a typed, keyed placeholder before anything is persisted.

The whole surface is `Redactor(key)`:

    redact_text(text)     "[REDACTED:<kind>:<8 hex>]" per secret
    redact_value(value)   any JSON value (tool_use input, memory value): every string leaf
    redact_block(block)   an Anthropic content block
    findings(text)        [Finding(kind, start, end)], for tests and the bench

Inside, two passes find secrets: our own detectors (detectors.py: one RE2 pattern per format,
confirmed by a judge in judges.py; keywords.py for key names) and Kingfisher's maintained rule
catalog (kingfisher.py). TUNING.md records which sample families each change was tuned on.
"""

from worker.redaction.redact import THINKING_REMOVED, Finding, Redactor

__all__ = ["THINKING_REMOVED", "Finding", "Redactor"]
