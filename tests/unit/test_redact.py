"""Redaction: detectors, placeholders, encoded forms, content blocks and non-secrets."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote

import pytest

from worker.redaction import THINKING_REMOVED, Redactor

R = Redactor(b"test-key")
PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")

ANTHROPIC_KEY = "sk-ant-api03-PtYgjmUhBel31iEl2hpChYgCfrL1spNxnyVmihA-2O76UMFxFkM-R5Kjp1vRt_1fjORS-6ilI8ihN5KXSc7Tvo-hBKqFYAA"
# (kind, text holding a secret, the secret, a near miss that must stay untouched)
DETECTOR_CASES = [
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4Tg7pQm9dK2vLr8sY3n\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAx4Tg7pQm9dK2vLr8sY3n",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    ),
    (
        "anthropic_api_key",
        f"ANTHROPIC_API_KEY={ANTHROPIC_KEY}",
        ANTHROPIC_KEY,
        "the sk-ant- prefix marks Anthropic keys",
    ),
    (
        "openai_api_key",
        "key: sk-proj-Xi8tdMjHV6pmbBbwilTeT3BlbkFJ3UDnpdEwNNm6wVBpYM0o",
        "sk-proj-Xi8tdMjHV6pmbBbwilTeT3BlbkFJ3UDnpdEwNNm6wVBpYM0o",
        "sk-learn is a library",
    ),
    (
        "aws_access_key",
        "aws configure set aws_access_key_id AKIA4Q7RZ2MXPL9TKW3B",
        "AKIA4Q7RZ2MXPL9TKW3B",
        "TODAYINASIAASACKOFRICEFELLOVER",
    ),
    (
        "secret",
        'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLmN"',
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vT3kLmN",
        "aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']",
    ),
    (
        "github_token",
        "git clone https://x:ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH@github.com/o/r",
        "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH",
        "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    ),
    (
        "github_token",
        "GH_TOKEN=github_pat_11ABCDEFG0aB3cD4eF5gH6_iJ7kL8mN9oP0qR1sT2uV3wX4yZ5aB6cD7eF8gH9iJ0kL1mN2oP3qR4sT5uV6",
        "github_pat_11ABCDEFG0aB3cD4eF5gH6_iJ7kL8mN9oP0qR1sT2uV3wX4yZ5aB6cD7eF8gH9iJ0kL1mN2oP3qR4sT5uV6",
        "see github_pat_ docs",
    ),
    (
        "gitlab_token",
        "glpat-Ab3dE6gH9jK2mN5pQ8sT",
        "glpat-Ab3dE6gH9jK2mN5pQ8sT",
        "glpat_hellOworld380_testin",
    ),
    (
        "slack_token",
        "SLACK_BOT=xoxb-153445930147-Tjy11gGxUW6Cf99YOYwtzG0K",
        "xoxb-153445930147-Tjy11gGxUW6Cf99YOYwtzG0K",
        "xoxe.xoxp-1-RANDOMSTRINGHERE",
    ),
    (
        # the random part starts with its only digit (found by the planted-secret property)
        "slack_token",
        "bot started with xoxb-123456789012-0LMXephZDfDTorubfSOpFCEx yesterday",
        "xoxb-123456789012-0LMXephZDfDTorubfSOpFCEx",
        "xoxe.xoxp-1-SlackAppConfigurationAccessTokenHere",
    ),
    (
        "slack_webhook",
        "curl https://hooks.slack.com/services/T024BE7LD/B01ABCDEF12/aB3cD4eF5gH6iJ7kL8mN9oP0",
        "https://hooks.slack.com/services/T024BE7LD/B01ABCDEF12/aB3cD4eF5gH6iJ7kL8mN9oP0",
        "https://hooks.slack.com/",
    ),
    (
        "stripe_key",
        "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD",
        "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD",
        "pk_live_ReTllpYQYfIZu2Jnf2lAPFjD",
    ),
    (
        "google_api_key",
        'apiKey: "AIzaSyD8qGxt4ec15vitgn44duC5ucxaOi4FmqE"',
        "AIzaSyD8qGxt4ec15vitgn44duC5ucxaOi4FmqE",
        "AIzaSyabcdefghijklmnopqrstuvwxyz1234567",
    ),
    (
        "private_key",
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"}',
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        '{"type": "service_account", "client_email": "a@b.iam.gserviceaccount.com"}',
    ),
    (
        "azure_storage_key",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=NjEwGHd9+piK+iCi2C2XURWPmeDDjif9UKN1HAszYptL4iQ+yD7/dgjLMZc3VOpURsa53aJ4HZfbVWzL429C5g==;EndpointSuffix=core.windows.net",
        "NjEwGHd9+piK+iCi2C2XURWPmeDDjif9UKN1HAszYptL4iQ+yD7/dgjLMZc3VOpURsa53aJ4HZfbVWzL429C5g==",
        "AccountName=<YOUR_ACCOUNT_NAME>;AccountKey=<YOUR_ACCOUNT_KEY>;",
    ),
    (
        "azure_client_secret",
        "client_secret=bP88Q~rcBcYjzzOhg1Hnn76Wm3jGgakZiZ.8vMgR",
        "bP88Q~rcBcYjzzOhg1Hnn76Wm3jGgakZiZ.8vMgR",
        "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
    ),
    (
        "twilio_api_key",
        "SK2b4f6a8c0e2d4f6a8b0c2e4d6f8a0b2c",
        "SK2b4f6a8c0e2d4f6a8b0c2e4d6f8a0b2c",
        "SKIP_TESTS=1",
    ),
    (
        "sendgrid_api_key",
        "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",
        "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",
        "SG.ngeVfQFYQlKU0ufo8x5d1A..TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    ),
    (
        "npm_token",
        "//registry.npmjs.org/:_authToken=npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
    ),
    (
        "pypi_token",
        "pypi-AgEIcHlwaS5vcmcCJGE4ZjQ1ZDZmLWFiYzEtNDk2My04N2JiLTYwZjcwNDYzNmQ5ZQACKlszLCJlNzE3YjFiNy1kNDZhLTQ4YzMtOWFmZC1lN2Q5NjRkMzQ5MWUiXQAABiCZ",
        "pypi-AgEIcHlwaS5vcmcCJGE4ZjQ1ZDZmLWFiYzEtNDk2My04N2JiLTYwZjcwNDYzNmQ5ZQACKlszLCJlNzE3YjFiNy1kNDZhLTQ4YzMtOWFmZC1lN2Q5NjRkMzQ5MWUiXQAABiCZ",
        "pip install pypi-simple",
    ),
    (
        "huggingface_token",
        "HF_TOKEN=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",
        "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",
        "hf_hub_download",
    ),
    (
        "databricks_token",
        "DATABRICKS_TOKEN=dapi0123456789abcdef0123456789abcdef",
        "dapi0123456789abcdef0123456789abcdef",
        "dapiDataGetTopLongShortPositionRatio",
    ),
    (
        "jwt",
        "Authorization eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        "eyJBB.eyJCC.eyJDDDD",
    ),
    (
        "url_password",
        "postgres://app:Zx9-kq2Lr@db.internal:5432/app",
        "Zx9-kq2Lr",
        "https://url:8000 @something else",
    ),
    ("password", "password: hunter2xyz", "hunter2xyz", "password = get_password()"),
    ("password", "mysql --password Tr0ub4dor3 -h db", "Tr0ub4dor3", "--password-file /run/secrets/db"),
    ("token", "token: ya_9f8e7d6c5b4a3f2e1d0c", "ya_9f8e7d6c5b4a3f2e1d0c", "token: null"),
    (
        "api_key",
        'API_KEY="c4ed6c21x9dd54a058e3fc56d1151cce8"',
        "c4ed6c21x9dd54a058e3fc56d1151cce8",
        'API_KEY=""',
    ),
    (
        "authorization",
        "-H 'Authorization: Bearer cfcabd11c7ed9a41b1a3e063c32d5114'",
        "cfcabd11c7ed9a41b1a3e063c32d5114",
        '-H "Authorization: Bearer $API_KEY"',
    ),
    (
        "basic_auth",
        "curl -u elastic:P@ssw0rd$1 https://localhost:9200",
        "P@ssw0rd$1",
        'curl -u "${_username}:${_password}"',
    ),
    (
        "password_hash",
        "root:$6$rounds=5000$abcdefgh$Qm9yZ2VkSGFzaA1234:19000:0",
        "$6$rounds=5000$abcdefgh$Qm9yZ2VkSGFzaA1234",
        "price: $6 per month",
    ),
    (
        "high_entropy_string",
        "mimi=gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4",
        "gX69YO4CvBsVjzAwYxdGyDd30t5+9ez31gKATtj4",
        "commit=8b1118b376c313ed420e5133ba91307817ed52c2",
    ),
    (
        "kubernetes_secret",
        "apiVersion: v1\nkind: Secret\ndata:\n  extra: c3VwZXJzZWNyZXR2YWx1ZQ==\n",
        "c3VwZXJzZWNyZXR2YWx1ZQ==",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  extra: c3VwZXJzZWNyZXR2YWx1ZQ==\n",
    ),
    (
        "azure_client_secret",
        "found Xy7_8Q~kT2vLq9Zr4mN0pW6sB1cD5fG3hJ8aKoE2 in the log",
        "Xy7_8Q~kT2vLq9Zr4mN0pW6sB1cD5fG3hJ8aKoE2",
        # the run goes on past `~`: part of a longer key, not a client secret
        "SSK@k3n,3~v9Q~Zr4mN0pW6sB1cD5fG3hJ8aKoE2vLq9x~zz0,AQACAAE",
    ),
    (
        "newrelic_key",
        "license: eu01xx3fa9c1d2e4b5a6978812c3d4e5f6a7NRAL",
        "eu01xx3fa9c1d2e4b5a6978812c3d4e5f6a7NRAL",
        "license: eu01xxzzqtnotakeyNRAL",
    ),
    (
        "discord_bot_token",
        "run with BTk4NzY1NDMyMTA5ODc2NTQz.Gh7kLm.Zq8vN3kLp2Wx7Rt5Yb1Mc4Df6Gh9Jk0Lq",
        "BTk4NzY1NDMyMTA5ODc2NTQz.Gh7kLm.Zq8vN3kLp2Wx7Rt5Yb1Mc4Df6Gh9Jk0Lq",
        "some_module_name_long_xx.method.another_long_identifier_name_here",
    ),
    (
        "postmark_token",
        '"postmark": "0f3c9a1e-7b2d-4c5e-9a8f-1d2e3f4a5b6c"',
        "0f3c9a1e-7b2d-4c5e-9a8f-1d2e3f4a5b6c",
        'request_id: "0f3c9a1e-7b2d-4c5e-9a8f-1d2e3f4a5b6c"',
    ),
    (
        "password",
        'var c = new NetworkCredential("ops@corp.example", "Zr8!vq2LmP");',
        "Zr8!vq2LmP",
        "var c = new NetworkCredential(user, password);",
    ),
    (
        "password",
        'new DirectoryEntry("LDAP://dc1.corp.example",\n    "CORP\\\\svc_ldap",\n    "Wint3r!2024");',
        "Wint3r!2024",
        "new DirectoryEntry(path, user, pass);",
    ),
    (
        "password",
        'smtp.login("me@mail.example", "k7Hq9vW2pL")',
        "k7Hq9vW2pL",
        "smtp.login(user, app_password)",
    ),
    (
        "password",
        'requests.get(url, auth=("admin", "s3cr3t-Pa55"))',
        "s3cr3t-Pa55",
        "requests.get(url, auth=(user, pw))",
    ),
    (
        "password",
        "The admin password for user 'deploy' is 'Tr1cky-Pw'.",
        "Tr1cky-Pw",
        "Make sure the password is 'required' in the form.",
    ),
    (
        "password",
        "user = alice\npassword = open_wide_gate\n",
        "open_wide_gate",
        # (was `password = password`: a weak real password in a password position is a secret, issue 25)
        "user = alice\npassword = %(db_password)s\n",
    ),
    (
        "secret",
        "[db]\nsecret_for_replication =\n    hunter7x\n    s3condline\n",
        "s3condline",
        "credentials:\n    username: bob\n    password: ${DB_PASSWORD}\n",
    ),
    (
        "password",
        "deploy:\n  password:\n    secure: Zq8vN3kLp2Wx7Rt5Yb1Mc4Df6Gh9Jk0Lq\n  on:\n    branch: main\n",
        "Zq8vN3kLp2Wx7Rt5Yb1Mc4Df6Gh9Jk0Lq",
        "volumes:\n  - secret:\n      secretName: db-credentials\n",
    ),
    (
        "password",
        '<add key="Password" value="mypassword4242" />',
        "mypassword4242",
        'API_KEY = "YOUR_API_KEY_HERE"',
    ),
    (
        "token",
        "API_TOKEN=`Zq8vN3kLp2Wx7Rt`",
        "Zq8vN3kLp2Wx7Rt",
        "-e API_TOKEN=`vault read -field=token secret/ci`",
    ),
    (
        "password",
        "username: alice\npassword: open_wide_gate\n",
        "open_wide_gate",
        "    username: str\n    password: SecretStr\n",
    ),
    (
        "password",
        "PASSWORD=Tr0ub4dor.x",
        "Tr0ub4dor.x",
        "_write_table({b'LOGIN': self.username, b'PASSWORD': self.password},",
    ),
    (
        "token",
        'ACCESS_TOKEN = "Zq8vN3kLp2Wx7Rt5Yb1M"',
        "Zq8vN3kLp2Wx7Rt5Yb1M",
        'GRANT_TYPE_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"',
    ),
    ("password", 'password := "hunter2xyz"', "hunter2xyz", 'password := "my_dummy_pass"'),
    # a keyboard run people choose is a password in a password's position; a run stays a made-up
    # example where only looks would say "token"
    ("password", "DB_PASSWORD=qwertyuiop1", "qwertyuiop1", "API_KEY=abcdefghijklmnop1234"),
    ("token", 'token = "Zq8vN3kLp2Wx"', "Zq8vN3kLp2Wx", 'token.markup = "linkify"'),
    (
        "api_key_header",
        "x-api-key: 9Zq8vN3kLp2Wx7Rt",
        "9Zq8vN3kLp2Wx7Rt",
        'auth = {"x-api-key": self.api_key}',
    ),
    ("secret", '"secret": "Zq8vN3kLp2Wx"', "Zq8vN3kLp2Wx", '"secret": "your_client_secret"'),
    (
        "basic_auth",
        'curl --user "{svc-7}":"{Vq7Lm2Xp9Rt4Kz}" https://api.example',
        "{Vq7Lm2Xp9Rt4Kz}",
        'curl -u "{username}:{password}" https://api.example',
    ),
]


def test_a_look_alike_anthropic_key_is_redacted_too() -> None:
    """A full-prefix key that does not end in AA (a fixture, or a typo'd live key) is still redacted."""
    assert ANTHROPIC_KEY[-12:-2] not in R.redact_text(f"key={ANTHROPIC_KEY[:-2]}BB")


@pytest.mark.parametrize(
    ("kind", "text", "secret", "near_miss"), DETECTOR_CASES, ids=[c[0] for c in DETECTOR_CASES]
)
def test_detector_catches_secret_and_spares_near_miss(
    kind: str, text: str, secret: str, near_miss: str
) -> None:
    """Each detector replaces its secret with a placeholder and leaves a look-alike untouched."""
    redacted = R.redact_text(text)
    assert secret not in redacted
    assert PLACEHOLDER.search(redacted)
    assert R.redact_text(near_miss) == near_miss


@pytest.mark.parametrize("text", [c[1] for c in DETECTOR_CASES])
def test_findings_report_kind_and_span(text: str) -> None:
    """findings() points at text that redact_text replaces with a placeholder of the same kind."""
    found = R.findings(text)
    assert found
    redacted = R.redact_text(text)
    for f in found:
        assert f.start < f.end
        assert f"[REDACTED:{f.kind}:" in redacted


def test_same_secret_same_placeholder_and_key_changes_it() -> None:
    """A secret always maps to one placeholder under a key, and to another under another key."""
    text = "a AKIA4Q7RZ2MXPL9TKW3B b AKIA4Q7RZ2MXPL9TKW3B"
    once = R.redact_text(text)
    marks = PLACEHOLDER.findall(once)
    assert len(marks) == 2 and marks[0] == marks[1] == R.redact_text("AKIA4Q7RZ2MXPL9TKW3B")
    assert Redactor(b"other-key").redact_text(text) != once


def test_placeholder_reveals_only_kind_and_hmac() -> None:
    """The placeholder is the kind plus eight hex digits of the keyed HMAC, no part of the secret."""
    secret = "ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH"
    mark = R.redact_text(secret)
    assert re.fullmatch(r"\[REDACTED:github_token:[0-9a-f]{8}\]", mark)
    assert not any(secret[i : i + 4] in mark for i in range(len(secret) - 4))


@pytest.mark.parametrize("text", [c[1] for c in DETECTOR_CASES])
def test_redaction_is_idempotent(text: str) -> None:
    """Redacting already-redacted text changes nothing."""
    once = R.redact_text(text)
    assert R.redact_text(once) == once


NOT_SECRETS = [
    "toolu_01ABCDEFGhijklmnop1234567",
    "call_8fJ2kL9mN3pQ5rS7tU1vW4xY",
    "msg_01XyZAbCdEfGhIjKlMnOpQrSt",
    "req_011CVAbCdEfGhIjKlMnOpQrS",
    "commit 8b1118b376c313ed420e5133ba91307817ed52c2",
    "fixed in 8b1118b",
    "id: 203db13e-70c7-462b-9a3d-bf32640cb0be",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "md5=5c94767cedb5d6987c902ac850ded2c6",
    "[REDACTED:aws_access_key:3f9a1c02]",
    "def get_access_token(self, refresh_token: str) -> TokenResponse:",
    "max_tokens = 4096",
    'token_url = "https://oauth2.googleapis.com/token"',
    'integrity="sha512-Xg9n3TGPTqOQq9ZdRhmFvgLlZ7Kx5H3mQ0JvZy6zQ2aYbzIl7yqv4kq5Zp3r1T8k2wX7n9c0d4e6f8g1h2j3k4l5=="',
    "password_reset_url = settings.PASSWORD_RESET_URL",
    "usage: {input_tokens: 1234, output_tokens: 56}",
    # near misses of the assignment, entropy and header judges: code and stand-ins
    'ReadOnlyPassword = "arn:aws:iam::123456789012:policy/ReadOnlyPassword"',
    "EcdsaP384Sha384 = Crypto2.EcdsaP384Sha384",
    '<img src="./img/avatar-3f9a1c02b4e5d6f7a8b9c0d1e2f3a4b5c6d7e8f9.png">',
    'NID_Gost28147_89_cc_Meshing = "Gost28147-89-cc-Meshing"',
    '"//registry.example/:_password = "+btoa(pw)',
    '"reset-your-password": "/docs/account/reset"',
    "    user = parsed.username\n    password = parsed.password\n",
    "    def set_auth(self, token: TokenInterface):",
    "    _tokens = (IMPORT, ARGUMENT)",
    '    Token.Name.Builtin: "#038B8B",',
    '_HEX_TOKEN = "[0-9A-Fa-f]{1,4}"',
    'print(f"password={password!r}")',
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_non_secrets_are_never_flagged(text: str) -> None:
    """Ids, git SHAs, UUIDs, content hashes, placeholders and code identifiers stay as they are."""
    assert R.findings(text) == []
    assert R.redact_text(text) == text


def test_secret_inside_json_escaped_tool_argument() -> None:
    """A secret inside a JSON string inside a JSON string (\\" escapes) is caught."""
    inner = json.dumps({"env": {"password": "Tr0ub4dor&3x"}, "cmd": "curl"})
    text = json.dumps({"command": inner})
    assert '\\"password\\"' in text
    redacted = R.redact_text(text)
    assert "Tr0ub4dor&3x" not in redacted
    assert json.loads(json.loads(redacted)["command"])["cmd"] == "curl"


def test_json_escaped_url_slashes() -> None:
    """Webhook URLs with `\\/` escapes are redacted whole."""
    text = '{"url":"https:\\/\\/hooks.slack.com\\/services\\/T024BE7LD\\/B01ABCDEF12\\/aB3cD4eF5gH6iJ7kL8mN9oP0"}'
    assert "aB3cD4eF5gH6iJ7kL8mN9oP0" not in R.redact_text(text)


def test_percent_encoded_secret() -> None:
    """A token hidden by percent-encoding (`%22`, `%3D`) is found through the decoded view."""
    text = "https://example.com/cb?state=" + quote('{"k":"AKIA4Q7RZ2MXPL9TKW3B"}', safe="")
    redacted = R.redact_text(text)
    assert "AKIA4Q7RZ2MXPL9TKW3B" not in redacted
    assert redacted.startswith("https://example.com/cb?state=")


def test_percent_encoded_password_in_url_keeps_user_and_host() -> None:
    """`scheme://user:pass@host`: only the password is replaced, %-escapes and all."""
    redacted = R.redact_text("mongodb://admin:D1fficultP%40ssw0rd@db.example.com/app")
    assert redacted.startswith("mongodb://admin:[REDACTED:url_password:")
    assert redacted.endswith("]@db.example.com/app")
    # escaped and plain copies of one secret share a placeholder
    assert R.placeholder("url_password", "D1fficultP%40ssw0rd") == R.placeholder(
        "url_password", "D1fficultP@ssw0rd"
    )


@pytest.mark.parametrize(
    "payload",
    [
        b"aws_access_key_id=AKIA4Q7RZ2MXPL9TKW3B\naws_region=eu-west-1\n",
        b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n",
    ],
)
def test_base64_blob_hiding_a_secret(payload: bytes) -> None:
    """A base64 blob that decodes to a secret is replaced whole."""
    blob = base64.b64encode(payload).decode()
    redacted = R.redact_text(f"echo {blob} | base64 -d > creds")
    assert blob not in redacted and redacted.startswith("echo [REDACTED:")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Server=db;User Id=sa;Password=Str0ng!Pass;Database=app;", "Server=db;User Id=sa;Password="),
        ("redis://:s3cr3tPass@cache:6379/0", "redis://:"),
        ("amqp://guest:K8sRabbit99@rabbit:5672/", "amqp://guest:"),
        ("https://user:pa%2Fss%40word@example.com/x", "https://user:"),
    ],
)
def test_connection_strings_keep_structure(text: str, kept: str) -> None:
    """Connection strings keep user, host and options; only the password is replaced."""
    redacted = R.redact_text(text)
    assert redacted.startswith(kept + "[REDACTED:")
    assert redacted != text


