"""Key/value pairs in every syntax a configuration file or config module writes them in.

    dotenv, shell        DB_PASSWORD=admin   export TOKEN="…"   set smtp_pass = "…"   $env:KEY = "…"
    INI, .conf, TOML     password = p@ss w0rd   secret_key = "…"
    YAML, properties     password: admin   spring.datasource.password=…   - token: …
    JSON, JS, Ruby, Ex   "password": "…"   apiKey: '…'   :password => '…'   password: "…",
    PHP                  'password' => '…'   $cfg['Servers'][$i]['password'] = '…'   define('AUTH_KEY', '…')
    Python, Java, C#     SECRET_KEY = '…'   private static final String PASSWORD = "…";
    XML attributes       <user username="tomcat" password="s3cret"/>
    Erlang               {password, "…"}
    libpq, CLI, query    host=db password=x dbname=app   --password=x   ?token=x

A quoted value is a literal wherever it is. An unquoted one is a literal where the pair starts
its line (config files: `PASSWORD=admin`), unless the line reads as code (a declaration keyword,
a `self.`/`$` key, a trailing `,` `;` `)`, `=>`), where a bare identifier is a variable; a call,
an index or an environment lookup is never a literal. Inside a line, an unquoted value follows
only `=` (`password=x`), never `:` (prose: `token: the one from…`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from worker.redaction.configs.names import credential_kind, spared
from worker.redaction.keywords import echoes_key
from worker.redaction.shapes import is_code

Span = tuple[str, int, int]  # (kind, start, end) in str offsets of the text

# what may come before a key at the start of a line: a `cat -n`/Read line number, a diff's
# sign, a YAML list dash, a grep hit's `path:line:`, declaration words
_HEAD = re.compile(
    r"[ \t]*(?:\d+(?:\u2192|\t)[ \t]*)?(?:[+-](?=[ \t]*[\w\"'$@:])[ \t]*)?(?:-[ \t]+)?"
    r"(?:[\w./-]*[/.][\w.-]*:(?:\d+[:-])?(?=\S))?"
    r"(?:(?:export|set|setenv|local|declare(?:[ \t]+-\w+)?|readonly|typeset|const|let|var|val|final|static"
    r"|private|public|protected|internal|String|string|str|def|my|our|\$env:)[ \t]+)*"
)
_CODE_WORDS = re.compile(
    r"\b(?:const|let|var|val|final|static|private|public|protected|internal|String|def|my|our)\b"
)
_PAIR = re.compile(
    r"(?P<key>\\?\"[^\"\n\\]{1,100}\\?\"|'[^'\n]{1,100}'|:?[$@]?[A-Za-z_][\w.\-]*(?:->\w+)*)"
    r"[\]}]?[ \t]*(?P<sep>=>|:=|\?=|=(?!=)|:(?![:/\\])|,)[ \t]*"
)
_QUOTED = re.compile(
    r"(?:<<)?[fFrRbBuU]?(\\\"(?:[^\"\\\n]|\\[^\"\n])*\\\"|\"\"\"(?:[^\"\n]|\"(?!\"\"))*\"\"\"|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|`[^`\n]*`)"
)
_INLINE = re.compile(r"[^\s;&,)}\]\"'<>\\][^\s;&,)}\]\"'<>]*")
# an unquoted value computed at run time: a call or index (`os.environ["X"]`, `ENV.fetch(…)`),
# an environment or settings lookup (`process.env.X`, `settings.DB_PASSWORD`), a YAML tag
# (`!Ref DbPassword`, `!secret db_password`, `!vault |`)
_COMPUTED = re.compile(
    r"^(?:[A-Za-z_$][\w$]*(?:(?:\.|::|->|\?\.)[A-Za-z_$][\w$]*)*\s*[(\[]"
    r"|(?i:process|os|env|settings|config|cfg|conf|options|opts|params|args|props|secrets|vars|system"
    r"|self|this|app|ctx|context|request|req|rails|credentials)(?:\.|::|->)[\w$.]+"
    r"|!(?!!)\w+|new\s+\w|await\s|[A-Za-z_]\w*\s*\?\?|[{\[|>(]|<<)"
)
# `parsed.password`, `settings.db.secret`: attributes of code, no digits
_DOTTED = re.compile(r"^[A-Za-z_$][A-Za-z_$]*(?:\.[A-Za-z_$][A-Za-z_$]*)+$")
_TYPE_NAME = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]*)+(?:\[[\w, ]*\])?(?:[ \t]*\|[ \t]*\w+)*$")
# (each pattern starts a run of blanks where it starts and takes it whole: linear on long runs)
_COMMENT = re.compile(r"(?<![ \t])[ \t]++(?:#|//|;(?=[ \t])).*$")
_PROSE_END = re.compile(r"[.:?]$")


_JUDGED_HEAD = _CODE_READ = 1_024


def _is_code_line(head: str, key: str, rest: str, sep: str) -> bool:
    """Whether a line reads as code (where a bare identifier is a variable)."""
    return (
        _CODE_WORDS.search(head) is not None
        or key.startswith(("$", "@", "self.", "this."))
        or sep in ("=>", ":=")
        or rest.rstrip().endswith((",", ";", ")", "{"))
    )


def _value_at(line: str, at: int, line_start: bool, sep: str) -> tuple[int, int, bool] | None:
    """(start, end, quoted) of the value after a separator, in line; None when there is none."""
    quoted = _QUOTED.match(line, at)
    if quoted is not None:
        width = 3 if quoted.group(1).startswith('"""') else 2 if quoted.group(1)[0] == "\\" else 1
        return quoted.start(1) + width, quoted.end(1) - width, True
    if sep == ",":
        return None
    if line_start:
        rest = _COMMENT.sub("", line[at:]).rstrip()
        if rest.startswith(("#", "//", ";")):
            return None  # `password:  # set me`: a comment, no value
        if rest[:1] in "\"'`":  # a quote the line does not close (cut off): the value after it
            at, rest = at + 1, rest[1:]
        rest = _CONN_NEXT.split(rest, maxsplit=1)[0]  # `Password=x;User ID=app`: to the `;`
        rest = _NEXT_PAIR.split(rest, maxsplit=1)[0]  # `A_KEY=x B_KEY=y`: to the next pair
        value = _first_words(rest).rstrip(",;")
        return (at, at + len(value), False) if value else None
    if sep != "=":
        return None
    m = _INLINE.match(line, at)
    return (at, m.end(), False) if m is not None else None


