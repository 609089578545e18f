"""The Anthropic summarizer, through the real `anthropic` SDK, against a local fake of the Messages API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.messages_api import FakeMessagesAPI, Reply, drop, error, hang, malformed, reply
from worker.compaction.model import Policy, Transcript
from worker.compaction.pipeline import compact
from worker.compaction.ports import SummarizerError, SummaryRequest
from worker.ingest import ingest
from worker.redaction import Redactor
from worker.settings import Settings
from worker.summarizers import (
    SECTIONS,
    AnthropicSummarizer,
    Backoff,
    SummarizerConfigError,
    SummarizerTransientError,
    build_summarizer,
    cost_usd,
)

MODEL = "claude-haiku-4-5"
REF = "archive/5d41402abc4b2a76.jsonl"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
ANTHROPIC_KEY = "sk-ant-api03-" + "Zx9" * 12 + "-AbCdEf"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 4
SECRETS = (AWS_KEY, ANTHROPIC_KEY, GITHUB_TOKEN)
TINY = Backoff(base_seconds=0.001, max_seconds=0.004, max_retry_after_seconds=0.05)

SPAN = (
    "user: the deploy script fails, fix it and do not touch ops/prod.env\n"
    "assistant: call Bash ./deploy.sh --dry-run\n"
    f"result (error): AccessDenied for key {AWS_KEY}\n"
    f"assistant: call Edit deploy.sh (use ANTHROPIC_API_KEY={ANTHROPIC_KEY})\n"
)
NOTE = f"## Task\nFix deploy.sh.\n\n## Next planned action\nRe-run the dry run. Archive: {REF}"


def summary_request(**overrides: object) -> SummaryRequest:
    fields: dict[str, object] = {
        "span_text": SPAN,
        "previous_note": f"## Task\nShip the release (token {GITHUB_TOKEN})",
        "focus": "keep every detail about the deploy credentials error",
        "archive_ref": REF,
        "max_tokens": 1_200,
    }
    return SummaryRequest(**{**fields, **overrides})  # type: ignore[arg-type]


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(default=reply(NOTE)) as server:
        yield server


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(b"test-redaction-key")


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make(
    api: FakeMessagesAPI, redactor: Redactor, sleeps: list[float]
) -> Iterator[Callable[..., AnthropicSummarizer]]:
    """Build summarizers pointed at the fake, with tiny backoff and a short timeout; closed after the test."""
    built: list[AnthropicSummarizer] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    def build(**overrides: object) -> AnthropicSummarizer:
        options: dict[str, object] = {
            "api_key": "sk-ant-test-key-not-a-secret",
            "redactor": redactor,
            "model": MODEL,
            "base_url": api.base_url,
            "timeout_seconds": 0.3,
            "max_retries": 3,
            "backoff": TINY,
            "sleep": sleep,
        }
        summarizer = AnthropicSummarizer(**{**options, **overrides})  # type: ignore[arg-type]
        built.append(summarizer)
        return summarizer

    yield build
    for summarizer in built:
        summarizer.close()


def test_request_carries_model_cap_sections_and_inputs(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """One POST /v1/messages carries the model, the max_tokens cap, the sectioned system prompt, the archive ref, the previous note and the focus."""
    make().summarize(summary_request())

    [sent] = api.requests
    body = sent.body
    assert sent.path == "/v1/messages"
    assert body["model"] == MODEL
    assert body["max_tokens"] == 1_200
    assert all(f"## {heading}" in body["system"] for heading, _ in SECTIONS)
    [message] = body["messages"]
    assert message["role"] == "user"
    assert REF in message["content"]
    assert "## Task\nShip the release" in message["content"]
    assert "keep every detail about the deploy credentials error" in message["content"]
    assert "do not touch ops/prod.env" in message["content"]


def test_planted_secrets_never_reach_the_server(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """Secrets planted in the span, the previous note and the focus are replaced by placeholders before sending."""
    make().summarize(summary_request(focus=f"why was {AWS_KEY} denied?"))

    [sent] = api.requests
    raw = sent.raw.decode()
    assert not [s for s in SECRETS if s in raw]
    assert "[REDACTED:aws_access_key:" in raw
    assert "[REDACTED:anthropic_api_key:" in raw
    assert "[REDACTED:github_token:" in raw


def test_secret_echoed_by_the_model_is_redacted(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer], redactor: Redactor
) -> None:
    """A secret in the model's answer comes back as the same keyed placeholder the rest of compactd uses."""
    api.script(reply(f"{NOTE}\nThe key was {ANTHROPIC_KEY} and {AWS_KEY}."))

    result = make().summarize(summary_request())

    assert not [s for s in SECRETS if s in result.text]
    assert redactor.placeholder("anthropic_api_key", ANTHROPIC_KEY) in result.text
    assert redactor.placeholder("aws_access_key", AWS_KEY) in result.text


