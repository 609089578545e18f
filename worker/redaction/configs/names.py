"""Which configuration keys hold credentials, and which values in them are only stand-ins.

A key is split into words (`AUTH0_CLIENT_SECRET`, `clientSecret`, `client-key-data`). Its last word
says what the value is: `password`, `secret`, `token`, `salt`, `key`, `auth` and their compounds
(`dbpassword`, `authToken`) hold a credential; `KEY_ID`, `TOKEN_URL`, `SECRET_FILE`, `*_PATH`
and public keys name something about one. Encoding suffixes (`_B64`, `-data`, `_base64`) and
Rails' `secret_key_base` are read through.

Values (`spared`): only a visible reference or placeholder is left, and an empty value. A weak
real password (`admin`, `irc_pass`, `changeme`) is a secret. `changeme` is kept a secret on
purpose: products ship it as a working default (Elasticsearch's `elastic:changeme`), and a
default left in a config file is a live credential.
"""

from __future__ import annotations

import re
from functools import lru_cache

from worker.redaction.keywords import _NOT_CREDENTIAL_KEY as NOT_CREDENTIAL_KEY
from worker.redaction.keywords import key_words
from worker.redaction.positions import is_reference
from worker.redaction.shapes import MINE, NEXT_KEY, RESOURCE_NAME, has_template, is_yaml_tag, looks_random

_PASSWORD = frozenset(["password", "passwd", "pass", "pwd", "passphrase", "passw", "pw", "pword"])
_SECRET = frozenset(["secret", "salt", "secretkey", "clientsecret", "masterkey"])
_TOKEN = frozenset(["token", "accesstoken", "refreshtoken", "authtoken", "apitoken", "identitytoken"])
_API_KEY = frozenset(["apikey", "accesskey", "authkey", "licensekey", "appkey", "signingkey"])
_PRIVATE = frozenset(["privatekey", "encryptionkey", "accountkey", "sharedaccesskey", "clientkey"])
_CREDENTIAL = frozenset(["credential", "credentials", "cred", "creds"])
# compounds written as one word: `dbpassword`, `smtppasswd`, `clientsecret`, `jwtsecret`
_TAILS = (
    ("password", "password"),
    ("requirepass", "password"),
    ("masterauth", "password"),
    ("rootpw", "password"),
    ("bindpw", "password"),
    ("passwd", "password"),
    ("passphrase", "password"),
    ("secret", "secret"),
    ("token", "token"),
    ("apikey", "api_key"),
)
# words after the credential that say how it is written, not what it is
_ENCODING = frozenset(["data", "b64", "base64", "enc", "encoded", "value", "plain", "plaintext", "cleartext"])
# `sort_key`, `primary_key`: keys of maps and tables (keywords.py's list and more of code's)
_NOT_CREDENTIAL_KEY = NOT_CREDENTIAL_KEY | frozenset(
    [
        "translation",
        "i18n",
        "message",
        "react",
        "list",
        "dedupe",
        "event",
        "metric",
        "field",
        "column",
        "attribute",
        "attr",
        "label",
        "state",
        "query",
        "item",
        "record",
        "entity",
        "local",
        "redis",
        "cursor",
        "config",
        "setting",
        "env",
        "prop",
        "property",
        "header",
        "param",
    ]
)
# `next_token`, `bos_token`, `page_token`: not credentials (pagination, a model's special tokens)
_NOT_CREDENTIAL_TOKEN = frozenset(
    [
        "next",
        "page",
        "continuation",
        "pagination",
        "bos",
        "eos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "stop",
        "max",
    ]
)
# words before `key` that make it a credential in any spelling
_KEY_QUALIFIERS = frozenset(
    [
        "secret",
        "api",
        "access",
        "master",
        "encryption",
        "license",
        "auth",
        "app",
        "account",
        "shared",
        "session",
        "hmac",
        "jwt",
        "webhook",
        "admin",
        "service",
        "server",
        "consumer",
        "crypt",
        "cipher",
        "aes",
        "fernet",
        "storage",
        "subscription",
        "write",
        "read",
        "ingest",
        "sdk",
        "dev",
        "prod",
        "live",
        "test",
        "mail",
        "smtp",
        "sendgrid",
        "stripe",
        "openai",
        "anthropic",
        "google",
        "maps",
        "firebase",
        "x",
        "decryption",
        "validation",
        "machine",
        "preshared",
        "wireguard",
        "host",
        "user",
        "root",
        "repo",
        "registry",
        "cloud",
    ]
)
_PUBLIC = frozenset(["public", "publishable", "pub", "pubkey", "verify", "verification", "known"])


