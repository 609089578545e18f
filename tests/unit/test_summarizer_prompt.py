"""Table tests for the Anthropic summarizer's pure parts: prompt, archive naming, backoff, retry policy, prices."""

from __future__ import annotations

import pytest

from worker.compaction.ports import SummaryRequest, SummaryResult
from worker.summarizers import (
    SECTIONS,
    SYSTEM_PROMPT,
    Backoff,
    build_prompt,
    cost_usd,
    is_retryable,
    name_archive,
    prices_per_mtok,
    retry_after_seconds,
)

REF = "archive/3f9a1c02.jsonl"


def request(**overrides: object) -> SummaryRequest:
    fields: dict[str, object] = {
        "span_text": "user: run the tests",
        "previous_note": None,
        "focus": None,
        "archive_ref": REF,
        "max_tokens": 900,
    }
    return SummaryRequest(**{**fields, **overrides})  # type: ignore[arg-type]


def test_system_prompt_lists_every_section_in_order() -> None:
    """The system prompt asks for each section as a '## ' heading, in the documented order."""
    positions = [SYSTEM_PROMPT.index(f"## {heading} - ") for heading, _ in SECTIONS]
    assert positions == sorted(positions)
    assert [h for h, _ in SECTIONS] == [
        "Task",
        "User instructions",
        "Files",
        "Commands run",
        "Errors and fixes",
        "Decisions",
        "Open questions",
        "Next planned action",
    ]


def test_prompt_carries_span_archive_and_budget() -> None:
    """The user message holds the span, names the archive and states the token budget."""
    prompt = build_prompt(request())
    assert "<conversation>\nuser: run the tests\n</conversation>" in prompt
    assert REF in prompt
    assert "900 tokens" in prompt


@pytest.mark.parametrize(
    ("overrides", "present", "absent"),
    [
        ({}, [], ["<previous_note>", "<focus>"]),
        (
            {"previous_note": "## Task\nship v2"},
            ["<previous_note>\n## Task\nship v2\n</previous_note>"],
            ["<focus>"],
        ),
        (
            {"focus": "the database migration"},
            ["<focus>\nthe database migration\n</focus>"],
            ["<previous_note>"],
        ),
    ],
)
def test_prompt_includes_previous_note_and_focus_only_when_given(
    overrides: dict[str, object], present: list[str], absent: list[str]
) -> None:
    """The previous note and the focus appear in their own tags when given, and not at all otherwise."""
    prompt = build_prompt(request(**overrides))
    assert all(p in prompt for p in present)
    assert not any(a in prompt for a in absent)


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        (f"## Task\nx\n(archive: {REF})", f"## Task\nx\n(archive: {REF})"),
        ("## Task\nx\n", f"## Task\nx\n\nThe summarized turns are archived verbatim in: {REF}"),
    ],
)
def test_name_archive_appends_the_ref_only_when_missing(note: str, expected: str) -> None:
    """A note that already names the archive is unchanged; otherwise a line naming it is appended."""
    assert name_archive(note, REF) == expected


@pytest.mark.parametrize(
    ("attempt", "retry_after", "jitter", "expected"),
    [
        (0, None, 0.0, 0.25),
        (0, None, 0.999, 0.49975),
        (2, None, 0.0, 1.0),
        (10, None, 1.0, 8.0),  # capped at max_seconds
        (0, 3.0, 0.5, 3.0),  # the server's wait wins
        (0, 120.0, 0.5, 30.0),  # ... up to max_retry_after_seconds
        (0, -5.0, 0.5, 0.0),  # a date in the past means now
    ],
)
def test_backoff_delay(attempt: int, retry_after: float | None, jitter: float, expected: float) -> None:
    """Delays double per attempt with jitter in the upper half, capped; retry-after wins, bounded."""
    assert Backoff().delay_seconds(attempt, retry_after, jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "7"}, 0.25),
        ({"retry-after": "Thu, 01 Jan 1970 00:01:40 GMT"}, 60.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "x"}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    """retry-after-ms wins over retry-after, which may be seconds or an HTTP date; junk is ignored."""
    assert retry_after_seconds(headers, now=40.0) == expected


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (400, {}, False),
        (401, {}, False),
        (403, {}, False),
        (404, {}, False),
        (408, {}, True),
        (429, {}, True),
        (500, {}, True),
        (503, {}, True),
        (529, {}, True),
        (500, {"x-should-retry": "false"}, False),
        (400, {"x-should-retry": "true"}, True),
    ],
)
def test_is_retryable(status: int, headers: dict[str, str], expected: bool) -> None:
    """Rate limits, timeouts and 5xx are retried, client errors are not, and x-should-retry overrides."""
    assert is_retryable(status, headers) is expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-haiku-4-5", (1.0, 5.0)),
        ("claude-haiku-4-5-20251001", (1.0, 5.0)),
        ("claude-opus-4-1-20250805", (15.0, 75.0)),
        ("claude-opus-4-5", (5.0, 25.0)),
        ("extractive", (0.0, 0.0)),
        ("claude-haiku-4-50", None),
        ("gpt-4o", None),
    ],
)
def test_prices_per_mtok(model: str, expected: tuple[float, float] | None) -> None:
    """Known models and their dated ids are priced (longest prefix wins); others are unknown."""
    assert prices_per_mtok(model) == expected


@pytest.mark.parametrize(
    ("result", "prices", "expected"),
    [
        (SummaryResult("n", 1_000_000, 200_000, "claude-haiku-4-5"), (), 2.0),
        (SummaryResult("n", 1_000, 100, "claude-haiku-4-5"), (3.0, 15.0), 0.0045),
        (SummaryResult("n", 1_000, 100, "some-new-model"), (), None),
        (SummaryResult("n", 1_000, 100, "some-new-model"), (2.0, 10.0), 0.003),
        (SummaryResult("note"), (), 0.0),
    ],
)
def test_cost_usd(result: SummaryResult, prices: tuple[float, ...], expected: float | None) -> None:
    """Cost is tokens times price per million: given prices win, else the table's; unknown is None."""
    assert cost_usd(result, *prices) == (pytest.approx(expected) if expected is not None else None)
