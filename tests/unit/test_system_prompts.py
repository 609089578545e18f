"""A system prompt's redaction remembered by its digest: the same result as redacting it, per redactor."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.flows.system_prompts import MIN_CHARS, SystemRedactions
from worker.redaction import Redactor

ONE, OTHER = Redactor(b"one-key"), Redactor(b"other-key")
SECRET = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PROMPT = "You are a coding agent. " * 30


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([PROMPT, PROMPT + SECRET, SECRET + PROMPT, "short " + SECRET]), max_size=12))
def test_a_remembered_redaction_is_the_redaction(texts: list[str]) -> None:
    """Whatever order system prompts (with and without a secret, long and short) come in, each
    answer equals redact_text's, for each of two redactors with different keys."""
    memo = SystemRedactions(size=2)
    for text in texts:
        for redactor in (ONE, OTHER, ONE):
            assert memo.redact(redactor, text, 1) == redactor.redact_text(text)


def test_a_long_prompt_is_redacted_once_per_redactor() -> None:
    """The second time a long prompt comes, it is not redacted again; a short one always is; a
    secret in it is never in the answer."""
    calls: list[str] = []

    class Counting(Redactor):
        def redact_text(self, text: str) -> str:
            calls.append(text)
            return super().redact_text(text)

    counting = Counting(b"one-key")
    memo = SystemRedactions()
    long, short = PROMPT + SECRET, "short " + SECRET
    assert len(long) >= MIN_CHARS > len(short)
    answers = [memo.redact(counting, t, 1) for t in (long, long, short, short, long)]
    assert calls == [long, short, short]
    assert all(SECRET not in a for a in answers)


def test_a_tenant_is_never_served_another_tenants_redaction() -> None:
    """The memo is keyed by the tenant: the same prompt from a second tenant is redacted afresh
    (its time tells that tenant nothing of what others sent)."""
    calls: list[str] = []

    class Counting(Redactor):
        def redact_text(self, text: str) -> str:
            calls.append(text)
            return super().redact_text(text)

    counting, memo = Counting(b"one-key"), SystemRedactions()
    for tenant in (1, 2, 1, 2):
        memo.redact(counting, PROMPT, tenant)
    assert calls == [PROMPT, PROMPT]