def test_note_always_names_the_archive(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """A note that forgot the archive gets a line naming it; one that names it is returned as written."""
    api.script(reply("## Task\nFix deploy.sh."), reply(NOTE))
    summarizer = make()

    forgot = summarizer.summarize(summary_request())
    named = summarizer.summarize(summary_request())

    assert forgot.text.endswith(f"archived verbatim in: {REF}")
    assert named.text == NOTE


def test_usage_tokens_and_cost_are_returned(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """The result carries the API's usage and model, from which the cost is computed."""
    api.script(reply(NOTE, input_tokens=12_000, output_tokens=800))

    result = make().summarize(summary_request())

    assert (result.input_tokens, result.output_tokens, result.model) == (12_000, 800, MODEL)
    assert cost_usd(result) == pytest.approx((12_000 * 1.0 + 800 * 5.0) / 1e6)


@pytest.mark.parametrize(
    "failure",
    [error(429), error(500), error(503), error(529), hang(2.0), drop()],
    ids=["429", "500", "503", "529-overloaded", "timeout", "dropped-connection"],
)
def test_transient_failure_is_retried_then_succeeds(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer], sleeps: list[float], failure: Reply
) -> None:
    """Rate limits, server errors, timeouts and dropped connections are retried, after a backoff, until one succeeds."""
    api.script(failure, failure, reply(NOTE))

    result = make().summarize(summary_request())

    assert result.text == NOTE
    assert len(api.requests) == 3
    assert len(sleeps) == 2
    assert api.bodies[0] == api.bodies[2]


def test_retry_after_is_honoured_within_its_bound(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer], sleeps: list[float]
) -> None:
    """The server's retry-after sets the wait before the next attempt, capped at the configured bound."""
    api.script(error(429, retry_after=0.02), error(529, retry_after=600), reply(NOTE))

    make().summarize(summary_request())

    assert sleeps == [pytest.approx(0.02), pytest.approx(0.05)]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer], status: int
) -> None:
    """A 400/401/403/404 raises SummarizerError (not the transient kind) after exactly one request."""
    api.script(error(status))

    with pytest.raises(SummarizerError) as caught:
        make().summarize(summary_request())

    assert not isinstance(caught.value, SummarizerTransientError)
    assert str(status) in str(caught.value)
    assert len(api.requests) == 1


def test_exhausted_retries_raise_transient_error(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer], sleeps: list[float]
) -> None:
    """When every attempt fails transiently the summarizer raises SummarizerTransientError, without echoing the request."""
    api.default = error(529)

    with pytest.raises(SummarizerTransientError, match="529") as caught:
        make(max_retries=2).summarize(summary_request())

    assert len(api.requests) == 3
    assert len(sleeps) == 2
    assert "deploy" not in str(caught.value)


def test_malformed_response_raises_without_retry(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """A 200 whose body is not JSON raises SummarizerError and is not retried."""
    api.script(malformed())

    with pytest.raises(SummarizerError, match="not a valid message") as caught:
        make().summarize(summary_request())

    assert not isinstance(caught.value, SummarizerTransientError)
    assert len(api.requests) == 1


def test_empty_answer_raises(api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]) -> None:
    """A message with no text (e.g. a refusal) raises SummarizerError rather than returning an empty note."""
    api.script(reply("", stop_reason="refusal"))

    with pytest.raises(SummarizerError, match="no text"):
        make().summarize(summary_request())


def test_build_summarizer_extractive_is_none(redactor: Redactor) -> None:
    """The extractive setting builds nothing: the caller uses the extractive default."""
    assert build_summarizer(Settings(summarizer="extractive"), redactor) is None


