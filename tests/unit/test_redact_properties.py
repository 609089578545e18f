"""Redaction properties: planted secrets of every kind never survive; the text around them does."""

from __future__ import annotations

import base64
import json
import re
import string
from urllib.parse import quote, unquote

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.redaction import Redactor
from worker.redaction.seams import reseam

R = Redactor(b"property-key")
PLACEHOLDER = r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]"
ALNUM = string.ascii_letters + string.digits
WORDS = ("deploy", "the", "service", "then", "check", "logs", "ok", "done", "value", "step")


def _random(alphabet: str, size: int) -> st.SearchStrategy[str]:
    """Random-looking strings: several distinct characters, letters and digits both present."""
    return st.text(alphabet=alphabet, min_size=size, max_size=size).filter(
        lambda s: (
            len(set(s)) >= min(10, size // 2)
            and any(c.isdigit() for c in s)
            and any(c.isalpha() for c in s)
            and not re.search(r"(?i)abcdefghijk|qwertyuiop|x{6}|(.)\1{3}", s)
        )
    )


def _jwt(body: str) -> str:
    head = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()).decode().rstrip("=")
    claims = base64.urlsafe_b64encode(json.dumps({"sub": body}).encode()).decode().rstrip("=")
    return f"{head}.{claims}.{body}"


# (kind, how to build the planted text around a random body, how to read the secret back)
SECRETS = {
    "aws_access_key": (
        st.text(alphabet=string.ascii_uppercase + string.digits, min_size=16, max_size=16).filter(
            lambda s: len(set(s)) >= 8
        ),
        lambda b: f"AKIA{b}",
    ),
    "github_token": (_random(ALNUM, 36), lambda b: f"ghp_{b}"),
    "gitlab_token": (_random(ALNUM, 20), lambda b: f"glpat-{b}"),
    "slack_token": (_random(ALNUM, 24), lambda b: f"xoxb-123456789012-{b}"),
    "stripe_key": (_random(ALNUM, 24), lambda b: f"sk_live_{b}"),
    "google_api_key": (_random(ALNUM, 35), lambda b: f"AIza{b}"),
    "openai_api_key": (_random(ALNUM, 20), lambda b: f"sk-proj-{b}T3BlbkFJ{b[::-1]}"),
    "anthropic_api_key": (_random(ALNUM, 93), lambda b: f"sk-ant-api03-{b}AA"),
    "huggingface_token": (_random(ALNUM, 34), lambda b: f"hf_{b}"),
    "npm_token": (_random(ALNUM, 36), lambda b: f"npm_{b}"),
    "sendgrid_api_key": (_random(ALNUM, 65), lambda b: f"SG.{b[:22]}.{b[22:]}"),
    "databricks_token": (
        st.text(alphabet="0123456789abcdef", min_size=32, max_size=32).filter(lambda s: len(set(s)) >= 8),
        lambda b: f"dapi{b}",
    ),
    "jwt": (_random(ALNUM, 43), _jwt),
    "password": (_random(ALNUM + "!@#%^*", 14), lambda b: f"DB_PASSWORD={b}"),
    "url_password": (_random(ALNUM, 16), lambda b: f"postgres://app:{b}@db.internal:5432/app"),
    "private_key": (
        _random(ALNUM + "+/", 64),
        lambda b: f"-----BEGIN RSA PRIVATE KEY-----\n{b}\n-----END RSA PRIVATE KEY-----",
    ),
    # the kinds that leaked from the blind set (issue 9): credential positions and formats
    "word_url_password": (
        st.sampled_from(["hunter2", "letmein", "password", "Summer2024", "changeme1"]),
        lambda b: f"postgres://user:{b}@db.example.com/app",
    ),
    "keyboard_password": (
        st.sampled_from(["qwertyuiop1", "abcdefghijk123", "Qwertyuiop!", "1qwertyuiop"]),
        lambda b: f"DB_PASSWORD={b}",
    ),
    "mongodb_password": (
        _random(ALNUM, 12),
        lambda b: f"mongodb+srv://app:{b}%21@cluster0.ab1cd.mongodb.net/db",
    ),
    "okta_token": (_random(ALNUM + "_-", 40), lambda b: f"Authorization: SSWS 00{b}"),
    "newrelic_key": (_random(string.ascii_uppercase + string.digits, 27), lambda b: f"NRAK-{b}"),
    "github_secret": (_random("0123456789abcdef", 40), lambda b: f"GITHUB_SECRET={b}"),
    "vault_unseal_key": (_random(ALNUM + "+/", 43), lambda b: f"Unseal Key 1: {b}="),
    "thingsboard_token": (_random(ALNUM, 20), lambda b: f"curl http://tb.local:8080/api/v1/{b}/telemetry"),
    "telegram_bot_token": (
        _random(ALNUM + "_-", 33),
        lambda b: f"https://api.telegram.org/bot123456789:AA{b}/getMe",
    ),
    "sonar_token": (_random("0123456789abcdef", 40), lambda b: f"sonar.token=squ_{b}"),
    "ado_password": (_random(ALNUM + "!#", 12), lambda b: f"Server=db;User Id=app;Password = {b};"),
    "gradle_password": (_random(ALNUM, 14), lambda b: f"systemProp.https.proxyPassword={b}"),
    "phpmailer_password": (_random(ALNUM, 14), lambda b: f"$mail->Password = '{b}';"),
    "curl_user": (_random(ALNUM, 14), lambda b: f"curl -u deploy:{b} https://api.example.com"),
    "basic_header": (_random(ALNUM + "+/", 24), lambda b: f"Authorization: Basic {b}="),
}


