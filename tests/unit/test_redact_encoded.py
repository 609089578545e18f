"""Redaction of secrets hidden by percent, JSON-string and base64 encodings of the text around them."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.redaction import Redactor

R = Redactor(b"encoded-key")
PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")
SECRET = "Xk9mQ2vLp8Rt4WzB7nC3"
FILE = f'config:\n  DB_PASSWORD: "{SECRET}"\n  region: eu-west-1\n'

ENCODINGS: dict[str, Callable[[str], str]] = {
    "percent": lambda t: f"Open https://example.test/view?file={quote(t, safe='')}",
    "json": lambda t: '{"file": "' + json.dumps(t)[1:-1] + '"}',
    "json_unicode": lambda t: '{"file": "' + json.dumps("caf\u00e9 \u2014 " + t)[1:-1] + '"}',
    "base64": lambda t: f"The file, base64: {base64.b64encode(t.encode()).decode()}",
    # UTF-8 text is text too: a table drawn with `────`, a value with `¿`
    "base64_utf8": lambda t: "base64: " + base64.b64encode(("KEY ──── VALUE ¿\n" + t).encode()).decode(),
}


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_encoded_secret_is_replaced(encode: Callable[[str], str]) -> None:
    """A secret inside an encoded file is gone and a placeholder stands in its place."""
    text = encode(FILE)

    redacted = R.redact_text(text)

    assert SECRET not in redacted and SECRET[:8] not in redacted
    assert PLACEHOLDER.search(redacted)


BENIGN = {
    "percent_url": "see https://example.com/search?q=hello%20world%26more&lang=en%2DGB for results",
    "json_code": '{"code": "def main():\\n    print(\\"hello, world\\")\\n    return 0\\n", "path": "a\\/b.py"}',
    "json_unicode": '{"text": "caf\\u00e9 \\u2014 open at 9\\n"}',
    "base64_text": base64.b64encode(b"The quick brown fox jumps over the lazy dog, twice.").decode(),
    "base64_utf8_text": base64.b64encode("Caf\u00e9 \u2014 open at 9, \u00bfs\u00ed?".encode()).decode(),
}


@pytest.mark.parametrize("text", BENIGN.values(), ids=BENIGN.keys())
def test_benign_encoded_text_is_returned_as_is(text: str) -> None:
    """Encoded text without a secret comes back as the same object."""
    assert R.redact_text(text) is text


_KEY = st.text(
    alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=20, max_size=32
).filter(lambda s: len(set(s)) >= 10 and any(c.isdigit() for c in s) and any(c.isalpha() for c in s))
_WORDS = st.lists(
    st.sampled_from(["deploy", "the", "service", "ok", "100%", "a\\b", "x=1", "done"]), max_size=8
)


@settings(max_examples=60, deadline=None)
@given(
    key=_KEY,
    encoding=st.sampled_from(sorted(ENCODINGS)),
    before=_WORDS,
    after=_WORDS,
)
def test_redacting_planted_encoded_secrets_twice_changes_nothing(
    key: str, encoding: str, before: list[str], after: list[str]
) -> None:
    """Redaction is idempotent on text holding an encoded secret, and the secret does not survive."""
    text = " ".join([*before, ENCODINGS[encoding](f'api_key = "{key}"\n'), *after])

    once = R.redact_text(text)

    assert R.redact_text(once) == once
    assert key not in once


def test_a_kubernetes_secret_quoted_in_a_json_string_is_found() -> None:
    """A manifest whose last line, `kind: Secret`, closes the JSON string it was quoted in."""
    value = "eyJhdXRocyI6eyJodHRwczovL2V4YW1wbGUvdjEvIjp7ImF1dGgiOiJvcGVuc2VzYW1lIn19fQo="
    manifest = (
        f"apiVersion: v1\ndata:\n  .dockercfg: >\n    {value}\ntype: kubernetes.io/dockercfg\nkind: Secret"
    )

    redacted = R.redact_text('{"file": "' + json.dumps(manifest)[1:-1] + '"}')

    assert value[:16] not in redacted and PLACEHOLDER.search(redacted)


def test_a_percent_encoded_query_value_is_read_as_a_document_of_its_own() -> None:
    """`user = …` then `password = …` on the next line: a rule that needs the user line to start a
    line finds it at the start of the query value (`?a=1&file=user%20%3D…`)."""
    doc = "user = Aladdin\n// some comment\npassword = open_sesame\n"

    redacted = R.redact_text(f"Open https://example.test/view?a=1&file={quote(doc, safe='')}&b=2")

    assert "open_sesame" not in redacted and redacted.endswith("%0A&b=2")


def test_a_percent_encoded_form_body_is_read_as_a_document_too() -> None:
    """The same pair as the first value of a form body (`-d 'file=user%20%3D…'`), no `?` before it."""
    doc = "user = Aladdin\npassword = open_sesame\n"

    redacted = R.redact_text(f"curl -d 'file={quote(doc, safe='')}' https://example.test/upload")

    assert "open_sesame" not in redacted


@settings(max_examples=40, deadline=None)
@given(
    encoding=st.sampled_from(["percent", "json", "json_unicode"]),
    lines_before=st.integers(0, 200),
    line_width=st.integers(1, 300),
    same_line=st.integers(0, 20_000),
)
def test_an_encoded_secret_is_found_wherever_it_lies_in_a_long_text(
    encoding: str, lines_before: int, line_width: int, same_line: int
) -> None:
    """Only the lines holding an escape are decoded (a long line around its escapes): the encoded
    secret is found after many plain lines and deep into a long line alike, and the plain text
    around it comes through."""
    plain = ("x" * (line_width - 1) + "\n") * lines_before
    text = plain + "w " * (same_line // 2) + ENCODINGS[encoding](FILE) + "\nthe end"

    redacted = R.redact_text(text)

    assert SECRET not in redacted and PLACEHOLDER.search(redacted)
    assert redacted.startswith(plain) and redacted.endswith("\nthe end")


# a config file as a JSON document holds it (`kubectl get configmap -o json`): its first line starts
# inside a string, its last ends before the string's closing quote
IN_JSON_STRINGS = [
    ("directive", '{"redis.conf": "port 6379\\nrequirepass\\tHunt3r-22x"}, {"next": 1}', "Hunt3r-22x"),
    (
        "block-first-line",
        '{"out": "secrets:\\n  - Wn4Hs8Qk1Ld6Fz3Rp9Vt2M\\n"}, {"next": 1}',
        "Wn4Hs8Qk1Ld6Fz3Rp9Vt2M",
    ),
    (
        "no-escape-in-the-token",
        '{"out": "htpasswd: |\\n  ops:Birch-Lantern-08"}, {"next": 1}',
        "Birch-Lantern-08",
    ),
    ("pretty-printed", '  "my.cnf": "[client]\\nuser=app\\npassword=Hunt3r-22x\\n",', "Hunt3r-22x"),
]


@pytest.mark.parametrize(("case", "text", "secret"), IN_JSON_STRINGS, ids=[c[0] for c in IN_JSON_STRINGS])
def test_a_file_in_a_json_string_is_read_line_by_line_and_the_json_kept(
    case: str, text: str, secret: str
) -> None:
    """The decoded view reads each JSON string's text as lines of its own, and the placeholder stops
    at the string's closing quote: the secret is gone and what is around it still parses."""
    redacted = R.redact_text(text)
    assert secret not in redacted and PLACEHOLDER.search(redacted)
    if text.startswith("{"):
        json.loads("[" + redacted + "]")
    else:
        json.loads("{" + redacted.rstrip(",") + "}")