def test_build_summarizer_anthropic_uses_settings(api: FakeMessagesAPI, redactor: Redactor) -> None:
    """The anthropic setting builds an AnthropicSummarizer with the configured key, base URL and model."""
    settings = Settings(
        summarizer="anthropic",
        anthropic_api_key="sk-ant-test-key-not-a-secret",
        anthropic_base_url=api.base_url,
        anthropic_model="claude-sonnet-4-6",
    )

    summarizer = build_summarizer(settings, redactor, backoff=TINY)

    assert isinstance(summarizer, AnthropicSummarizer)
    with summarizer:
        result = summarizer.summarize(summary_request())
    assert result.model == "claude-sonnet-4-6"
    assert api.requests[0].body["model"] == "claude-sonnet-4-6"
    assert "sk-ant-test-key-not-a-secret" in " ".join(api.requests[0].headers.values())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (Settings(summarizer="anthropic", anthropic_api_key=None), "COMPACTD_ANTHROPIC_API_KEY"),
        (Settings(summarizer="openai"), "unknown summarizer 'openai'"),
    ],
    ids=["no-api-key", "unknown-name"],
)
def test_build_summarizer_rejects_bad_configuration(
    settings: Settings, message: str, redactor: Redactor
) -> None:
    """A summarizer that cannot be built fails at start-up with a message saying what to set."""
    with pytest.raises(SummarizerConfigError, match=message):
        build_summarizer(settings, redactor)


def long_session(turns: int = 24) -> Transcript:
    """A plain-text session big enough that forcing compaction evicts a span."""
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append(
            {"role": "user", "content": f"step {i}: keep going, the key is {AWS_KEY} " + "x " * 150}
        )
        messages.append({"role": "assistant", "content": f"done with step {i}. " + "y " * 150})
    policy = Policy(context_window=4_000, output_reserve=500)
    ingested = ingest(messages, first_seq=1, redactor=Redactor(b"test-redaction-key"), policy=policy)
    return Transcript(system="You are a careful coding agent.", turns=ingested.turns, files=ingested.files)


def test_pipeline_uses_the_note_and_names_its_archive(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """Compaction with the Anthropic summarizer puts the model's note in the handoff and sends the new archive's ref."""
    api.script(reply("## Task\nKeep stepping.", input_tokens=900, output_tokens=40))
    policy = Policy(context_window=4_000, output_reserve=500)

    out = compact(long_session(), policy, summarize=True, force=True, summarizer=make())

    handoff = out.transcript.handoff
    assert out.error is None and handoff is not None
    assert "## Task\nKeep stepping." in handoff.text
    assert (handoff.summarizer, handoff.input_tokens, handoff.output_tokens) == (MODEL, 900, 40)
    [sent] = api.requests
    assert handoff.archive_refs[-1] in sent.body["messages"][0]["content"]
    assert AWS_KEY not in sent.raw.decode()


def test_pipeline_keeps_structural_result_when_the_api_is_down(
    api: FakeMessagesAPI, make: Callable[..., AnthropicSummarizer]
) -> None:
    """When retries run out, compaction keeps every turn and reports the transient failure."""
    api.default = error(529)
    t = long_session()

    out = compact(
        t, Policy(context_window=4_000, output_reserve=500), summarize=True, force=True, summarizer=make()
    )

    assert out.transcript.handoff is None
    assert [x.seq for x in out.transcript.turns] == [x.seq for x in t.turns]
    assert out.error is not None and "529" in out.error


def test_resources_close_the_summarizers_connections(
    tmp_path: Path, redis_url: str, api: FakeMessagesAPI
) -> None:
    """Closing Resources closes the summarizer's HTTP client: a worker's or an app's shutdown leaves
    no connection to the Messages API open (an unclosed one surfaced as a ResourceWarning in another
    test's start-up)."""
    from tests.integration.conftest import make_settings
    from worker.resources import Resources

    settings = make_settings(
        tmp_path,
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        redis_url,
        summarizer="anthropic",
        anthropic_api_key="sk-ant-test-key-not-a-secret",
        anthropic_base_url=api.base_url,
    )
    res = Resources.build(settings)
    summarizer = res.summarizer
    assert isinstance(summarizer, AnthropicSummarizer)
    assert not summarizer._client.is_closed()
    res.close()
    assert summarizer._client.is_closed()