@lru_cache(maxsize=8192)
def credential_kind(key: str) -> tuple[str, bool] | None:
    """(kind, strong) when a config key names a credential, else None. strong: any value but a
    reference is one; weak (a bare `key`, `auth`): the value must also look random."""
    words = key_words(key)
    if not words or any(w in _PUBLIC for w in words):
        return None
    while len(words) > 1 and words[-1] in _ENCODING:
        words = words[:-1]
    if len(words) > 2 and words[-1] == "base" and words[-2] == "key":  # Rails' secret_key_base
        words = words[:-1]
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if words[0] == "existing" or (
        last == "key" and before in ("password", "passwd", "token", "username", "user")
    ):
        return None  # `existingSecret`, `adminPasswordKey`: the name of a stored secret, or of its key
    if last in _PASSWORD:
        return "password", True
    if last in _TOKEN:
        return None if before in _NOT_CREDENTIAL_TOKEN else ("token", True)  # type: ignore[return-value]
    if last in _SECRET:
        return "secret", True
    if last in _API_KEY:
        return "api_key", True
    if last in _PRIVATE:
        # kind `key`, not `private_key`: seams.py reads a `private_key` placeholder's rest as PEM or
        # WireGuard key material, and a config's private key is any string
        return "key", True
    if last in _CREDENTIAL:
        return "credential", True
    if last == "key":
        if not before:
            return "key", False
        if before in _NOT_CREDENTIAL_KEY:
            return None
        if before in ("private", "client", "ssh", "deploy", "signing"):
            return "key", True
        # `STRIPE_KEY=`, `secret_key`, `api-key`: a key; `cursor_key`, `has_more_key`: code's map keys,
        # a key only when the value looks like one
        return "key", key.isupper() or before in _KEY_QUALIFIERS
    if last == "auth":
        return "credential", False
    if last.endswith("pass") and 4 < len(last) <= 14 and last not in _NOT_PASS:
        return "password", True  # `controlpass`, `rootpass`, `smtppass`
    for tail, kind in _TAILS:
        if last.endswith(tail) and (
            len(last) > len(tail) or tail in ("requirepass", "masterauth", "rootpw", "bindpw")
        ):
            return kind, True
    return None


_NOT_PASS = frozenset(
    ["bypass", "compass", "surpass", "trespass", "overpass", "underpass", "impass", "firstpass"]
)
# values that are a mode or a switch, not a credential (`auth: none`, `credentials: include`,
# `id-token: write`, nsswitch's `passwd: files systemd`)
_ENUM = frozenset(
    [
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "null",
        "nil",
        "none",
        "undefined",
        "unknown",
        "~",
        "required",
        "optional",
        "read",
        "write",
        "enabled",
        "disabled",
        "include",
        "omit",
        "same-origin",
        "files",
        "compat",
        "systemd",
        "sss",
        "ldap",
        "nis",
        "winbind",
        "db",
        "string",
        "str",
        "bytes",
        "object",
        "boolean",
        "bool",
        "int",
        "number",
    ]
)
# single words `is_reference` reads as made up that config files use as real passwords
_WEAK = frozenset(["example", "sample", "dummy", "fake", "test", "secret", "password"])
# a vendor token's shape filled with a mask (`npm_xxxxxxxxxxx`, `xoxb-000…-xxxxxxxx`): a placeholder
_MASK = re.compile(r"[xX]{6,}|\*{4,}|#{4,}|\u2022{3,}")
# runs of one character each, two or more (`AAAAAAAAAABBBBBBBBBBCCCCCCCCCC`, a device's export mask)
_RUNS = re.compile(r"(?:(.)\1{3,}){2,}")
# the quote closed a string and code follows (`"+new Buffer(x)`); letters saying they are made up
_CONCAT = re.compile(r"^[+.]\s*(?:new\s+)?[A-Za-z_$][\w$.]*\s*\(")
_MADE_UP = re.compile(r"^[A-Za-z_.-]*(?i:fake|dummy|placeholder)[A-Za-z_.-]*$")
# a whole alphabet run: a made-up example (`sk_abcdefghijklmnopqrstuvwxyz123`)
_SEQUENTIAL = ("abcdefghijk", "ABCDEFGHIJK", "qwertyuiop")
# a command whose output is the value (`\`pass show mail\``, `$(vault read …)`)
_COMMAND = re.compile(r"^`[^`]*`$|^\$\(.*\)$")
# the sample values config templates ship: WordPress' `put your unique phrase here`
_PHRASE = re.compile(
    r"(?i)(?:\b(?:your|put|insert|enter|change)\b.*\b(?:here|phrase|value|key|password|secret|token)\b)"
)
_PUBLIC_VALUE = re.compile(
    r"^(?:ssh-(?:rsa|ed25519|dss)|ecdsa-sha2-|sk-ssh-|-----BEGIN (?:PUBLIC KEY|CERTIFICATE|SSH2 PUBLIC))"
)
# regular expressions (resource names: shapes.RESOURCE_NAME)
_REGEX = re.compile(r"\(\?[:=!<]|\[[^\]\s]*\w-\w[^\]\s]*\](?:[*+?]|\{\d)|\\[dwsSbB][*+?{]|\{\d+,\d*\}")
_PATH = re.compile(r"^(?:/|~/|\./|\.\./|[A-Za-z]:\\|file:)")
# base64 that happens to start with `/` (`/WekAHHK5g0OwakH/sim+mHYc…=`): 32 characters or more, a
# `+` or padding, no dot, a slash in 8 characters at most (`/home/me/notepad++/build` is a path)
_BASE64_BLOB = re.compile(r"/[A-Za-z0-9+/]{19,}={0,2}")


