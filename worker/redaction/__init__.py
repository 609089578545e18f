"""Secret redaction: every secret becomes a typed, keyed placeholder before anything is persisted.

The whole surface is `Redactor(key)`:

    redact_text(text)     "[REDACTED:<kind>:<8 hex>]" per secret
    redact_value(value)   any JSON value (tool_use input, memory value): every string leaf
    redact_block(block)   an Anthropic content block
    findings(text)        [Finding(kind, start, end)], for tests and the bench

Inside, two passes (scanner.py) find secrets: our own detectors and Kingfisher's maintained rule
catalog (kingfisher.py). Our detectors are one RE2 pattern per format, confirmed by a judge:

    rules.py       Detector, the Judge contract, strip_quotes
    detectors.py   DETECTORS, the ordered table (keyword assignments, constructors, prose)
    vendors.py     vendor token formats, key blocks, JWTs, hashes: secrets by their looks
    positions.py   credential positions (URL passwords, Authorization, `curl -u`, `--password`,
                   connection strings, properties): structure before looks, and `is_reference`
    judges.py      judges for looks: vendor tokens and keyword assignments
    keywords.py    what a key name says about its value
    manifests.py   Kubernetes Secret manifests
    configs/       credential positions in config files, by each format's structure (issue 25)

TUNING.md records which sample families each change was tuned on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.redaction.redact import THINKING_REMOVED, Finding, Redactor

__all__ = ["THINKING_REMOVED", "Finding", "Redactor"]


def __getattr__(name: str) -> Any:
    """The detectors (hundreds of compiled patterns) load on first use: `from worker.redaction
    import kingfisher` (Settings, so every process and `compactd --help`) does not pay for them."""
    if name in __all__:
        from worker.redaction import redact

        return getattr(redact, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