def test_redact_block_text_and_tool_use() -> None:
    """text blocks and tool_use inputs are redacted; ids, names and keys stay."""
    block = {
        "type": "tool_use",
        "id": "toolu_01ABCdef",
        "name": "Bash",
        "input": {
            "command": "export GH=ghp_4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH",
            "api_key": "Zq3xVb7Nm2Kp9Lr4Ts6Wy8H",
        },
    }
    out = R.redact_block(block)
    assert out["id"] == "toolu_01ABCdef" and out["name"] == "Bash"
    assert set(out["input"]) == {"command", "api_key"}
    assert "ghp_" not in out["input"]["command"]
    assert out["input"]["api_key"].startswith("[REDACTED:api_key:")
    text = R.redact_block({"type": "text", "text": "key AKIA4Q7RZ2MXPL9TKW3B"})
    assert text["text"].startswith("key [REDACTED:aws_access_key:")


def test_redact_block_tool_result_string_and_parts() -> None:
    """tool_result content is redacted as a string or part by part; images pass through untouched."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUtJQTRRN1JaMk1YUEw5VEtXM0I="},
    }
    block = {
        "type": "tool_result",
        "tool_use_id": "toolu_01X",
        "content": [{"type": "text", "text": "AKIA4Q7RZ2MXPL9TKW3B"}, image],
    }
    out = R.redact_block(block)
    assert out["tool_use_id"] == "toolu_01X"
    assert out["content"][0]["text"].startswith("[REDACTED:aws_access_key:")
    assert out["content"][1] is image
    as_string = R.redact_block(
        {"type": "tool_result", "tool_use_id": "toolu_01X", "content": "x AKIA4Q7RZ2MXPL9TKW3B"}
    )
    assert "AKIA" not in as_string["content"]


def test_image_and_document_sources_are_skipped_in_values() -> None:
    """Base64 image and document payloads inside any JSON value are left whole."""
    value = {
        "attachments": [
            {
                "type": "document",
                "source": {
                    "type": "base64",
                    "media_type": "application/pdf",
                    "data": "QUtJQTRRN1JaMk1YUEw5VEtXM0I=",
                },
            }
        ]
    }
    assert R.redact_value(value) == value
    assert (
        R.redact_block({"type": "image", "source": value["attachments"][0]["source"]})["source"]["data"]
        == "QUtJQTRRN1JaMk1YUEw5VEtXM0I="
    )


def test_clean_thinking_block_is_untouched() -> None:
    """A thinking block without secrets keeps its text and signature byte for byte."""
    block = {
        "type": "thinking",
        "thinking": "Let me read the config first.",
        "signature": "EqYBCkYIBxgCKkBsig",
    }
    assert R.redact_block(block) is block
    redacted = {
        "type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
    }
    assert R.redact_block(redacted) is redacted


def test_thinking_block_with_secret_becomes_a_note() -> None:
    """A thinking block holding a secret is replaced by a text note; the secret is gone."""
    block = {"type": "thinking", "thinking": "The key is AKIA4Q7RZ2MXPL9TKW3B, use it.", "signature": "sig"}
    out = R.redact_block(block)
    assert out == {"type": "text", "text": THINKING_REMOVED}


def test_redact_value_walks_structures() -> None:
    """Lists and dicts keep their shape and keys; only secret strings change."""
    value = {"a": [1, None, True, "AKIA4Q7RZ2MXPL9TKW3B"], "nested": {"password": "Tr0ub4dor&3x", "n": 3}}
    out = R.redact_value(value)
    assert out["a"][:3] == [1, None, True] and out["nested"]["n"] == 3
    assert out["a"][3].startswith("[REDACTED:aws_access_key:")
    assert out["nested"]["password"].startswith("[REDACTED:password:")
    assert R.redact_value({"password": None, "token": ""}) == {"password": None, "token": ""}


def test_pragma_allowlisted_lines_are_still_redacted() -> None:
    """detect-secrets' `# pragma: allowlist secret` does not stop redaction."""
    text = "VERY_SECRET_TOO = 'f6CGV4aMM9zedoh3OUNbSakBymo7yplB'  # pragma: allowlist secret"
    assert "f6CGV4aMM9zedoh3OUNbSakBymo7yplB" not in R.redact_text(text)
