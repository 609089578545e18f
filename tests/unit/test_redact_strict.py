"""The strict redaction profile (COMPACTD_REDACTION=strict): references, placeholders and
identifiers go too; code, counts, private addresses and minted ids stay. Examples here are our
own, not the corpus samples the profile was written against."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from worker.compaction.model import Policy
from worker.flows.simulate import replay
from worker.redaction import Redactor
from worker.redaction.scanner import strict_rules
from worker.settings import Settings

STANDARD = Redactor(b"strict-test")
STRICT_R = Redactor(b"strict-test", strict_rules())


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("DB_PASSWORD=$DB_PASS", "$DB_PASS"),
        ("psexec \\\\host -u admin -p %ADMIN_PW% cmd", "%ADMIN_PW%"),
        ('mail_password: "CHANGE_ME_PLEASE"', "CHANGE_ME_PLEASE"),
        ("aws_access_key_id = AKIAXXXXXXXXXXXXXXXX", "AKIAXXXXXXXXXXXXXXXX"),
        ('role = "arn:aws:iam::210987654321:role/deployer"', "210987654321"),
        ("aws_account_id: 210987654321", "210987654321"),
        ("curl https://media-prod.s3.eu-west-1.amazonaws.com/a.png", "media-prod"),
        ("gsutil ls https://storage.googleapis.com/acme-backups/2026/", "acme-backups"),
        ("resolver 9.9.9.9 answered", "9.9.9.9"),
        ("GITHUB_USER=octocat", "octocat"),
        ("[db]\nusername: reporting\nport: 5432", "reporting"),
        ("client_id: acme-portal", "acme-portal"),
        ('{"tenant_id": "contoso-prod"}', "contoso-prod"),
        ("api_token: alpha beta gamma", "alpha beta gamma"),
        ("export DEPLOY_TOKEN='part1abc''part2def'", "part2def"),
        ("export API_KEY='abc''def'", "def"),
        ('vault.secret("kv/prod/db")', "kv/prod/db"),
    ],
)
def test_strict_takes_what_standard_keeps(text: str, gone: str) -> None:
    assert gone in STANDARD.redact_text(text), "standard now redacts it: the example shows nothing"
    assert gone not in STRICT_R.redact_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "token = store.mint(project.id)",
        "const csrfToken = document.querySelector('meta').content",
        "params: { _csrf_token: csrfToken }",
        "max_tokens = 4096",
        "max_tokens: config.limit",
        "token_type: bearer",
        "listening on 127.0.0.1:8700, peer 10.0.0.12",
        '"parentToolUseID":"toolu_01LGkUXtfCwWwgtuRBubCVPw","uuid":"x"',
        '@keyup.enter="saveTodoEdit(todo)"',
        "project_id: project_id",
        "keys: :unique",
        "password: null",
        'api_key = os.environ["KEY"]',
        "password:  # set me",
        "user: user",
        # prose's small words and code's keywords after a credential's name hold no value
        "Ask them for the password for the staging box.",
        "credentials = new NetworkCredential(userName, userPassword)",
    ],
)
def test_strict_keeps_code_counts_and_private_addresses(text: str) -> None:
    assert STRICT_R.redact_text(text) == text


def test_strict_takes_a_json_field_named_for_a_credential_whatever_it_holds() -> None:
    value = {"password": "${DB_PASSWORD}", "user": "deploy", "max_tokens": 10}
    assert STANDARD.redact_value(value)["password"] == "${DB_PASSWORD}"
    assert STRICT_R.redact_value(value)["password"].startswith("[REDACTED:password:")
    assert STRICT_R.redact_value(value)["max_tokens"] == 10


# pieces the two profiles treat differently, and ones both redact, to build texts from
_PIECES = (
    "password = hunter2hunter2",
    "DB_PASSWORD=$DB_PASS",
    "token: ghp_8Zq2Lr7Kx1Mv4Nb6Pc9Td3Fh5Gj0Wk2Ys4Ea",
    "AKIAQ7RZ2MXPL9TKW3B4",
    "arn:aws:s3:::acme-logs/2026",
    "8.8.4.4",
    "postgres://app:s3cr3tPw@db.internal:5432/app",
    "user = alice",
    "max_tokens = 4096",
    "see the logs",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2lnbmF0dXJl",
    "xoxb-1234567890-1234567890-aBcDeFgHiJkLmNoPqRsTuVwX",
    "https://u:pa55w0rdX@h.io/x",
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6), st.sampled_from([" ", "\n", ", ", "; ", ""])
)
def test_strict_redacts_everything_standard_redacts(pieces: list[str], sep: str) -> None:
    """Every character the standard profile replaces, the strict one replaces too."""
    text = sep.join(pieces)
    covered = {i for f in STRICT_R.findings(text) for i in range(f.start, f.end)}
    for f in STANDARD.findings(text):
        assert set(range(f.start, f.end)) <= covered, (text, f)


def test_the_profile_is_a_setting_and_a_wrong_one_is_named() -> None:
    assert Settings(redaction="strict").redaction == "strict"
    with pytest.raises(ValidationError, match="REDACTION must be 'standard' or 'strict'"):
        Settings(redaction="paranoid")


def test_replay_stores_what_the_profile_given_redacts() -> None:
    """`compactd replay --redaction strict` hands replay a strict Redactor: its request keeps neither
    the reference nor the address; without one replay redacts as the standard profile does."""
    messages = [
        {"role": "user", "content": "deploy with DB_PASSWORD=$DB_PASS\nresolver 9.9.9.9"},
        {"role": "assistant", "content": "Deployed."},
    ]
    policy = Policy(context_window=16_000)
    system = "You deploy. The registry is at 9.9.9.8."
    standard = orjson.dumps(replay(system, messages, policy, job_seconds=0.01).final_request).decode()
    strict = replay(system, messages, policy, job_seconds=0.01, redactor=Redactor(b"k", strict_rules()))
    served = orjson.dumps(strict.final_request).decode()
    assert "$DB_PASS" in standard and "9.9.9.9" in standard and "9.9.9.8" in standard
    assert "$DB_PASS" not in served and "9.9.9.9" not in served and "[REDACTED:ip_address:" in served
    assert "9.9.9.8" not in served  # the system prompt is redacted as the service stores it