@st.composite
def planted(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """(prefix, planted text, secret body, suffix) with one secret of a drawn kind."""
    kind = draw(st.sampled_from(sorted(SECRETS)))
    body_strategy, build = SECRETS[kind]
    body = draw(body_strategy)
    words = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6)
    prefix = " ".join(draw(words))
    suffix = " ".join(draw(words))
    return prefix + "\n", build(body), body, "\n" + suffix


@settings(max_examples=600, deadline=None)
@given(planted())
def test_no_planted_secret_survives_and_context_is_kept(case: tuple[str, str, str, str]) -> None:
    """A planted secret of any kind is gone after redaction, and the text around it is intact."""
    prefix, secret_text, body, suffix = case
    redacted = R.redact_text(prefix + secret_text + suffix)
    assert body not in re.sub(PLACEHOLDER, "", redacted)  # a kind may spell a word body (`password`)
    assert redacted.startswith(prefix) and redacted.endswith(suffix)
    assert re.search(PLACEHOLDER, redacted)
    assert R.redact_text(redacted) == redacted


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + " _-.:=/\n", max_size=300))
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    """Redacting twice gives the same text as redacting once, whatever the input."""
    once = R.redact_text(text)
    assert R.redact_text(once) == once


def _no_window_of(body: str, text: str) -> bool:
    """No 8-character piece of body (nor body itself, when shorter) is left in text."""
    bare = re.sub(PLACEHOLDER, "", text)
    return all(body[i : i + 8] not in bare for i in range(max(1, len(body) - 7)))


@settings(max_examples=400, deadline=None)
@given(planted(), st.floats(min_value=0.05, max_value=0.95))
def test_a_secret_cut_by_a_turn_boundary_is_gone_from_both_turns(
    case: tuple[str, str, str, str], where: float
) -> None:
    """A planted secret cut anywhere by a turn boundary (in its key name, its value, ...) is gone
    from both turns after the seam and each turn's own redaction (what ingest does), and what
    surrounds it is kept."""
    prefix, secret_text, body, suffix = case
    whole = prefix + secret_text + suffix
    cut = len(prefix) + max(1, min(len(secret_text) - 1, int(len(secret_text) * where)))
    left, right = (R.redact_text(t) for t in R.redact_seam(whole[:cut], whole[cut:]))
    assert _no_window_of(body, left + right)
    assert left.startswith(prefix) and right.endswith(suffix)
    assert R.redact_seam(left, right) == (left, right)


def _windows(secret: str, text: str) -> set[str]:
    """The 8-character pieces of secret found in text (the whole secret when shorter)."""
    n = min(8, len(secret))
    return {secret[i : i + n] for i in range(len(secret) - n + 1)} & {
        text[i : i + n] for i in range(len(text))
    }


@settings(max_examples=400, deadline=None)
@given(planted(), st.booleans(), st.text(alphabet=ALNUM + " .", min_size=1, max_size=20))
def test_the_seam_never_leaves_more_of_a_secret_than_the_turn_alone(
    case: tuple[str, str, str, str], encoded: bool, right: str
) -> None:
    """A secret whole in one turn, at its very end (plain, or percent-encoded into a URL), loses
    no more to the seam than that turn's own redaction would, whatever the next turn starts with:
    `Noted.` read on from a JWT's signature makes the JWT cross the join, and its header, behind a
    `%20`, must still go."""
    prefix, secret_text, _body, _suffix = case
    left = prefix + secret_text
    if encoded:
        left = "Open https://example.test/view?file=" + quote(left, safe="")
    after_seam = R.redact_text(R.redact_seam(left, right)[0])
    assert _windows(secret_text, unquote(after_seam)) <= _windows(secret_text, unquote(R.redact_text(left)))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters + " _-.:=/\n", max_size=200), st.integers(0, 200))
def test_a_boundary_without_a_secret_changes_nothing(text: str, at: int) -> None:
    """Where every secret of the joined text lies on one side and that side alone shows it too,
    both sides come back as they were (the same objects)."""
    left, right = R.redact_text(text[:at]), R.redact_text(text[at:])
    new_left, new_right = R.redact_seam(left, right)
    alone = {(f.start, f.end) for f in R.findings(left)}
    alone |= {(f.start + len(left), f.end + len(left)) for f in R.findings(right)}
    if all((f.start, f.end) in alone for f in R.findings(left + right)) or not left or not right:
        assert new_left is left and new_right is right


@settings(max_examples=400, deadline=None)
@given(planted(), st.floats(min_value=0.05, max_value=0.95))
def test_a_secret_cut_across_two_appends_is_gone_from_both_turns(
    case: tuple[str, str, str, str], where: float
) -> None:
    """The order of two appends: each half was redacted alone (the first is stored already), then
    the boundary is (worker/redaction/seams.reseam): no 8-character piece of the secret is left."""
    prefix, secret_text, body, suffix = case
    whole = prefix + secret_text + suffix
    cut = len(prefix) + max(1, min(len(secret_text) - 1, int(len(secret_text) * where)))
    left, right = R.redact_text(whole[:cut]), R.redact_text(whole[cut:])
    fixed = reseam(({"type": "text", "text": left},), ({"type": "text", "text": right},), R)
    if fixed is not None:
        left, right = fixed.previous[0]["text"], fixed.first[0]["text"]
    assert _no_window_of(body, left + right)
    assert left.startswith(prefix.rstrip("\n")) and right.endswith(suffix.lstrip("\n"))
