"""Secret-bearing names: which keys (`password`, `api_key`, `AUTH_TOKEN`) hold credentials.

A key is split into words (snake, kebab, dotted and camelCase alike); its last word says whether
it names the secret itself (`client_secret`) or something about it (`secret_name`, `token_url`,
`credentialsId`), and its letters say which kind of credential it is.
"""

from __future__ import annotations

import re
from functools import lru_cache

from worker.redaction.shapes import (
    NEXT_KEY,
    RESOURCE_NAME,
    is_code,
    is_file_path,
    is_placeholder,
    is_wordy,
    looks_random,
)

_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

# A key ending in one of these words describes a secret without holding it.
_ABOUT = frozenset(
    [
        "id",
        "ids",
        "uuid",
        "guid",
        "name",
        "names",
        "file",
        "files",
        "filename",
        "path",
        "paths",
        "dir",
        "url",
        "urls",
        "uri",
        "endpoint",
        "host",
        "type",
        "types",
        "kind",
        "size",
        "length",
        "len",
        "count",
        "hash",
        "sha",
        "digest",
        "checksum",
        "version",
        "format",
        "mode",
        "prefix",
        "suffix",
        "header",
        "headers",
        "field",
        "fields",
        "param",
        "params",
        "var",
        "variable",
        "variables",
        "env",
        "policy",
        "ref",
        "refs",
        "algorithm",
        "alg",
        "provider",
        "timeout",
        "ttl",
        "expiry",
        "expires",
        "expiration",
        "usage",
        "limit",
        "class",
        "method",
        "label",
        "description",
        "desc",
        "hint",
        "help",
        "message",
        "msg",
        "title",
        "text",
        "pattern",
        "regex",
        "index",
        "idx",
        "column",
        "table",
        "schema",
        "store",
        "storage",
        "manager",
        "service",
        "helper",
        "factory",
        "handler",
        "validator",
        "error",
        "errors",
        "required",
        "enabled",
        "disabled",
        "visible",
        "flag",
        "flags",
        "source",
        "location",
        "mask",
        "input",
        "form",
        "strength",
        "rotation",
        "reset",
        "changed",
        "generator",
        "min",
        "max",
        "fingerprint",
        "thumbprint",
        "signature",
        "spec",
        "config",
        "cfg",
        "template",
        "placeholder",
        "prompt",
        "field",
        "type",
        "parameter",
        "arg",
        "args",
        "option",
        "options",
        "list",
        "set",
        "map",
        "dict",
        "bits",
        "bytes",
        "length",
        "chars",
        "charset",
        "hint",
        "event",
        "events",
        "button",
        "link",
        "route",
        "page",
        "view",
        "mapping",
        "salt",
        "rounds",
        "iterations",
        "cost",
        "sec",
        "seconds",
        "ms",
        "lifetime",
        "age",
        "days",
        "expire",
        "expired",
        "valid",
        "validity",
    ]
)
# `cache_key`, `sort_key`, `primary_key`: keys of a map or table, not credentials
_NOT_CREDENTIAL_KEY = frozenset(
    [
        "cache",
        "sort",
        "partition",
        "primary",
        "foreign",
        "idempotency",
        "lookup",
        "dedup",
        "object",
        "row",
        "map",
        "hot",
        "shortcut",
        "dict",
        "group",
        "unique",
        "composite",
        "routing",
        "join",
        "index",
        "hash",
        "range",
        "s3",
        "storage",
        "keyboard",
    ]
)
_PUBLIC = ("public", "publishable", "pubkey", "verify", "verification")
_PASSWORD = ("password", "passwd", "passphrase", "pwd", "passw")
_TOKEN = ("token", "bearer", "session_key", "sessionkey", "cookie")
_API_KEY = ("apikey", "accesskey", "authkey", "licensekey", "secretkey", "masterkey", "signingkey")
_PRIVATE = ("privatekey", "private_key", "encryptionkey", "clientkey", "accountkey", "sharedaccesskey")


def key_words(key: str) -> list[str]:
    """The lower-case words of a key name: `AUTH0_CLIENT_SECRET` -> [auth, 0, client, secret]."""
    return [w.lower() for w in _WORDS.findall(key)]


# Keys whose random-looking values are data, not credentials (hashes, ids, encoded content).
_DATA = _ABOUT | frozenset(
    [
        "integrity",
        "nonce",
        "etag",
        "commit",
        "sha1",
        "sha256",
        "sha512",
        "md5",
        "data",
        "content",
        "image",
        "body",
        "payload",
        "blob",
        "b64",
        "base64",
        "encoded",
        "icon",
        "logo",
        "font",
        "cursor",
        "state",
        "checksum",
        "serial",
        "revision",
        "rev",
        "build",
        "tag",
        "hmac",
        "certificate",
        "cert",
        "crt",
        "csr",
        "ca",
        "pem",
    ]
)


@lru_cache(maxsize=4096)
def names_other_value(key: str) -> bool:
    """True when a key says its value is an id, hash, name or encoded data (not a credential)."""
    words = key_words(key)
    return bool(words) and (words[-1] in _DATA or any(p in w for w in words for p in _PUBLIC))