_NEXT_PAIR = re.compile(r"(?<![ \t])[ \t]++[A-Za-z_][\w.-]*+=(?!=)")
_CONN_NEXT = re.compile(r";[ \t]*[A-Za-z][\w ]*=")


def _first_words(rest: str) -> str:
    """How much of an unquoted value with spaces is the value: all of it when every word after the
    first has a digit or symbol (`p@ss w0rd`) or none has (`correct horse battery staple`, judged
    later); else the first word (`ghp_… is the rest`: a token, then prose that followed it)."""
    words = rest.split()
    if len(words) < 2:
        return rest
    tail = words[1:]
    if all(not w.isalpha() for w in tail) or all(w.isalpha() for w in words):
        return rest
    return words[0]


def _bare(key: str) -> str:
    return key.strip("\\\"'").lstrip(":$@")


# the words a credential's key holds (keywords of the scanner's prefilter), in lower case
_KEYWORD = re.compile(r"pass|pwd|pw\b|secret|token|key|salt|cred|auth|psk|community|private\b|_priv\b")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-$@>")


def _pairs_named(line: str) -> Iterator[re.Match[str]]:
    """The pairs whose key holds a credential keyword, left to right: the pair pattern is tried
    only where a key around a keyword starts (a long line holds thousands of other pairs)."""
    tried: set[int] = set()
    for hit in _KEYWORD.finditer(line.lower()):
        at = hit.start()
        while at > 0 and line[at - 1] in _KEY_CHARS:
            at -= 1
        if at > 0 and line[at - 1] in "\"'":
            at -= 2 if at > 1 and line[at - 2] == "\\" else 1
        elif at > 0 and line[at - 1] == ":" and (at < 2 or not line[at - 2].isalnum()):
            at -= 1  # a Ruby symbol `:password =>`
        if at in tried:
            continue
        tried.add(at)
        m = _PAIR.match(line, at)
        if m is not None and m.end("key") >= hit.end():
            yield m


def line_pairs(
    line: str, line_start: bool = True, kind_of: Callable[[str], tuple[str, bool] | None] = credential_kind
) -> Iterator[Span]:
    """The credential values of one line's key/value pairs, as (kind, start, end) in the line.
    line_start: the text starts a line (not a piece of a long one); kind_of: which keys name a
    credential (the config positions' names, or the generic layer's wider ones)."""
    head = _HEAD.match(line) if line_start else None
    first = head.end() if head is not None else (0 if line_start else -1)
    for m in _pairs_named(line):
        key, sep = m.group("key"), m.group("sep")
        quoted_key = key[0] in "\\\"'"
        if sep == "," and not (quoted_key or line[max(0, m.start() - 1) : m.start()] == "{"):
            continue
        named = kind_of(_bare(key))
        if named is None:
            continue
        kind, strong = named
        found = _value_at(line, m.end(), m.start() == first and sep != ",", sep)
        if found is None:
            continue
        start, end, quoted = found
        value = line[start:end]
        if not quoted and len(value) > _JUDGED_HEAD and " " not in value:
            # a long blank-free value is judged by its head: in a run of pairs (`a.key=b` * 11,111)
            # every value runs on to the end of the part, and judging each whole is quadratic
            value = value[:_JUDGED_HEAD]
        if not quoted and not _unquoted_literal(line, head, m, value, kind_of):
            continue
        if sep == "," and _call_arguments(line, m.start(), end):
            continue
        if quoted and line[start - 1] == "`" and (" " in value or "${" in value):
            continue  # shell command substitution, a template literal: computed at run time
        if spared(value, kind, strong) or (not quoted and _echoes(key, value)) or _names_itself(key, value):
            continue
        yield kind, start, end


