"""Vendor-style tokens nobody has a rule for: a short prefix, then a long random body.

    ztk_live_4Q9vX2mB7rL8tY3wZ6pN1sK5     upt_Hq7Zx2Lm9Rv4Tk8Wn3Bs6Yc1     acme-pat-Q7vL2…

And shapes that are credentials by structure wherever they sit: password hashes after their
scheme (`{SSHA}W6ph5Mm5Pz8G…`, `$6$salt$…`: crackable offline), JSON Web Tokens (`eyJ….eyJ…`), a
random key after its owner's number (`123456789:AAHdqTcv…`, a bot's id and its secret), and padded
base64 that decodes to `user:password` (`YWRtaW46cGFzc3dvcmQ=`).

Judged by shape alone: a prefix of one to three short words ending in `_`, `-` or `.` (`ghp_`,
`xoxb-`, `SG.`, `dp.st.`), then a body of 20 or more letters and digits that `_` and `-` may
break after its first five (base64url: `xoxb-1234…-5678…-AbC…`, `hvb.AAAAAQJg…-ynBv…_fnX8…`),
with upper and lower case or letters and digits mixed, high entropy per character and no run of
words; or a hex body of 32 or more (128 bits) after a prefix that names no digest or id
(`shpat_5674…`). What looks like that and is no secret is
excluded by its structure, not by a list of prefixes:

- hashes and encoded text: a hex body shorter than 128 bits or after a prefix that names a digest
  or an id (`sha256-…`, `commit_…`; git SHAs and content hashes have no prefix at all), or a body
  of base64 that decodes to printable text;
- ids a system mints: a body in a versioned id format (`01` then base62: `toolu_01…`, `msg_01…`),
  any token in an id's position (after a key or word that names an id: `"id": "…"`,
  `tool_use_id`, `call_id=`), and the ids of the wire formats compactd itself stores (`call_…`,
  `chatcmpl-…`: the one list, since an OpenAI call id has no shape a token lacks);
- public keys: a prefix that says so (`pk_…`, `pub_…`, `publishable_…`);
- versions, paths and encoded data: a token inside a path or URL path (`/`, `\\` before it), with
  dots in its body (a version, a host, a file name), or whose body runs on as base64 (`+`, `/`,
  `=` after it: `sha512-rp3So…+ppb…==`) — the body pattern takes letters and digits only.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator

import re2

from worker.redaction.configs.names import spared
from worker.redaction.generic.names import credential_name
from worker.redaction.search import leftmost, match_spans
from worker.redaction.shapes import entropy_bits, is_wordy

Span = tuple[str, int, int]


def _spans_only() -> re2.Options:
    options = re2.Options()
    options.never_capture = True
    return options


# the candidates: a prefix, then a body whose first run holds an upper-case letter or a digit (a
# random body has one), does not start like a versioned id (`01…`) and is five or more long (a
# UUID's second group is four: `fa812bfe-b295-…` is no candidate)
_PATTERN = (
    rb"(?:^|://|[^A-Za-z0-9_./\\-])((?:[A-Za-z][A-Za-z0-9]{1,9}[_-]){1,3}|(?:[A-Za-z]{2,5}\.){1,3})"
    rb"((?:[1-9A-Z]|0[A-Za-z]|[a-z]+[A-Z0-9])[A-Za-z0-9]{4}[A-Za-z0-9_-]{13,240}[A-Za-z0-9])"
    rb"(?:[^A-Za-z0-9_/.+=-]|$)"
)
# RE2 finds the candidates' spans (one DFA pass, no groups); `re` reads the groups of each one
CANDIDATE = re2.compile(_PATTERN, _spans_only())
_GROUPS = re.compile(_PATTERN)
_SEPARATORS = re.compile(rb"[_-]")
_MIN_BODY = 20
# a JSON Web Token: a base64url JSON header and payload (`eyJ…`), then the signature
JWT = re2.compile(rb"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_-]{8,})?")
# base64 with padding that may be `user:password` (Basic auth, a Secret's data)
PADDED = re2.compile(rb"(?:^|[^A-Za-z0-9+/])([A-Za-z0-9+/]{11,200}={1,2})")
_HEX = re.compile(rb"^[0-9a-fA-F]+$")
# the ids of the wire formats compactd speaks (Anthropic and OpenAI tool calls, messages, requests,
# files, responses): minted by the API, stored in every transcript, and no different in shape from
# a token; their prefixes are the one list here (redact.py keeps their fields unscanned too)
_MINTED = frozenset(
    [
        b"toolu_",
        b"srvtoolu_",
        b"mcptoolu_",
        b"msg_",
        b"call_",
        b"req_",
        b"file_",
        b"chatcmpl-",
        b"resp_",
        b"fc_",
        b"run_",
        b"thread_",
        b"asst_",
        b"batch_",
        b"step_",
        b"cs_",
        b"rs_",
        b"ws_",
    ]
)
# a key or word right before the token that names an id (`"id": "`, `tool_use_id=`, `call_id `) or
# a public value (`"vapidPublic": "`, `public_key = `)
_NAMED_BEFORE = re.compile(
    rb"(?:(?:\b|_)(?i:ids?)|[a-z]I[Dd]s?)[\"'\[\]\s:=,]{0,8}$|(?i:public|publishable|pubkey)[\w.-]{0,12}[\"'\s:=,]{1,8}$"
)
# words joined in camel case (`SomeLongIdentifierName12`): a name, however long
# a prefix that says the key is public (`pk_live_…`, `pub-…`): published by design
_PUBLIC = re.compile(rb"^(?:pk|pub|public|publishable)[_-]")
_CAMEL_WORD = re.compile(r"[A-Z]?[a-z]{3,}")
_TITLE_WORD = re.compile(r"[A-Z][a-z]{3,}")
_MIN_BITS = 3.6
_MIN_LETTER_BITS = 4.0


def random_body(body: bytes) -> bool:
    """A body that reads as random: mixed classes, high entropy, not words joined up. Letters alone
    are random when upper and lower case are mixed throughout (a quarter to three quarters upper
    case: camelCase names have an upper-case letter a word); with digits, when the letters are not
    mostly words."""
    text = body.decode("ascii").replace("_", "")
    digits = sum(c.isdigit() for c in text)
    upper = sum(c.isupper() for c in text)
    lower = sum(c.islower() for c in text)
    if lower + upper < 6:
        return False
    if sum(len(w) for w in _TITLE_WORD.findall(text)) >= 0.5 * len(text):
        return False  # `SponsoredProductsRemoteRHFSearch…`: capitalised words, however mixed
    if digits < 2:
        mixed = 0.25 <= upper / (upper + lower) <= 0.75
        return mixed and len(text) >= 24 and entropy_bits(text) >= _MIN_LETTER_BITS
    if upper == 0 and digits < 4:
        return False  # lower-case letters and a number or two: a name with a counter
    if upper < 0.2 * (upper + lower) and sum(len(w) for w in _CAMEL_WORD.findall(text)) >= 0.6 * len(text):
        return False
    return entropy_bits(text) >= _MIN_BITS and not is_wordy(text)


# words of a prefix that say a hex body is a digest or an id, not a key (`sha256-…`, `commit_…`)
_DIGEST_WORDS = frozenset(
    b"sha sha1 sha224 sha256 sha384 sha512 md4 md5 blake2b blake2s blake3 crc crc32 xxh hash hashed "
    b"digest checksum sum commit rev revision ref oid tree blob object obj etag build version ver v "
    b"hex uuid guid fingerprint fp nonce trace span request req correlation image layer container "
    b"pod node chunk cache file tmp temp run job task".split()
)
_MIN_HEX_BODY = 32


def _hex_token(prefix: bytes, raw: bytes) -> bool:
    """A hex body after a vendor-style prefix (`shpat_5674…`, `key-3f2a…`, `xoxp-123-456-…-9c1f…`,
    `sk-or-v1-4ce1…`): a key when it holds 128 bits or more, letters and digits, no UUID, no word
    of its prefix names a digest or an id, and it is shaped like a vendor's: a prefix ending in `_`,
    of two words or more, or naming a credential, or a body of several runs. What is left out is a
    name with a hash after it (`kernel-5f1a…`, `dist-3f2a…`, `order_<uuid>`); a bare hex string has
    no prefix and is never a candidate (git SHAs, content hashes)."""
    body = _SEPARATORS.sub(b"", raw)
    words = [w.lower() for w in _PREFIX_WORDS.split(prefix) if w]
    if (
        len(body) < _MIN_HEX_BODY
        or set(words) & _DIGEST_WORDS
        or _UUID.search(raw) is not None
        or not any(c in b"abcdefABCDEF" for c in body)
        or sum(c in b"0123456789" for c in body) < 4
    ):
        return False
    return (
        prefix.endswith(b"_")
        or len(words) >= 2
        or _SEPARATORS.search(raw) is not None
        or credential_name(words[-1].decode()) is not None
    )


_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PREFIX_WORDS = re.compile(rb"[_.-]")


def _runs_read_as_token(raw: bytes) -> bool:
    """Whether a body broken by `_` or `-` reads as base64url, not as words joined up: not upper-case
    runs of eight or fewer, and a run after the first shorter than four at most once, in a body
    with both cases (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`, `ERR_PNPM_FETCH_404_Not_Found` are
    names)."""
    runs = _SEPARATORS.split(raw)
    letters = [c for c in raw if 65 <= c <= 90 or 97 <= c <= 122]
    if len(runs) > 1 and sum(c <= 90 for c in letters) >= 0.9 * len(letters) and max(map(len, runs)) <= 8:
        return False  # `CHACHA20_POLY1305_SHA256`, `FORMAT_ASTC_10x10_SRGB`: a constant's name
    short = sum(len(run) < 4 for run in runs[1:])
    return short == 0 or (short == 1 and not raw.isupper() and not raw.islower())


def _encoded_text(body: bytes) -> bool:
    """A body that is base64 of printable text (`YmVkcm9jay5hbWF6b25h…`): encoded words, not a key."""
    try:
        decoded = base64.b64decode(body + b"=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(decoded) >= 12 and _PRINTABLE.fullmatch(decoded) is not None


_PRINTABLE = re.compile(rb"[\x20-\x7e]+")


# a password hash after its scheme (`{SSHA}W6ph5Mm5…`, `{SHA}…=`, LDAP and Apache): crackable offline
HASHED = re2.compile(
    rb"\{(?:S?SHA(?:256|384|512)?|S?MD5|CRYPT|PBKDF2[A-Z0-9-]*)\}[A-Za-z0-9+/.$]{16,}={0,2}"
    # crypt(3) and its kin: `$1$salt$hash`, `$2a$05$…`, `$6$…`, `$y$…`, `$krb5asrep$23$…`
    rb"|\$(?:1|2[abxy]?|5|6|7|8|9|y|gy|md5|sha1|apr1|argon2(?:id|i|d)|scrypt|pbkdf2[a-z0-9-]*|krb5[a-z]*)"
    rb"\$[A-Za-z0-9./$=,@:+-]{16,}"
)
# MySQL's native password hash (`*` and 40 upper-case hex digits, alone): it logs in as it is
MYSQL_HASH = re2.compile(rb"(?:^|[^*\w])(\*[0-9A-F]{40})(?:[^\w]|$)")


def _userinfo(run: bytes) -> bool:
    """Whether a padded base64 run decodes to `user:password`."""
    try:
        decoded = base64.b64decode(run, validate=True)
    except (binascii.Error, ValueError):
        return False
    return decoded_userinfo(decoded)


def decoded_userinfo(decoded: bytes) -> bool:
    """Whether decoded base64 is `user:password` (Basic auth) with a password that is no placeholder
    (`artif-key:AP6xxxxxxxxxx` is a mask)."""
    if USERINFO.fullmatch(decoded) is None:
        return False
    password = decoded.split(b":", 1)[1].decode("ascii", "replace")
    return not spared(password, "password", True)


# one colon, no path after it: `arn:aws:iam::…`, `https://…` are no credentials
USERINFO = re.compile(rb"[\w.@+-]{1,64}:[!-.0-9;-~][!-9;-~]{2,127}")


# a user and the hash of their password on a line of their own (pgpool's pcp.conf `pgpool:<md5>`,
# pool_passwd's `user:md5<md5>`, `user:<sha256>` files): a password file's entry, whatever the file;
# a digest's own name before it (`sha256:…`, `commit:…`) is no user (`_DIGEST_NAMES`)
USER_HASH = re2.compile(
    rb"(?m)^[ \t]*([A-Za-z_][\w.@-]{0,31}):((?:md5)?[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}|[0-9a-f]{128})[ \t\r]*$"
)
# (any part of the name: `git_commit`, `sha256sum`, `GIT_SHA`; a branch or remote; a file's name)
_DIGEST_NAMES = re.compile(
    rb"(?i)(?:^|[_.-])(?:sha\d*\w*|md\d\w*|blake\w*|xxh\w*|crc\w*|hash\w*|digest|checksum|\w*sum|etag|oid|id|uuid|"
    rb"guid|commit|tree|blob|object|ref|rev|revision|head|parent|tag|nonce|salt|trace\w*|span\w*|request\w*|"
    rb"fingerprint|integrity|version|build|key_?id|kid|image|layer|tx|block|main|master|origin|upstream|remote|"
    rb"branch|git|file)(?:$|[_.-])|\.\w{1,5}$"
)


# a key after its owner's number (`123456789:AAHdqTcvCH1vGWJx…`, `1-UwV8…`: a bot's or an account's
# id, then its secret): the number is a prefix like any other
NUMBERED = re2.compile(
    rb"(?:^|[^\w.:/-])(\d{1,12}[:-])([A-Za-z0-9][A-Za-z0-9_-]{28,200}[A-Za-z0-9])(?:[^\w.-]|$)"
)

_SHAPES = re2.compile(
    b"|".join(b"(?:" + r.pattern + b")" for r in (HASHED, MYSQL_HASH, USER_HASH, JWT, PADDED, NUMBERED)),
    _spans_only(),
)
# every shape at once: a clean text (nearly all of them) costs this one DFA pass
_ANY = re2.compile(_SHAPES.pattern + b"|" + _PATTERN, _spans_only())


def token_spans(data: bytes) -> Iterator[Span]:
    """(kind, start, end) byte spans of vendor-style tokens, JWTs, password hashes and padded
    base64 `user:password` in data."""
    if leftmost(_ANY, data) is None:
        return
    if leftmost(_SHAPES, data) is not None:
        for start, end in match_spans(HASHED, data):
            yield "password_hash", start, end
        for m in MYSQL_HASH.finditer(data):
            yield "password_hash", m.start(1), m.end(1)
        for m in USER_HASH.finditer(data):
            if _DIGEST_NAMES.search(m.group(1)) is None:
                yield "password_hash", m.start(2), m.end(2)
        for start, end in match_spans(JWT, data):
            yield "jwt", start, end
        for m in PADDED.finditer(data):
            if _userinfo(m.group(1)):
                yield "basic_auth", m.start(1), m.end(1)
        for m in NUMBERED.finditer(data):
            body = _SEPARATORS.sub(b"", m.group(2))
            # hex after a number is a trace or a digest (`00-0af7…-b7ad…-01`, a W3C traceparent)
            if not _HEX.match(body) and random_body(body) and not _encoded_text(body):
                yield "token", m.start(1), m.end(2)
    for start, end in match_spans(CANDIDATE, data):
        m = _GROUPS.match(data, start, end)
        if m is None:
            continue
        prefix, raw = m.group(1), m.group(2)
        body = _SEPARATORS.sub(b"", raw)
        # cheapest first: minted ids and public keys by their prefix, then the body's shape
        if prefix in _MINTED or _PUBLIC.match(prefix) or prefix.rstrip(b"_-").endswith((b"id", b"uuid")):
            continue
        if len(body) < _MIN_BODY or _encoded_text(body):
            continue
        if _HEX.match(body):
            if not _hex_token(prefix, raw):
                continue
        elif not (_runs_read_as_token(raw) and random_body(body)):
            continue
        if _NAMED_BEFORE.search(data, max(0, m.start(1) - 24), m.start(1)):
            continue  # `"id": "…"`, `tool_use_id=…`, `"vapidPublic": "…"`: an id, a public key
        yield "token", m.start(1), m.end(2)