@lru_cache(maxsize=4096)
def secret_kind_of_key(key: str) -> tuple[str, bool] | None:
    """(kind, strong) when key names a credential; None for other keys.

    strong: the name alone makes a literal value a secret (`password`, `token`, `api_key`);
    weak (a bare `key`): the value must also look random.
    """
    words = key_words(key)
    if not words or words[-1] in _ABOUT or any(p in w for w in words for p in _PUBLIC):
        return None
    flat = "".join(words)
    if any(p in flat for p in _PASSWORD) or words[-1] in ("pass", "pw") or "pass" in words:
        return "password", True
    if any(p in flat for p in _PRIVATE):
        return "private_key", True
    if any(p in flat for p in _API_KEY) or ("api" in words and "key" in flat):
        return "api_key", True
    if "secret" in flat:
        return "secret", True
    if any(p in flat for p in _TOKEN) or "pat" in words:
        return "token", True
    if "credential" in flat or "credentials" in words or words[-1] in ("auth", "creds", "cred"):
        return "credential", True
    if "key" in flat and not (len(words) > 1 and words[-2] in _NOT_CREDENTIAL_KEY):
        return "key", False
    return None


def is_assigned_secret(
    kind: str, strong: bool, value: str, quoted: bool, env_style: bool = False, key_hint: str = ""
) -> bool:
    """Whether `value`, assigned to a key of this kind, is a credential rather than a stand-in.

    env_style: the key is written like an environment variable or INI entry (`DB_PASSWORD=`,
    `Password=`), where an unquoted word is a literal value, not a variable of some program.
    """
    v = value.strip()
    # structure before looks: a password is spared only when it visibly stands in for one
    if is_placeholder(v, runs=kind != "password") or echoes_key(key_hint, v):
        return False
    if RESOURCE_NAME.match(v) or _CONCATENATION.match(v):
        return False
    if not quoted and (v.endswith("(") or NEXT_KEY.fullmatch(v)):
        return False  # `os.getenv(`: a call; `password= auth_user=`: empty, then the next key
    if kind == "credential" and not quoted and _MODE_WORD.fullmatch(v):
        return False  # `auth=MSCHAPV2`, `auth: PLAIN`: a method's name
    if is_file_path(v) or _URL_PATH.match(v) or _COLOR.match(v) or _REGEX.search(v):
        return False
    # `token: TokenInterface):`, `_tokens = (IMPORT, …)`, `[token for …]`: code, not a literal
    code = v[0] in "([" or is_code(v.rstrip(")]}:,;"))
    if not quoted and code and not (env_style or (v.isdigit() and len(v) >= 8)):
        return False
    if not strong:
        return looks_random(v, min_len=16, min_bits=3.0)
    if len(v) < 6 or (v.isdigit() and len(v) < 8):
        return False
    if _ENV_NAME.match(v):
        return False
    if kind == "password":
        return True
    if quoted:
        # `token.markup = "linkify"`, `tokentype = "do_comment"`: a word, not a token
        return _LETTER_WORDS.match(v) is None or not is_wordy(v)
    return " " not in v and not is_wordy(v)


_WORD = re.compile(r"^[A-Za-z_]+$")
_ALNUM = re.compile(r"[^a-z0-9]")


def echoes_key(key: str, value: str) -> bool:
    """A value that repeats its own key name (`API_KEY = "API_KEY"`, `addPassword = "#add-password"`).

    A value holding the key plus filler words (`"YOUR_API_KEY_HERE"`) echoes it too; one holding
    it plus digits or other text (`"CleartextPassword1"`, `"thisismypassword"`) is a value.
    """
    k, v = _ALNUM.sub("", key.lower()), _ALNUM.sub("", value.lower())
    if len(v) < 6 or len(k) < 6:
        return False
    if v in k or (k in v and any(c in value for c in ".[(") and is_code(value.rstrip(",;})]"))):
        # `self.password`, `parts['password']`: code reading the same-named field
        return True
    return k in v and _FILLER_WORDS.fullmatch(v.replace(k, "", 1)) is not None


_LETTER_WORDS = re.compile(r"^[A-Za-z][A-Za-z_.-]*$")
_FILLER_WORDS = re.compile(
    r"(?:your|my|the|here|goes|enter|insert|put|value|example|sample|dummy|fake|test|new|default|some)*"
)


_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
# a method's name: upper-case letters, at most two digits at the end (`MSCHAPV2`, `PLAIN`, `NTLM`)
_MODE_WORD = re.compile(r"[A-Z][A-Z_-]{1,13}[A-Z]\d{0,2}")
# `#68175A`: a colour; `(?:%25|%)`, `[0-9A-F]{1,4}`, `\d+`: a regular expression
_COLOR = re.compile(r"^#(?:[0-9A-Fa-f]{3}){1,2}(?:[0-9A-Fa-f]{2})?$")
_REGEX = re.compile(r"\(\?[:=!<]|\[[^\]\s]*\w-\w[^\]\s]*\][*+?{]|\\[dwsSbB][*+?{]|\{\d+,\d*\}")
# `"…password = "+new Buffer(x)`: the quote closed a string and code follows
_CONCATENATION = re.compile(r"^[+.]\s*(?:new\s+)?[A-Za-z_$][\w$.]*\s*\(")
# `"/en/enterprise-server@3.0/auth"`: a site path of two or more segments
_URL_PATH = re.compile(r"^/[\w.@~-]+(?:/[\w.@~-]+)+/?$")
