"""Value shapes: is a candidate string random enough, a placeholder, or code, to be a secret?

Detectors find candidates by position (a prefix, a keyword, a URL); these pure checks decide
whether the candidate value looks like a credential or like an ordinary value that happens to sit
in the same place (`password = get_password()`, `token: null`, `key = "${KEY}"`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

PLACEHOLDER_MARK = "[REDACTED:"

# Words that stand in for a value rather than being one.
_FILLER = frozenset(
    {
        "null",
        "none",
        "nil",
        "true",
        "false",
        "undefined",
        "empty",
        "required",
        "optional",
        "string",
        "str",
        "bytes",
        "password",
        "passwd",
        "pass",
        "token",
        "apikey",
        "api_key",
        "changeme",
        "redacted",
        "hidden",
        "masked",
        "xxx",
        "yyy",
        "test",
        "example",
        "placeholder",
        "your_password",
        "yourpassword",
        "your_token",
        "your_api_key",
    }
)
_TEMPLATE = re.compile(
    r"""^(?:
        \$\{[^}]*\}?            # ${VAR}
      | \$\(.*\)?               # $(command)
      | \$[A-Za-z_][\w.]*       # $VAR
      | \{\{.*\}\}              # {{ template }}
      | \{(?:[a-z_][a-z0-9_.]*|[A-Z_][A-Z0-9_.]*)\}  # {name}, {NAME}
      | \{[A-Za-z_][\w.\[\]'"]*(?:\([^{}]*\)|![rsa]|:[^{}]*)+\}[.,;:)]*  # {x!r}, {len(x)}, {v:>8}
      | <[^<>]*>                # <your token>
      | \[[A-Z _-]+\]           # [PASSWORD]
      | %\(?\w*\)?s             # %s, %(name)s
      | %[A-Za-z_]+%            # %VAR%
      | %%[A-Z_][A-Z0-9_]*%%    # %%VAR%% (a build's token to replace, Phinx's)
      | [*xX.#?_-]+             # ****, xxxx, ....
      | [xX]{4,}.*|.*(?:[xX]{6,}|\#{4,}|\*{4,}).*   # runs of x, #, *: masks
      | (?i:process\.env|os\.environ|env|getenv|secrets)\b.*
    )$""",
    re.VERBOSE | re.DOTALL,
)
_CALL_OR_ATTR = re.compile(
    r"""^(?:
        [A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*\s*\(.*   # call: get_password(...)
      | [A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)+          # attribute: settings.SECRET_KEY
      | [A-Za-z_$][\w$]*\s*\[.*                                    # index: os.environ["X"]
      | [A-Za-z_]+                                                 # a bare identifier (no digits)
      | -?\d{1,7}(?:\.\d+)?                                        # a small number
      | [+.]\s*[A-Za-z_].*                                         # a concatenation: "+ x.y(...)
      | \.?/[\w.@-]+(?:/[\w.@-]*)+                                 # a path
    )$""",
    re.VERBOSE | re.DOTALL,
)
# a whole alphabet run marks a character table or a made-up example, not a key
_SEQUENTIAL = ("abcdefghijk", "ABCDEFGHIJK", "qwertyuiop")
# words that say a value is made up (`somefakekey`, `dummy-token`): letters only, no random part
_MADE_UP = re.compile(
    r"^(?=[A-Za-z_.-]*$)(?:.*(?i:fake|dummy|sample|example|placeholder|changeme)|(?i:your|enter|insert)[_.-])"
)
# `my-token`, `my_api_key`: "my" and a token's or a key's name (configs/names.py `spared` too);
# not a password's or a secret's: `my-password` may be one (as `changeme`, `password` are kept)
MINE = re.compile(r"(?i:my)[_.-](?i:token|key|api[_.-]?key|access[_.-]?token)")


def entropy_bits(value: str) -> float:
    """Shannon entropy per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def char_classes(value: str) -> int:
    """How many of lower, upper, digit, other appear in value."""
    return _classes(set(value))


def _classes(chars: set[str]) -> int:
    """char_classes of a value's distinct characters (each once: a set is built in C, not four
    Python passes over the value)."""
    return (
        any(c.islower() for c in chars)
        + any(c.isupper() for c in chars)
        + any(c.isdigit() for c in chars)
        + any(not c.isalnum() for c in chars)
    )


def is_placeholder(value: str, runs: bool = True) -> bool:
    """True for template variables, fillers, masks and already-redacted placeholders; with `runs`,
    values holding an alphabet or keyboard run too (a made-up token; not a password's position:
    people choose `qwertyuiop1` as theirs)."""
    v = value.strip()
    if not v or PLACEHOLDER_MARK in v:
        return True
    if v.lower().strip("_-'\"") in _FILLER or _TEMPLATE.match(v) or _MADE_UP.match(v) or MINE.fullmatch(v):
        return True
    if is_elided(v):
        return True
    return len(set(v)) <= 2 or (runs and any(s in v for s in _SEQUENTIAL)) or not any(c.isalnum() for c in v)


def is_elided(value: str) -> bool:
    """A value cut short for show, an ellipsis for its rest, where what shows is no secret: a
    token's prefix and four characters at most on each side (`sk-...`, `ghp_…WXYZ`,
    `AKIA...WXYZ`, `...`). A password cut after its tenth character (`Hunter2024...`) is none."""
    v = value.strip()
    if "..." not in v and "\u2026" not in v:
        return False  # (the substring test first: long values pass here on the worst inputs)
    dots = _ELLIPSIS.search(v)
    if dots is None:
        return False
    head, tail = v[: dots.start()], _ESCAPES.sub("", v[dots.end() :])
    head = _SHOWN_PREFIX.sub("", head, count=1)
    return len(head) <= 4 and len(tail) <= 4


_ELLIPSIS = re.compile(r"\.{3,}|\u2026")
# line breaks escaped after the value (`...\n\n` in a JSON string): the text goes on, not the value
_ESCAPES = re.compile(r"(?:\\[nrt])+$")
# a token's prefix shown before the ellipsis: `sk-`, `sk-ant-`, `ghp_`, `xoxb-`, `AKIA`
_SHOWN_PREFIX = re.compile(r"^(?:[a-z]{1,6}(?:[-_][a-z]{1,6})?[-_]|A[KS]IA)")


def is_code(value: str) -> bool:
    """True when an unquoted value reads as code: a call, attribute, index, identifier or number."""
    return bool(_CALL_OR_ATTR.match(value.strip()))


def is_wordy(value: str) -> bool:
    """True for names made of words (`jjwt-jackson-0.11.2`, `my.module.path`), not random tokens."""
    parts = [p for p in re.split(r"[-_.:/ ]+", value) if p]
    if len(parts) < 2:
        return value.isalpha() and (value.islower() or value.isupper() or value.istitle())
    return all(p.isalpha() or (p.isdigit() and len(p) <= 4) or _word_with_digits(p) for p in parts)


def _word_with_digits(part: str) -> bool:
    letters = sum(c.isalpha() for c in part)
    return letters >= len(part) - 2 and part[:1].isalpha()


def looks_random(value: str, min_len: int = 16, min_bits: float = 3.2) -> bool:
    """A token-like value: long, mixed character classes with digits, high entropy, not words."""
    v = value.strip()
    if len(v) < min_len or " " in v or is_placeholder(v):
        return False
    chars = set(v)
    if not any(c.isdigit() for c in chars) or _classes(chars) < 2:
        return False
    return entropy_bits(v) >= min_bits and not is_wordy(v)


def is_file_path(value: str) -> bool:
    """A relative or absolute file path ending in an extension (`./assets/logo-3f9a….png`)."""
    return bool(_FILE_PATH.match(value))


# (a segment may interpolate a variable: `/etc/keys/$name.pem`, `/keys/${env}/id.key`)
_FILE_PATH = re.compile(r"^(?:\.{0,2}/)?(?:[\w@.${}-]+/)+[\w@.${}-]*\.[A-Za-z][A-Za-z0-9]{0,4}$")


def is_hex_digest(value: str) -> bool:
    """A bare md5/sha1/sha256/sha512 hex digest (content hashes and git SHAs are not secrets)."""
    return len(value) in (32, 40, 64, 128) and all(c in "0123456789abcdefABCDEF" for c in value)


def is_uuid(value: str) -> bool:
    """A canonical 8-4-4-4-12 UUID."""
    return bool(_UUID.match(value))


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


# YAML tags whose value is elsewhere or computed: Ansible's `!vault |`, Home Assistant's `!secret
# name`, CloudFormation's `!Ref Name`, `!Sub …`, `!GetAtt …`, GitLab's `!reference [...]`
_YAML_TAG = re.compile(
    r"!(?:vault|secret|env_var|include|include_dir_\w+|input|reference|Ref|Sub|GetAtt|ImportValue|"
    r"FindInMap|Join|Select|Split|Base64|If|ENV|env|Env)(?:\s|$)"
)
# `password= auth_user=`: the value is empty and the next key follows
NEXT_KEY = re.compile(r"[A-Za-z][A-Za-z_.-]*=")


def is_yaml_tag(value: str) -> bool:
    """Whether a value starts with a YAML tag that stands for it (`!vault |`, `!secret db_pw`)."""
    return _YAML_TAG.match(value) is not None


# a resource's name, which says where a thing is, not how to get in (`arn:aws:iam::…:policy/
# ReadOnlyPassword`, `urn:ietf:params:oauth:…`, an Oracle Cloud id `ocid1.user.oc1..aaaa…`)
RESOURCE_NAME = re.compile(r"^(?:(?:arn:aws[\w-]*|urn):[\w-]+:|ocid1\.[a-z0-9]+\.[a-z0-9-]+\.)")

_TEMPLATE_OPENERS = ("${", "#{", "{{")
_CLOSER = {"{": "}", "(": ")", "[": "]"}


def has_template(value: str) -> bool:
    """Whether value holds a template expression (`${ENV}`, `#{visibility}_cursor`, `{{ x }}`) and
    every one it opens is well formed: its brackets balance up to the closing brace. A stray
    `${` or `{{` in a password (`m{{h}o)p${e]nob(ody…`) is no template: structure, not looks."""
    found, at = False, _next_opener(value, 0)
    while at >= 0:
        end = _template_end(value, at)
        if end is None:
            return False
        found, at = True, _next_opener(value, end)
    return found


def _next_opener(value: str, start: int) -> int:
    """Where the next `${`, `#{` or `{{` at or after start is; -1 when there is none."""
    return min((i for i in (value.find(o, start) for o in _TEMPLATE_OPENERS) if i >= 0), default=-1)


def _template_end(value: str, at: int) -> int | None:
    """Just past the closing brace (or braces) of the template opened at `at`, or None when its
    brackets do not balance before it or it never closes."""
    double = value.startswith("{{", at)
    stack: list[str] = []
    for i in range(at + 2, len(value)):
        c = value[i]
        if c in _CLOSER:
            stack.append(_CLOSER[c])
        elif c in ")]}":
            if stack:
                if stack.pop() != c:
                    return None
            elif c != "}":
                return None  # `)` or `]` that nothing opened
            elif not double:
                return i + 1
            else:
                return i + 2 if value.startswith("}", i + 1) else None  # `{{h}o`: one brace, no close
    return None
