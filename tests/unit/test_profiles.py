"""Model profiles: lookup by name prefix and per-session overrides."""

import pytest

from worker.compaction.profiles import DEFAULT, profile_for


@pytest.mark.parametrize(
    ("model", "window", "expected_window"),
    [
        ("claude-sonnet-4-5-20250929", None, 200_000),
        ("gpt-4o-mini", None, 128_000),
        ("some-unknown-model", None, DEFAULT.context_window),
        (None, None, DEFAULT.context_window),
        ("gpt-4o", 32_000, 32_000),
    ],
)
def test_profile_lookup_and_override(model: str | None, window: int | None, expected_window: int) -> None:
    """Known prefixes map to their window; an explicit window always wins."""
    assert profile_for(model, window).context_window == expected_window


def test_output_reserve_is_capped_for_small_windows() -> None:
    """A small override window keeps at least three quarters of itself as budget."""
    assert profile_for("claude-sonnet-4", 32_000).output_reserve == 8_000
