"""The strict profile (`COMPACTD_REDACTION=strict`): what stands where a credential stands goes too.

The standard profile redacts what is a credential and keeps what only sits where one could:
references (`$Password`, `%PASS%`, `${TOKEN}`), placeholders (`AKIAZZZZZZZZZZZZZZZZ`,
`npm_xxxxxxxx`), and identifiers that unlock nothing alone (account ids, ARNs, bucket hosts,
public IP addresses, user names). An agent keeps reading and editing the code it works on, so that
is the default. A deployment whose histories must not carry those either turns on the strict
profile. The standard rules run in it as they are, and where spans overlap they merge, so it
finds everything the standard profile finds; it adds three things:

- every value in a credential's place is redacted whatever it looks like: a rule's candidate that
  its judge turned down as a reference, a placeholder or code is taken when its key names a
  credential (`password = $Password`, `token: SOME_TOKEN`; code written unquoted, such as
  `api_key = os.environ["KEY"]` or `token = store.mint(id)`, stays), and a
  vendor token's look-alike is taken whole (`AKIAZZZZZZZZZZZZZZZZ`, `xoxb-0000-…-xxxx`);
- a key naming a credential takes its whole value: to the line's end unquoted (`secret: a b c`),
  across adjacent shell quotes (`API_KEY='abc''def'`), and the quoted argument of a call on it
  (`secret.assign("…")`); JSON fields named so are redacted whatever they hold (redact.py);
- identifiers (`IDENTIFIERS`): public IPv4 addresses, AWS ARNs and account ids, S3 and GCS bucket
  hosts, Shopify stores, Google OAuth client ids, and user names and client ids in config.

What it costs is measured (BENCHMARKS.md, "Strict profile"): the bench's negatives it flags, and
the extra replacements in real agent transcripts. It was written against the secret corpus it
is scored on (TUNING.md 2026-11-24, strict): its figures there are in-sample.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace

from worker.redaction.detectors import DETECTORS, KEY_PATTERN, SEPARATOR
from worker.redaction.keywords import key_words, secret_kind_of_key
from worker.redaction.rules import Detector, Judge, Judged, strip_quotes
from worker.redaction.vendors import TOKENS

# a key whose words say it counts or describes credentials rather than holding one
_NOT_HELD = frozenset(
    [
        "tokens",
        "tokenizer",
        "tokenize",
        "tokenized",
        "count",
        "counts",
        "size",
        "length",
        "len",
        "limit",
        "ttl",
        "timeout",
        "expiry",
        "expires",
        "expiration",
        "type",
        "types",
        "url",
        "uri",
        "endpoint",
        "path",
        "file",
        "name",
        "names",
        "id",
        "ids",
        "usage",
        "prompt",
        "details",
        "store",
        "registry",
        "ex",
        "py",
        "rb",
        "js",
        "ts",
        "go",
        "rs",
        "json",
        "yaml",
        "yml",
        "md",
        "txt",
    ]
)
# prose's small words after a credential's name (`the password for the user`, `token is`) and
# code's keywords before an expression (`credentials = new NetworkCredential(…)`): no value
_PROSE_WORDS = (
    "a an the for of to in on at by as with from and or is are was be been will can must should not"
    " that this it if when you your we our new await function lambda"
)
_PROSE = frozenset(_PROSE_WORDS.split())
_HELD = ("password", "passwd", "passphrase", "secret", "token", "apikey", "credential", "privatekey")


# ids the API mints (`toolu_01…Pw` reads as a key ending in `pw`)
_MINTED = re.compile(r"(?:toolu|srvtoolu|msg|req|call|file)_")
# what holds no literal: a call or an attribute (`document.querySelector(…)`, `project.id`),
# a subscript (`os.environ["KEY"]`), a literal of the language (`null`, `true`, `:unique`), a
# number, a camelCase variable (`csrfToken`), a constructor (`new NetworkCredential(…)`)
_CODE = re.compile(
    r"(?:(?:new|await)\s+)?[^\s(]*\(|[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)+$|(?i:null|nil|none|true|false)$|:\w+$|\d+$"
    r"|[a-z]+[A-Z][A-Za-z0-9]*$|[A-Za-z_$][\w$.]*\["
)


def names_credential(key: str) -> bool:
    """Whether a key names a credential it holds: what `secret_kind_of_key` says, and any key
    with a credential word in it (`my_password_sec`, `square_oauth`), but not counts and
    descriptions (`max_tokens`, `token_type`, `password_length`), files (`token_store.ex`) or
    minted ids."""
    words = key_words(key)
    if not words or words[-1] in _NOT_HELD or _MINTED.match(key.strip("\"'$@")):
        return False
    flat = "".join(words)
    named = secret_kind_of_key(key)
    if named == ("key", False) and words[-1] not in ("key", "keys"):
        return False  # `@keyup.enter`, `keyboard_layout`: a bare `key` names one only at the end
    return (
        named is not None
        or any(w in flat for w in _HELD)
        or any(w in ("auth", "oauth", "pass", "pwd") for w in words)
    )


def _lenient(detector: Detector) -> Detector:
    """The detector with its judge overruled where the strict profile wants more: a vendor
    token's look-alike whole, a keyed candidate's value when the key names a credential."""
    judge = detector.judge
    vendor = detector in TOKENS and detector.key_group is None

    def strict_judge(secret: str, key: str | None) -> Judged:
        judged = judge(secret, key)
        if judged is not None or detector.name == "high_entropy_string":
            return judged
        if vendor:
            return detector.name, 0, len(secret)
        if key is not None and names_credential(key):
            lo, hi, quoted = strip_quotes(secret)
            return (detector.name, lo, hi) if held(secret[lo:hi], quoted, key) else None
        return None

    return replace(detector, judge=strict_judge)


_COMMENT = re.compile(r"\s+(?:#|//|;).*$")


def held(value: str, quoted: bool, key: str) -> bool:
    """Whether a value in a credential's place is taken by the strict profile: anything but code
    written unquoted (a call, an attribute, a language literal) and, under a bare `key`, short
    values (`keys: :unique`). References (`$Password`, `%PASS%`, `SOME_TOKEN`) are taken."""
    v = value.strip()
    if not any(c.isalnum() for c in v) or (not quoted and (_CODE.match(v) or v.lower() in _PROSE)):
        return False
    named = secret_kind_of_key(key)
    return not (named is not None and not named[1] and len(v) < 8)


def _whole_value(secret: str, key: str | None) -> Judged:
    """A credential key's whole value: adjacent quoted strings together, or the rest of the line
    without a trailing comment."""
    if key is None or not names_credential(key):
        return None
    if secret[:1] in "\"'`":
        return ("secret", 0, len(secret)) if held(secret.replace(secret[0], ""), True, key) else None
    value = _COMMENT.sub("", secret).rstrip(" \t")
    return ("secret", 0, len(value)) if held(value, False, key) else None


def _quoted_argument(secret: str, key: str | None) -> Judged:
    lo, hi, _ = strip_quotes(secret)
    return (
        ("secret", lo, hi)
        if key is not None and names_credential(key) and held(secret[lo:hi], True, key)
        else None
    )


def _public_ip(secret: str, key: str | None) -> Judged:
    try:
        address = ipaddress.IPv4Address(secret)
    except ValueError:
        return None
    return ("ip_address", 0, len(secret)) if address.is_global else None


# ids that name who or which account, not what (a session, a request, a file)
_ACCOUNT_WORDS = frozenset(
    [
        "client",
        "app",
        "account",
        "tenant",
        "subscription",
        "org",
        "organization",
        "consumer",
    ]
)
_NOT_ACCOUNT = frozenset(
    [
        "session",
        "request",
        "trace",
        "span",
        "message",
        "msg",
        "tool",
        "file",
        "run",
        "job",
        "task",
        "thread",
        "process",
        "parent",
        "node",
        "item",
        "order",
        "product",
        "event",
        "object",
        "commit",
        "build",
        "issue",
        "page",
        "row",
        "record",
        "line",
        "model",
        "version",
        "container",
        "image",
        "instance",
        "chat",
        "conversation",
        "turn",
        "call",
        "step",
        "doc",
        "document",
        "block",
        "chunk",
    ]
)


def _identity(secret: str, key: str | None) -> Judged:
    """A user name or an account's id in config: `REACT_APP_USER=postgres`, `TWITTER_ID: "…"`."""
    words = key_words(key or "")
    if not words:
        return None
    last = words[-1]
    account_id = last == "id" and len(words) > 1 and words[-2] not in _NOT_ACCOUNT
    env_style = re.fullmatch(r"[A-Z0-9_]+", (key or "").strip()) is not None
    if not (
        last in ("user", "username", "login") or (account_id and (words[-2] in _ACCOUNT_WORDS or env_style))
    ):
        return None
    lo, hi, quoted = strip_quotes(secret)
    value = secret[lo:hi]
    # a value that repeats its key is a variable of that name (`user: user`, `client_id: client_id`)
    echo = key_words(value) == words[-len(key_words(value)) :] if key_words(value) else False
    return ("identifier", lo, hi) if len(value) >= 3 and held(value, quoted, "") and not echo else None


