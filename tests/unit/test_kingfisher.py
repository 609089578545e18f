"""Kingfisher's rule catalog as the second pass: kinds, narrowed spans, references, the rule cache."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from worker.redaction import Redactor, kingfisher
from worker.redaction.scanner import GENERIC_TOKENS, Ruleset

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
    """We have no OpenRouter detector; the catalog has one (the generic layer's token shapes take
    its hex body too, so they are left out here)."""
    token = "sk-or-v1-" + secrets.token_hex(32)
    without = Ruleset.without(frozenset({GENERIC_TOKENS}), frozenset({"veles.secrets/openrouter"}))
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
        "mongodb://admin:xxxxxxxx@db.example.com:27017/app",
    ],
)
def test_references_and_placeholders_are_not_findings(text: str) -> None:
    """Each text is matched by a Kingfisher rule; the reference filter is what keeps it."""
    assert any(f.visible for f in kingfisher._scanner().scan(text.encode()))
    assert kingfisher.spans(text.encode()) == []


def test_offsets_that_do_not_hold_the_secret_are_not_trusted() -> None:
    """On UTF-16-looking input Kingfisher reports offsets in its own decoded text."""
    token = "xoxb-123456789012-1234567890123-" + secrets.token_hex(12)
    data = b"\xff\xfe" + "\n".join(["log line"] * 3 + [f"token {token}"]).encode("utf-16-le")
    for _kind, start, end in kingfisher.spans(data):
        assert data[start:end] == token.encode()


def test_kingfisher_never_redacts_inside_a_placeholder() -> None:
    once = R.redact_text("git clone https://bot:Zx9kq2LrVb7Tt@github.com/o/r")
    assert R.redact_text(once) == once


def test_prewarm_compiles_once_into_the_given_directory(tmp_path: Path) -> None:
    target = tmp_path / "rules"
    try:
        assert kingfisher.prewarm(target) == "stored"
        # private, as Kingfisher requires of a cache it will read
        assert any(target.iterdir()) and target.stat().st_mode & 0o077 == 0
        assert kingfisher.prewarm(target) == "present"
    finally:
        kingfisher.prewarm(kingfisher.DEFAULT_CACHE_DIR)


def test_an_unusable_cache_directory_costs_only_the_compile(tmp_path: Path) -> None:
    """A path that cannot be a directory (or belongs to another user) must not stop a start-up."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    try:
        assert kingfisher.prewarm(blocker / "rules").startswith("unusable")
    finally:
        kingfisher.prewarm(kingfisher.DEFAULT_CACHE_DIR)
