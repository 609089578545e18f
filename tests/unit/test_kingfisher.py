"""Kingfisher's rule catalog as the second pass: kinds, narrowed spans, references, the rule cache."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from worker.redaction import Redactor, kingfisher
from worker.redaction.scanner import Ruleset

R = Redactor(b"k" * 32)


@pytest.mark.parametrize(
    ("rule_id", "kind"),
    [
        ("betterleaks.slack-bot-token", "slack_bot_token"),
        ("veles.secrets/openrouter", "openrouter"),
        ("betterleaks.generic-credential-uri", "url_password"),
        ("betterleaks.private-key", "private_key"),
    ],
)
def test_rule_ids_become_placeholder_kinds(rule_id: str, kind: str) -> None:
    assert kingfisher.kind_of(rule_id) == kind


def test_a_format_only_kingfisher_knows_is_redacted() -> None:
    """We have no OpenRouter detector; the catalog has one."""
    token = "sk-or-v1-" + secrets.token_hex(32)
    without = Ruleset.without(kingfisher_rules=frozenset({"veles.secrets/openrouter"}))
    text = f"the router answered 401 for {token} twice"
    assert Redactor(b"k" * 32, without).redact_text(text) == text
    assert R.redact_text(text) == text.replace(token, R.placeholder("openrouter", token))


def test_a_uri_finding_is_narrowed_to_its_password() -> None:
    text = b"mongodb://admin:Sup3rS3cret@db.example.com:27017/app"
    [(kind, start, end)] = kingfisher.spans(text)
    assert (kind, text[start:end]) == ("url_password", b"Sup3rS3cret")


@pytest.mark.parametrize(
    "text",
    [
        'curl -u "{username}:{password}" https://api.example',
        "curl -u admin:${ADMIN_PASSWORD} https://api.example",
        "mongodb://admin:<password>@db.example.com/app",
    ],
)
def test_references_and_placeholders_are_not_findings(text: str) -> None:
    assert kingfisher.spans(text.encode()) == []


def test_kingfisher_never_redacts_inside_a_placeholder() -> None:
    once = R.redact_text("git clone https://bot:Zx9kq2LrVb7Tt@github.com/o/r")
    assert R.redact_text(once) == once


def test_prewarm_compiles_once_into_the_given_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(kingfisher.CACHE_ENV, raising=False)
    target = tmp_path / "rules"
    assert kingfisher.prewarm(target) == "stored"
    assert os.environ[kingfisher.CACHE_ENV] == str(target.resolve())
    assert any(target.iterdir()) and target.stat().st_mode & 0o077 == 0
    assert kingfisher.prewarm(target) == "present"
