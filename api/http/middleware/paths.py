"""Which /v1 paths the compactd middlewares guard (bearer key, JSON body, problem+json answers)."""

from __future__ import annotations

# the Anthropic-compatible endpoint authenticates and answers errors itself, in the Anthropic shape
ANTHROPIC_PATHS = ("/v1/messages",)


def compactd_api(path: str) -> bool:
    """A /v1 path answered with problem+json (every one but the Anthropic-compatible endpoint)."""
    return path.startswith("/v1/") and not path.startswith(ANTHROPIC_PATHS)
