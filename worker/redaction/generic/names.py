"""Which names name a credential, in any spelling, without knowing the format or the vendor.

A name is a key, directive, attribute, element, header or flag: `auth_pass`, `requirepass`,
`sentinel-pass`, `passwod`, `rocommunity`, `wpa_psk`, `X-Upstream-Token`, `passwd/user-password`.
Its words are split as keywords.py splits keys (snake, kebab, dotted, slashed, camelCase), and
its last word decides, as in config positions: the config positions' own names first
(configs/names.py), then any last word that holds a credential stem (`pass`, `pwd`, `secret`,
`token`, `psk`, `pepper`, `community`, `credential`; `cred` whole) or is a credential compound of `key` or `auth` (`authkey`,
`apikey`, bare `auth`). A last word that says the value is about a credential (`_file`, `_type`,
`_length`, `authentication`, `bypass`) is not one.
"""

from __future__ import annotations

from functools import lru_cache

from worker.redaction.configs.names import credential_kind
from worker.redaction.keywords import key_words

# stems of a last word, the kind each names, in order
_STEMS = (
    ("passw", "password"),
    ("passphrase", "password"),
    ("pass", "password"),
    ("pwd", "password"),
    ("secret", "secret"),
    ("psk", "secret"),
    ("pepper", "secret"),
    ("community", "secret"),
    ("token", "token"),
    ("credential", "credential"),
)
# last words that hold a stem and name something else: the English words, and what a credential
# is about (its type, its file, how it is checked)
_NOT_CREDENTIAL = frozenset(
    [
        "bypass",
        "compass",
        "passage",
        "passenger",
        "passengers",
        "passive",
        "passthrough",
        "passthru",
        "passport",
        "passed",
        "passes",
        "passing",
        "passable",
        "surpass",
        "trespass",
        "overpass",
        "underpass",
        "encompass",
        "tokenizer",
        "tokenize",
        "tokenized",
        "tokenization",
        "tokens",
        "secretary",
        "secretion",
        "credit",
        "credits",
        "incredible",
        "credentialsfile",
        "pwdfile",
        "passfile",
        "passwdfile",
        "passwordfile",
        "communities",
        "passwordeval",
        "passeval",
        "passcmd",
        "passwordcmd",
        "passwordcommand",
        "tokencmd",
    ]
)
# words after the stem that say what the value is about, not that it is the credential
_ABOUT = frozenset(
    [
        "file",
        "files",
        "path",
        "dir",
        "type",
        "types",
        "length",
        "len",
        "size",
        "id",
        "ids",
        "name",
        "names",
        "url",
        "uri",
        "ref",
        "env",
        "var",
        "mode",
        "policy",
        "hash",
        "format",
        "prompt",
        "expiry",
        "expires",
        "timeout",
        "ttl",
        "count",
        "min",
        "max",
        "encryption",
        "strength",
        "reset",
        "weak",
        "login",
        "fullname",
        "uid",
        "enabled",
        "required",
        "command",
        "cmd",
        "helper",
        "source",
        "endpoint",
        "header",
        "method",
        "methods",
        "scheme",
        "provider",
        "store",
        "manager",
        "key",
    ]
)
_PUBLIC = frozenset(["public", "publishable", "pub", "pubkey", "known"])
_AUTH_COMPOUNDS = frozenset(["auth", "authkey", "authpass", "authpw", "authtoken", "authsecret"])
# `auth` compounds that say how or whether one authenticates, not with what
_NOT_AUTH = frozenset(["oauth", "noauth", "preauth", "reauth", "unauth", "nauth", "mauth"])
_KEY_COMPOUNDS = frozenset(["apikey", "authkey", "secretkey", "privatekey", "presharedkey", "psk"])


# words that say a name's value is a place, not the thing (`url_private`: a private file's URL)
_WHERE = frozenset(["url", "uri", "path", "file", "link", "dir", "host", "endpoint", "bucket", "repo"])


@lru_cache(maxsize=8192)
def credential_name(name: str) -> tuple[str, bool] | None:
    """(kind, strong) when a name names a credential, else None. strong: any value but a visible
    reference or placeholder is one; weak (bare `key`, `auth`): it must also look random."""
    named = credential_kind(name)
    if named is not None:
        return named
    words = key_words(name)
    if not words or words[0] == "existing" or any(w in _PUBLIC for w in words):
        return None  # `existingSecret`: the name of a stored secret; a public key
    last = words[-1]
    if last in _ABOUT or last in _NOT_CREDENTIAL:
        return None
    if last in ("cred", "creds"):
        return ("credential", True)
    if last in _AUTH_COMPOUNDS:
        return ("credential", last != "auth")
    if last.endswith("auth") and len(last) > 4 and last not in _NOT_AUTH:
        return ("credential", False)  # `rpcauth`, `proxyauth`, `basicauth`: its value must look random
    if last in _KEY_COMPOUNDS:
        return ("key", True)
    if last.startswith("auth"):
        return None  # `authentication`, `authority`, `author`: what is checked, not the credential
    if last in ("private", "priv") and len(words) >= 2 and not _WHERE.intersection(words):
        return ("private_key", False)  # `vapidPrivate`, `ed25519_priv`: a key pair's private half
    for stem, kind in _STEMS:
        if stem in last:
            return kind, True
    return None
