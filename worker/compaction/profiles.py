"""Model profiles: context windows and output reserves of known models, overridable per session."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelProfile:
    context_window: int
    output_reserve: int


DEFAULT = ModelProfile(context_window=200_000, output_reserve=8_192)

# Longest prefix wins: "claude-sonnet-4-5-20250929" matches "claude-sonnet-4-5".
KNOWN: dict[str, ModelProfile] = {
    "claude-opus-4": ModelProfile(200_000, 32_000),
    "claude-sonnet-4": ModelProfile(200_000, 64_000),
    "claude-haiku-4": ModelProfile(200_000, 64_000),
    "claude-3-7-sonnet": ModelProfile(200_000, 64_000),
    "claude-3-5-sonnet": ModelProfile(200_000, 8_192),
    "claude-3-5-haiku": ModelProfile(200_000, 8_192),
    "claude-3-opus": ModelProfile(200_000, 4_096),
    "claude-3-haiku": ModelProfile(200_000, 4_096),
    # OpenAI's models (platform.openai.com model pages): the window, and the most a reply may take.
    # The GPT-5 family's 400k window holds at most 272k of input whatever the reply takes: the
    # window compactd budgets against is that input limit plus the default reserve
    "gpt-4o": ModelProfile(128_000, 16_384),
    "gpt-4.1": ModelProfile(1_047_576, 32_768),
    "gpt-5": ModelProfile(272_000 + 8_192, 8_192),
    "gpt-oss": ModelProfile(131_072, 8_192),
    "codex-mini": ModelProfile(200_000, 100_000),
    "o1": ModelProfile(200_000, 100_000),
    "o3": ModelProfile(200_000, 100_000),
    "o4-mini": ModelProfile(200_000, 100_000),
}


def profile_for(
    model: str | None, context_window: int | None = None, output_reserve: int | None = None
) -> ModelProfile:
    """The profile of a model name (unknown names get the default), with explicit overrides applied.

    The output reserve is capped at a quarter of the window so a small window still has a budget.
    """
    base = known_profile(model) or DEFAULT
    window = context_window or base.context_window
    reserve = output_reserve if output_reserve is not None else base.output_reserve
    return ModelProfile(window, min(reserve, window // 4))


def known_profile(model: str | None) -> ModelProfile | None:
    """The profile of a known model name (the longest matching prefix), or None."""
    matches = [k for k in KNOWN if model and model.startswith(k)]
    return KNOWN[max(matches, key=len)] if matches else None