def _whole(kind: str) -> Judge:
    def judge(secret: str, key: str | None) -> Judged:
        return kind, 0, len(secret)

    return judge


_HOST = r"[a-z0-9][a-z0-9._-]*"
_VALUE_END = r"[^\s\"'`<>,;)\]}]"

IDENTIFIERS: tuple[Detector, ...] = (
    Detector("ip_address", r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b", _public_ip, lane=3),
    Detector(
        "aws_arn",
        r"\barn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:[0-9]{0,12}:" + _VALUE_END + "+",
        _whole("aws_arn"),
        lane=3,
    ),
    Detector(
        "aws_account_id",
        r"(?i:account[_-]?id)[\"']?[ \t]*[:=][ \t]*[\"']?([0-9]{12})\b",
        _whole("aws_account_id"),
        1,
        lane=3,
    ),
    Detector(
        "cloud_storage",
        r"\b" + _HOST + r"\.(?:s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com|storage\.googleapis\.com)\b"
        r"|\b(?:s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com|storage\.googleapis\.com)/" + _HOST,
        _whole("cloud_storage"),
        lane=3,
    ),
    Detector("shopify_store", r"\b" + _HOST + r"\.myshopify\.com\b", _whole("shopify_store"), lane=3),
    Detector(
        "google_client_id",
        r"\b[0-9]{6,}-[a-z0-9]{32}\.apps\.googleusercontent\.com\b",
        _whole("google_client_id"),
        lane=3,
    ),
    # vendor prefixes with a placeholder body the vendor patterns' lengths and alphabets refuse
    Detector(
        "vendor_token",
        r"\b(?:AKC|AP[0-9A-F])[A-Za-z0-9]{10,}\b|\bAC[A-Za-z0-9]{32}\b|\bnpm_[A-Za-z0-9]{8,}\b",
        _whole("vendor_token"),
        lane=3,
    ),
    Detector(
        "identifier",
        r"([A-Za-z0-9_.-]+)\\*[\"']?" + SEPARATOR + r"(\\*[\"']?" + _VALUE_END + r"+)",
        _identity,
        2,
        1,
        lane=4,
    ),
    Detector(
        "secret",
        KEY_PATTERN
        + SEPARATOR
        # adjacent quoted strings, or an unquoted value to the line's end (a `\\n` escape ends it too)
        + r"((?:\"[^\"\r\n]*\"|'[^'\r\n]*')+|[A-Za-z0-9$%@!*&^~<_+./-](?:[^\r\n\"'`{}\[\],;\\]|\\[^n]){0,200})",
        _whole_value,
        2,
        1,
        lane=3,
    ),
    Detector(
        "secret",
        KEY_PATTERN + r"[ \t]*\([ \t]*(\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}')",
        _quoted_argument,
        2,
        1,
        lane=3,
    ),
)

STRICT_DETECTORS: tuple[Detector, ...] = (*map(_lenient, DETECTORS), *IDENTIFIERS)