def _call_arguments(line: str, key_at: int, value_end: int) -> bool:
    """`f("password", "x", y)`: a call's first two arguments, not a pair (as `define('K', 'v')`,
    `{password, "v"}` and `("password", "v")` are)."""
    return not line[:key_at].rstrip().endswith(("define(", "define (", "{", "["))


def _unquoted_literal(
    line: str,
    head: re.Match[str] | None,
    m: re.Match[str],
    value: str,
    kind_of: Callable[[str], tuple[str, bool] | None] = credential_kind,
) -> bool:
    """Whether an unquoted value is a literal (a config file's) rather than code or prose."""
    if _COMPUTED.match(value) or _DOTTED.match(value):
        return False
    if m.group("sep") == ":" and _TYPE_NAME.match(value):
        return False  # `password: SecretStr`: a type annotation
    named = kind_of(_bare(m.group("key")))
    if " " in value and all(w.isalpha() for w in value.split()) and named and named[0] != "password":
        return False  # `api_token: alpha beta gamma`: words, not a token (a passphrase is a password)
    key, sep = m.group("key"), m.group("sep")
    # what is read before the key and at the end of the line: a bounded part of a long line
    prefix, tail = (
        line[max(0, m.start() - _CODE_READ) : m.start()],
        line[max(m.end(), len(line) - _CODE_READ) :],
    )
    if _is_code_line(prefix, key, tail, sep) and (is_code(value.rstrip(",;)")) or value.endswith(",")):
        return False
    words = value.split()
    if len(words) >= 3 and (_PROSE_END.search(value) or (sep == ":" and key[:1].isupper())):
        return False  # `Token: the one the CI sets.`
    return not (sep == ":" and key[:1].isupper() and len(words) >= 2 and not any(c.isdigit() for c in value))


def _names_itself(key: str, value: str) -> bool:
    """`addPassword = "#add-password"`: a value that repeats its key with some decoration (an id, a
    selector); `password = "password"` itself is a weak password, not an echo."""
    return not value[:1].isalnum() and echoes_key(_bare(key), value)


def _echoes(key: str, value: str) -> bool:
    """`password = password` in code (`self.password = password`): the variable of the same name."""
    v = value.rstrip(",;)")
    return key.startswith(("self.", "this.", "$", "@")) and _bare(key).split(".")[-1].lower() == v.lower()


# rc files where a space separates key and value (msmtp, .netrc on lines, gradle `password "x"`,
# fetchmail, ncftp): a lower-case key, then the value to the line's end
_SPACED = re.compile(
    r"[ \t]*(?:\d+(?:\u2192|\t)[ \t]*)?(?P<key>password|passwd|pass|passphrase|secret|token|auth_token|api_key|apikey|requirepass|masterauth"
    r"|bindpw|rootpw|default_pass)"
    r"[ \t]+(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'=:]\S*)[ \t]*$"
)
# words that follow `password` in prose, not as its value
_PROSE_WORD = re.compile(
    r"(?i:a|an|and|as|at|be|by|can|for|from|if|in|is|it|must|not|of|on|or|the|then|to|was|when|will"
    r"|with|required|reset|expired|changed|manager|field|protected|only|prompt|incorrect|invalid|set)"
)
_FORM_WORDS = frozenset(["hash", "encrypted", "plaintext", "cleartext", "plain"])
# `machine h login u password p` (netrc, one line) and fetchmail's `user 'u' … password 'p'`
_NETRC = re.compile(
    r"\b(?:login|user|username)[ \t]+(?!(?:" + _PROSE_WORD.pattern + r")[ \t])[^\s=:]\S*+"
    r"[^\n]{0,200}?\b(?:password|passwd)[ \t]+(\"[^\"\n]*\"|'[^'\n]*'|[^\s=:]\S*)"
)


def spaced_pairs(line: str) -> Iterator[Span]:
    """Credentials of rc-file lines: `password secret123`, `password "x"`, netrc's one-liners."""
    m = _SPACED.match(line)
    if m is not None:
        value = m.group("value")
        if _COMPUTED.match(value) and value[0] not in "{[":
            return  # `password System.getenv("REPO_PASSWORD")` (`{SSHA}…` is a value)
        quoted = value[0] in "\"'"
        inner = value[1:-1] if quoted else value
        if not (
            _PROSE_WORD.fullmatch(inner) or spared(inner, "password", True) or inner.endswith((".", ":"))
        ):
            start = m.start("value") + (1 if quoted else 0)
            yield "password", start, start + len(inner)
        return
    if "passw" not in line:
        return  # _NETRC's `password` or `passwd`: a line without them needs no search
    for n in _NETRC.finditer(line):
        value = n.group(1)
        quoted = value[0] in "\"'"
        inner = value[1:-1] if quoted else value
        if inner.lower() in _FORM_WORDS:
            continue  # `user rocks password hash AAAA…`: what form the value takes, then the value
        if not spared(inner, "password", True) and _PROSE_WORD.fullmatch(inner) is None:
            start = n.start(1) + (1 if quoted else 0)
            yield "password", start, start + len(inner)