def spared(value: str, kind: str, strong: bool) -> bool:
    """Whether a value in a credential position is only a stand-in (or empty): a reference
    (`${VAR}`, `$VAR`, `%(name)s`, `{{ x }}`, `<password>`), a mask (`****`, `xxxx`), a sample
    phrase, a mode word (`true`, `none`), a file path, a public key. Anything else is a secret."""
    v = value.strip().strip("'\"")  # `"'$PRECOMPILE_PASSWORD'"`: quotes inside quotes
    if v and not any(c.isalnum() for c in v):
        return True  # punctuation only (`,.:-@*?!`): a mask or a test of the parser, no password
    if _CONCAT.match(v) or _MADE_UP.match(v) or MINE.fullmatch(v) or any(run in v for run in _SEQUENTIAL):
        return True
    if NEXT_KEY.fullmatch(value.strip()) or is_yaml_tag(v):
        return True  # `password= auth_user=`: empty, then the next key; `!vault |`: the value follows
    if has_template(v):
        return True  # a template: `"#{visibility}_cursor"`, `"prefix-${ENV}"` (`m{{h}o)p${e]…` is none)
    weak = v.lower() in _WEAK  # `POSTGRES_PASSWORD: example` (the postgres image's docs): a working password
    if not v or (is_reference(v) and not weak) or _COMMAND.match(v) or _MASK.search(v) or _RUNS.fullmatch(v):
        return True
    low = v.lower()
    if low in _ENUM or all(w in _ENUM for w in low.split()):
        return True
    if " " in v and _PHRASE.search(v) is not None:
        return True
    path = _PATH.match(v) is not None and not (
        _BASE64_BLOB.fullmatch(v)
        and ("+" in v or v.endswith("="))
        and v.count("/") * 8 <= len(v)
        and looks_random(v, min_len=32, min_bits=3.5)
    )
    if _PUBLIC_VALUE.match(v) or path or RESOURCE_NAME.match(v) or _REGEX.search(v):
        return True
    if v.isdigit() and (len(v) < 4 or (kind != "password" and len(v) < 8)):
        return True  # a count, a port, a bcrypt cost
    if not strong:
        return " " in v or not (looks_random(v, min_len=8, min_bits=2.5) or _made_by_hand(v))
    return False


def _made_by_hand(value: str) -> bool:
    """A password a person made: 10 characters or more, upper and lower case, a symbol that is no
    separator of names (not `.`, `/`, `_`), and a letter swapped for a digit inside a word
    (`tac1-Sh4red-Birch`, `W1nter-Sun!`): what names, keys and versions (`Build-2024-Release`,
    `homePage.step2Title`, `S3BucketName-prod`, `IPv6Address-Primary`) have not."""
    if not 10 <= len(value) <= 64 or value.isupper() or value.islower():
        return False  # (no person types 64 characters; a longer value is judged by its looks)
    if not any(not c.isalnum() and c not in "._/" for c in value) or "." in value or "/" in value:
        return False
    return any(not _TECH.match(m.group().lower()) for m in _LEET.finditer(value))


# a digit that stands for a letter inside a word (0 o, 1 i or l, 3 e, 4 a, 5 s, 7 t)
_LEET = re.compile(r"[A-Za-z]+[013457][A-Za-z]+")
# words of technology that hold such a digit: not a person's choice
_TECH = re.compile(r"(?:s3|ec2|md5|log4|i18|l10|k8|x509|utf|ipv|win3|oauth|base64|sha|h26|p2p|mp3|mp4|b2|r2)")
