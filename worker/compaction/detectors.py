"""The detector table: one RE2 pattern per secret format, and the judge that confirms a candidate.

Each pattern captures the region that holds the secret (`secret_group`) and, for assignments, the
key that names it (`key_group`). A judge gets both and returns the kind plus the secret's span
inside the region, or None to reject (placeholders, code, low-entropy values). Order matters only
between patterns that can start at the same position: the first listed wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from worker.compaction.keywords import echoes_key, is_assigned_secret, names_other_value, secret_kind_of_key
from worker.compaction.shapes import (
    char_classes,
    entropy_bits,
    is_code,
    is_file_path,
    is_hex_digest,
    is_placeholder,
    is_uuid,
    looks_random,
)

Judged = tuple[str, int, int] | None
Judge = Callable[[str, str | None], Judged]


@dataclass(frozen=True, slots=True)
class Detector:
    """A secret format: where it is (pattern) and whether a candidate really is one (judge)."""

    name: str
    pattern: str
    judge: Judge
    secret_group: int = 0
    key_group: int | None = None
    # detectors of one lane share an RE2 pass; keyed patterns in the same DFA as prefixed tokens
    # multiply its states, so they get passes of their own (lower lanes win ties)
    lane: int = 0


def token(kind: str, min_bits: float = 0.0) -> Judge:
    """Judge for prefixed provider tokens: anything but an obvious placeholder (`ghp_xxxx…`)."""

    def judge(secret: str, key: str | None) -> Judged:
        body = secret[len(secret) // 4 :]
        if is_placeholder(secret) or is_placeholder(body) or entropy_bits(body) < min_bits:
            return None
        return kind, 0, len(secret)

    return judge


def _strip_quotes(region: str) -> tuple[int, int, bool]:
    """The span of a value inside `\\"value`, `'value`, `` `value `` or `value` and whether quoted."""
    lo = 0
    while lo < len(region) and region[lo] == "\\":
        lo += 1
    quoted = lo < len(region) and region[lo] in "\"'`"
    while lo < len(region) and region[lo] in "\\\"'`":
        lo += 1
    hi = len(region)
    while hi > lo and region[hi - 1] in "\\\"'`,;)":
        hi -= 1
    return lo, hi, quoted


def assignment(secret: str, key: str | None) -> Judged:
    """Judge for `key = value` in any syntax: the key names the kind, the value must fit it."""
    named = secret_kind_of_key(key or "")
    if named is None:
        return None
    kind, strong = named
    lo, hi, quoted = _strip_quotes(secret)
    value = secret[lo:hi]
    if secret.lstrip("\\").startswith("`") and any(c.isspace() for c in value):
        # `KEY=`cmd arg``: shell command substitution, the value is computed at run time
        return None
    if value.startswith("!!") and " " in value:
        # a YAML tag (`!!binary MjNj…`): the value follows it
        skip = value.index(" ") + 1
        lo, value = lo + skip, value[skip:]
    env_style = key is not None and kind == "password" and _ENV_KEY.match(key.strip("\"' -")) is not None
    if not is_assigned_secret(kind, strong, value, quoted, env_style, key or ""):
        return None
    return kind, lo, lo + len(value)


_ENV_KEY = re.compile(r"^(?:[A-Z][A-Z0-9_]*|[A-Z][a-z]+)$")


def flag_assignment(secret: str, key: str | None) -> Judged:
    """Judge for `--password x` and bare `password x`: a bare one needs a value with a digit."""
    judged = assignment(secret, key)
    if judged is None or (key or "").lstrip().startswith("-"):
        return judged
    value = secret[judged[1] : judged[2]]
    return judged if any(c.isdigit() for c in value) and not value.endswith(".") else None


def argument(secret: str, key: str | None) -> Judged:
    """Judge for `f("api_token", "value")`: the value must also look like a token."""
    judged = assignment(secret, key)
    if judged is None or not looks_random(secret[judged[1] : judged[2]], min_len=8, min_bits=2.5):
        return None
    return judged


def private_key(secret: str, key: str | None) -> Judged:
    """Judge for key blocks: a body of real content, not `anything` or nothing."""
    body = secret.split("-----", 2)[-1].split("-----END")[0]
    if sum(c.isalnum() for c in body) < 20:
        return None
    return "private_key", 0, len(secret)


def high_entropy(secret: str, key: str | None) -> Judged:
    """Judge for `NAME = <random 20+ chars>`: any name that does not describe the value."""
    if key is not None and names_other_value(key):
        return None
    lo, hi, quoted = _strip_quotes(secret)
    value = secret[lo:hi]
    if (
        len(value) < 20
        or (key is not None and echoes_key(key, value))
        or (not quoted and is_code(value))
        or is_file_path(value)
        or is_hex_digest(value)
        or is_uuid(value)
        or value[:4].lower() in ("sha1", "sha2", "sha5", "md5-")
    ):
        return None
    if char_classes(value.strip("=")) < 3 or not looks_random(value, min_len=20, min_bits=4.0):
        return None
    return "high_entropy_string", lo, hi


def url_password(secret: str, key: str | None) -> Judged:
    """Judge for `scheme://user:password@host`: only the password, unless it is a template."""
    if len(secret) > 200:
        return None
    if (is_placeholder(secret) and not secret.isalnum()) or secret.startswith(("$", "%", "{", "<")):
        return None
    return "url_password", 0, len(secret)


def auth_value(kind: str, min_len: int = 8, names_ok: bool = True) -> Judge:
    """Judge for credentials after `Authorization: Bearer`, `-u user:`, `X-Api-Key:`."""

    def judge(secret: str, key: str | None) -> Judged:
        lo, hi, _ = _strip_quotes(secret)
        value = secret[lo:hi]
        if len(value) < min_len or is_placeholder(value) or value.startswith(("$", "%")):
            return None
        # `token: TokenInterface`, `"x-api-key": self.api_key`: a name in code, not a credential
        if not names_ok and is_code(value) and not any(c.isdigit() for c in value):
            return None
        # `{{var}}`, `{name}` are templates; `{Zq5kVr…}` is a value some docs wrap in braces
        if value.startswith("{") and not looks_random(value.strip("{}"), min_len=8, min_bits=3.0):
            return None
        return kind, lo, hi

    return judge


def random_token(kind: str, min_len: int = 16) -> Judge:
    """Judge for bare tokens with no prefix of their own: they must look random."""

    def judge(secret: str, key: str | None) -> Judged:
        return (kind, 0, len(secret)) if looks_random(secret, min_len=min_len) else None

    return judge


# Characters of a token, and a word boundary that also treats `-` as part of a token.
_T = r"[A-Za-z0-9_-]"
_END = r"(?:[^A-Za-z0-9_-]|$)"
_B64 = r"[A-Za-z0-9+/]"
_KEYWORD = r"(?i:pass|pwd|pw\b|secret|token|key|credential|auth|bearer|cred\b|pat\b)"
_KEY = r"([A-Za-z0-9_.$@-]*" + _KEYWORD + r"[A-Za-z0-9_.-]*(?:\[\d*\])?)"
_SEP = r"\\*[\"']?[ \t]*(?:=>|:{1,3}=|\?=|===?|!==?|[:=])[ \t]*"
# `--password x`, `-Password x`, netrc/gradle `password x`: a space separates key and value
_FLAG = r"((?:\s|^)--?[A-Za-z0-9_.-]*" + _KEYWORD + r"[A-Za-z0-9_.-]*|\b(?i:password|passwd))[ \t]+"
_QUOTED = r"(\\*\"[^\"\\\r\n]{4,}|\\*'[^'\\\r\n]{4,})"
_UNQUOTED = r"[^\s\"'`,;&]"
# a call argument (quoted string or bare expression) and a quoted one
_ARG = r"(?:\"[^\"\r\n]*\"|'[^'\r\n]*'|[^,()\"'\r\n]+)\s*"
_QUOTED_ARG = r"(\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}')"
# unquoted values: not a short number (`"input_tokens": 1234`), which no judge would accept
_VALUE = (
    r"(\\*\"[^\"\\\r\n]{4,}|\\*'[^'\\\r\n]{4,}|`[^`\r\n]{4,}|(?:!!\w+[ \t]+)?"
    r"(?:[0-9]{8,}|[^\s\"'`,;&0-9]|[0-9]{1,7}[^\s\"'`,;&0-9}\]])" + _UNQUOTED + r"*)"
)


def _sized(kind: str, low: int, high: int) -> Judge:
    """Judge for tokens whose length the pattern leaves open (counted repeats slow the DFA)."""

    def judge(secret: str, key: str | None) -> Judged:
        return (kind, 0, len(secret)) if low <= len(secret) <= high and not is_placeholder(secret) else None

    return judge


def _digits_then(kind: str, mark: str, low: int, high: int) -> Judge:
    """Judge for `<digits><mark><token>` shapes whose digit count the pattern leaves open."""

    def judge(secret: str, key: str | None) -> Judged:
        digits = secret.index(mark)
        return (kind, 0, len(secret)) if low <= digits <= high and looks_random(secret, 20) else None

    return judge


def _anthropic(kind: str) -> Judge:
    """Anthropic keys: the `AA` that ends every real key (`…xyzBB` is a made-up look-alike)."""

    def judge(secret: str, key: str | None) -> Judged:
        if not secret.endswith("AA"):
            return None
        return token(kind)(secret, key)

    return judge


def credential_argument(secret: str, key: str | None) -> Judged:
    """Judge for the password argument of `NetworkCredential("u", "p")` and like constructors."""
    lo, hi, _ = _strip_quotes(secret)
    value = secret[lo:hi]
    if len(value) < 4 or is_placeholder(value) or value.startswith(("$", "%", "{")):
        return None
    return "password", lo, hi


def stated_password(secret: str, key: str | None) -> Judged:
    """Judge for prose: `the password for user 'postgres' is 'admin'`."""
    lo, hi, _ = _strip_quotes(secret)
    value = secret[lo:hi]
    if len(value) < 4 or " " in value or is_placeholder(value) or value.startswith(("$", "%", "{")):
        return None
    return "password", lo, hi


def paired_password(secret: str, key: str | None) -> Judged:
    """Judge for `user = alice` then `password = open_sesame`: config lines, so bare words count."""
    value = secret.strip()
    # a bare lower-case word is a literal here; `purl.password`, `SecretStr`, `f(x)` are code
    if is_code(value.rstrip(",;")) and _BARE_WORD.match(value) is None:
        return None
    if not is_assigned_secret("password", True, value, False, True, key or ""):
        return None
    return "password", 0, len(value)


_BARE_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


_CHILD = re.compile(r"^([\w.-]+):[ \t]+(\S.*)$")


def block_value(secret: str, key: str | None) -> Judged:
    """Judge for a value on the indented lines under `key =` / `key:` (INI continuations, YAML).

    Bare lines (`hunter2`, `password123`) are one value; a single `child: value` line (Travis'
    `secure:`) holds the value. A map of several entries is left to the entries' own detectors.
    """
    named = secret_kind_of_key((key or "").strip())
    if named is None:
        return None
    indent = len((key or "").expandtabs()) - len((key or "").expandtabs().lstrip())
    lines: list[tuple[int, str]] = []
    at = 0
    for line in secret.split("\n"):
        body = line.strip()
        if not body or len(line.expandtabs()) - len(line.expandtabs().lstrip()) <= indent:
            break
        lines.append((at + line.index(body), body))
        at += len(line) + 1
    if not lines:
        return None
    kind, strong = named
    child = _CHILD.match(lines[0][1])
    if child is not None:
        if len(lines) > 1 or names_other_value(child.group(1)):
            return None
        lo, hi, quoted = _strip_quotes(child.group(2))
        value = child.group(2)[lo:hi]
        if not is_assigned_secret(kind, strong, value, quoted, True, key or ""):
            return None
        start = lines[0][0] + child.start(2) + lo
        return kind, start, start + len(value)
    if any(len(body.split()) > 1 for _, body in lines):
        return None
    if not any(is_assigned_secret(kind, strong, body, False, True, key or "") for _, body in lines):
        return None
    return kind, lines[0][0], lines[-1][0] + len(lines[-1][1])


def _azure_client_secret(secret: str, key: str | None) -> Judged:
    at = secret.find("Q~") - 4
    if at < 0 or is_placeholder(secret[at + 6 :]):
        return None
    return "azure_client_secret", at, len(secret)


def _telegram(secret: str, key: str | None) -> Judged:
    digits = secret.index(":")
    return ("telegram_bot_token", 0, len(secret)) if 8 <= digits <= 10 else None


def _discord(secret: str, key: str | None) -> Judged:
    # the first part is the bot's base64 user id: mixed case with digits, like the random tail
    first, _, tail = secret.split(".", 2)
    if not 24 <= len(first) <= 26 or char_classes(first) < 3 or char_classes(tail) < 3:
        return None
    return token("discord_bot_token", 3.0)(secret, key)


def _slack(secret: str) -> Judged:
    body = secret.split("-", 1)[1]
    tail = body.lstrip("0123456789-")
    if len(body) < 14 or is_placeholder(tail) or not any(c.isdigit() for c in body):
        return None
    if not (any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail)):
        return None
    return "slack_token", 0, len(secret)


DETECTORS: tuple[Detector, ...] = (
    # Key blocks
    Detector(
        "private_key",
        r"-----BEGIN[A-Z0-9 _-]{0,40} PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?s:.)*?-----END[A-Z0-9 _-]{0,40} PRIVATE KEY(?: BLOCK)?-----|(?:[A-Za-z0-9+/=:, \t\r\n-]|\\[nr])+)",
        private_key,
    ),
    Detector(
        "private_key",
        r"\bPuTTY-User-Key-File-\d: [^\r\n]*(?s:.)*?Private-MAC: [0-9a-f]+",
        token("private_key"),
    ),
    Detector("age_secret_key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b", token("age_secret_key")),
    # AI providers
    Detector(
        "anthropic_admin_key", r"\bsk-ant-admin\d\d-" + _T + r"{20,}", _anthropic("anthropic_admin_key")
    ),
    Detector(
        "anthropic_api_key", r"\bsk-ant-(?:api|oat|sid)\d\d-" + _T + r"{20,}", _anthropic("anthropic_api_key")
    ),
    Detector(
        "openai_api_key",
        r"\bsk-(?:proj-|svcacct-|admin-|None-)?" + _T + r"{16,}T3BlbkFJ" + _T + r"{16,}",
        token("openai_api_key"),
    ),
    Detector("openai_api_key", r"\bsk-(?:proj|svcacct|admin)-" + _T + r"{80,}", token("openai_api_key")),
    Detector("huggingface_token", r"\b(?:hf_|api_org_)[A-Za-z0-9]{30,40}\b", token("huggingface_token", 3.0)),
    Detector("groq_api_key", r"\bgsk_[A-Za-z0-9]{48,56}\b", token("groq_api_key")),
    Detector("perplexity_api_key", r"\bpplx-[A-Za-z0-9]{40,56}\b", token("perplexity_api_key")),
    Detector("tavily_api_key", r"\btvly-(?:dev-|prod-)?[A-Za-z0-9]{28,40}\b", token("tavily_api_key")),
    Detector("jina_api_key", r"\bjina_[a-f0-9]{32}[A-Za-z0-9_-]{20,}", token("jina_api_key")),
    Detector("firecrawl_api_key", r"\bfc-[a-f0-9]{32}\b", token("firecrawl_api_key")),
    Detector("replicate_api_token", r"\br8_[A-Za-z0-9]{37}\b", token("replicate_api_token")),
    # Cloud providers
    Detector(
        "aws_access_key",
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b",
        token("aws_access_key"),
    ),
    Detector(
        "aws_bedrock_key", r"\bABSKQmVkcm9ja0FQSUtleS[A-Za-z0-9+/]{100,}={0,2}", token("aws_bedrock_key", 3.0)
    ),
    Detector(
        "aws_bedrock_key",
        r"\bbedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=]{20,}",
        token("aws_bedrock_key"),
    ),
    Detector("google_api_key", r"\b(AIza[A-Za-z0-9_-]{35})" + _END, token("google_api_key", 3.0), 1),
    Detector("google_oauth_secret", r"\bGOCSPX-[A-Za-z0-9_-]{28}\b", token("google_oauth_secret")),
    Detector("google_oauth_token", r"\bya29\.[A-Za-z0-9_-]{30,}", token("google_oauth_token")),
    Detector(
        "azure_client_secret",
        r"([A-Za-z0-9_~.]*\dQ~[A-Za-z0-9_~.-]{31,34})(?:[^A-Za-z0-9_~.-]|$)",
        _azure_client_secret,
        1,
    ),
    Detector(
        "azure_storage_key",
        r"(?i:AccountKey|SharedAccessKey|AccessKey)=(" + _B64 + r"{30,}={0,2})",
        token("azure_storage_key"),
        1,
    ),
    Detector("azure_sas_token", r"[?&]sig=([A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})", token("azure_sas_token"), 1),
    Detector("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b", token("databricks_token")),
    Detector("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", token("digitalocean_token")),
    Detector("alibaba_access_key", r"\bLTAI[A-Za-z0-9]{20}\b", token("alibaba_access_key", 3.0)),
    Detector(
        "flyio_token",
        r"\b(?:fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3})",
        token("flyio_token"),
    ),
    Detector("heroku_api_key", r"\bHRKU-AA[A-Za-z0-9_-]{58}\b", token("heroku_api_key")),
    Detector("vault_token", r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}", token("vault_token", 3.0)),
    Detector("terraform_token", r"\b[a-zA-Z0-9]+\.atlasv1\.[A-Za-z0-9_=-]{60,70}", token("terraform_token")),
    Detector("pulumi_token", r"\bpul-[a-f0-9]{40}\b", token("pulumi_token")),
    Detector(
        "doppler_token",
        r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_-]+\.)?[A-Za-z0-9]{40,44}\b",
        token("doppler_token"),
    ),
    Detector("openshift_token", r"\bsha256~[A-Za-z0-9_-]{43}\b", token("openshift_token")),
    Detector("cloudflare_ca_key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b", token("cloudflare_ca_key")),
    Detector("scalingo_token", r"\btk-us-[A-Za-z0-9_-]{48}\b", token("scalingo_token")),
    Detector("clickhouse_secret", r"\b4b1d[A-Za-z0-9]{38}\b", token("clickhouse_secret", 3.0)),
    # Code hosting and CI
    Detector("github_token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b", token("github_token", 2.5)),
    Detector("github_token", r"\bgithub_pat_[A-Za-z0-9_]{60,255}\b", token("github_token")),
    Detector(
        "gitlab_token",
        r"\b(glpat-[A-Za-z0-9_-]{27,}\.[0-9a-z]{2}[0-9a-z]{7}|glpat-[A-Za-z0-9_-]{20}|glptt-[A-Za-z0-9_-]{40}"
        r"|glimt-[A-Za-z0-9_-]{25}|gloas-[A-Za-z0-9_-]{64}|glagent-[A-Za-z0-9_-]{50,}"
        r"|glcbt-(?:[0-9a-fA-F]{1,5}_)?[A-Za-z0-9_-]{20}|glrt-(?:t\d_)?[A-Za-z0-9_-]{20,}(?:\.[0-9a-z]{2}[0-9a-z]{7})?"
        r"|gl(?:dt|soat|ffct|ft|wt)-[A-Za-z0-9_-]{20}|GR1348941[A-Za-z0-9_-]{20})" + _END,
        token("gitlab_token", 2.5),
        1,
    ),
    Detector("atlassian_token", r"\bATATT3[A-Za-z0-9_=-]{100,}", token("atlassian_token")),
    Detector("bitbucket_token", r"\bATBB[A-Za-z0-9_=.-]{28,}", token("bitbucket_token", 3.0)),
    Detector(
        "sourcegraph_token",
        r"\bsgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}\b|\bsgp_[a-fA-F0-9]{40}\b",
        token("sourcegraph_token", 3.0),
    ),
    Detector("sonar_token", r"\bsq[pua]_[a-f0-9]{40}\b", token("sonar_token")),
    Detector("snyk_token", r"\bsnyk_(?:uat|sat)\.[a-z0-9]{8}\.[A-Za-z0-9_-]{20,}", token("snyk_token")),
    Detector("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", token("npm_token", 3.0)),
    Detector("pypi_token", r"\bpypi-Ag[A-Za-z0-9_-]{100,}", token("pypi_token")),
    Detector("rubygems_token", r"\brubygems_[a-f0-9]{48}\b", token("rubygems_token")),
    Detector("nuget_key", r"\boy2[a-z0-9]{43}\b", token("nuget_key", 3.0)),
    Detector("dockerhub_token", r"\bdckr_pat_[A-Za-z0-9_-]{27}\b", token("dockerhub_token")),
    Detector(
        "artifactory_token",
        r"\b(?:AKCp[A-Za-z0-9]{69}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})\b",
        token("artifactory_token", 3.0),
    ),
    Detector("prefect_token", r"\bpnu_[A-Za-z0-9]{36}\b", token("prefect_token")),
    Detector("infracost_token", r"(?:^|[^.\w-])(ico-[A-Za-z0-9]{32})\b", token("infracost_token"), 1),
    Detector("readme_token", r"\brdme_[a-z0-9]{70}\b", token("readme_token", 3.0)),
    Detector(
        "sentry_token", r"\b(?:sntrys_eyJ[A-Za-z0-9+/=_]{60,}|sntryu_[a-f0-9]{64})", token("sentry_token")
    ),
    Detector(
        "grafana_token",
        r"\b(?:glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|eyJrIjoi[A-Za-z0-9]{60,400}={0,2})",
        token("grafana_token", 2.5),
    ),
    Detector("linear_api_key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b", token("linear_api_key")),
    Detector("postman_api_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b", token("postman_api_key")),
    Detector("dynatrace_token", r"\bdt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}\b", token("dynatrace_token")),
    Detector(
        "newrelic_key",
        r"\b(?:NRAK-[A-Z0-9]{27}|NRJS-[a-f0-9]{19}|NRII-[A-Za-z0-9_-]{32}|NRAA-[a-f0-9]{27}|(?:eu\d\dxx)?[a-f0-9]+NRAL)\b",
        token("newrelic_key", 2.5),
    ),
    Detector("octopus_api_key", r"\bAPI-[A-Z0-9]{26}\b", token("octopus_api_key", 3.0)),
    Detector("dtrack_api_key", r"\bodt_[A-Za-z0-9]{32,}\b", token("dtrack_api_key")),
    Detector("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{250,}={0,3}", token("onepassword_token", 3.0)),
    Detector(
        "onepassword_secret_key",
        r"\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b",
        token("onepassword_secret_key", 3.0),
    ),
    # Messaging, payments and SaaS
    Detector(
        "slack_webhook",
        r"https?:\\?/\\?/hooks\.slack\.com\\?/(?:services|workflows|triggers)\\?/[A-Za-z0-9+/_\\-]{20,}",
        token("slack_webhook"),
    ),
    Detector("slack_token", r"\bxox(?:[abposre]|e\.xox[bp])-[A-Za-z0-9-]{14,}", lambda s, k: _slack(s)),
    Detector("slack_app_token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+\b", token("slack_app_token")),
    Detector(
        "discord_webhook",
        r"https?:\\?/\\?/(?:ptb\.|canary\.)?discord(?:app)?\.com\\?/api\\?/webhooks\\?/\d+\\?/[A-Za-z0-9_-]{60,}",
        token("discord_webhook"),
    ),
    Detector(
        "teams_webhook",
        r"https?:\\?/\\?/[a-z0-9-]+\.webhook\.office\.com\\?/webhookb2\\?/[A-Za-z0-9@/._-]{60,}",
        token("teams_webhook"),
    ),
    Detector(
        "discord_bot_token",
        r"\b[A-Za-z0-9][A-Za-z0-9_-]+\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}\b",
        _discord,
    ),
    Detector("telegram_bot_token", r"(?:^|[^A-Za-z0-9:_-])(\d+:AA[A-Za-z0-9_-]{33})" + _END, _telegram, 1),
    Detector("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,99}\b", token("stripe_key", 2.5)),
    Detector("stripe_webhook_secret", r"\bwhsec_[A-Za-z0-9]{24,}\b", token("stripe_webhook_secret")),
    Detector(
        "square_token",
        r"\b(?:EAAA[A-Za-z0-9_-]{60}|sq0(?:atp|csp)-[A-Za-z0-9_\\-]{22,43})",
        token("square_token"),
    ),
    Detector("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", token("shopify_token")),
    Detector("twilio_api_key", r"\bSK[0-9a-f]{32}\b", token("twilio_api_key", 3.0)),
    Detector("sendgrid_api_key", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b", token("sendgrid_api_key")),
    Detector("mailchimp_api_key", r"\b[0-9a-f]+-us\d{1,2}\b", _sized("mailchimp_api_key", 36, 37)),
    Detector("mailgun_key", r"\bkey-[0-9a-f]{32}\b", token("mailgun_key")),
    Detector(
        "notion_token",
        r"\b(?:ntn_\d{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})\b",
        token("notion_token", 3.0),
    ),
    Detector(
        "hubspot_token",
        r"\bpat-(?:na|eu)\d-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}\b",
        token("hubspot_token"),
    ),
    Detector("mapbox_token", r"\b[ps]k\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}", token("mapbox_token")),
    Detector("facebook_token", r"\bEAA[A-Za-z0-9]{90,}", token("facebook_token", 3.0)),
    Detector(
        "twitter_bearer_token", r"\bAAAAAAAAAAAAAAAAAAAAA[A-Za-z0-9%]{30,}", token("twitter_bearer_token")
    ),
    Detector("adafruit_key", r"\baio_[A-Za-z0-9]{28}\b", token("adafruit_key", 3.0)),
    Detector("easypost_token", r"\bEZ[AT]K[a-z0-9]{54}\b", token("easypost_token")),
    Detector(
        "planetscale_token", r"\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=-]{32,64}", token("planetscale_token")
    ),
    Detector("salesforce_token", r"\b00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{80,}", token("salesforce_token")),
    Detector("cratesio_token", r"\bcio[A-Za-z0-9]{32}\b", token("cratesio_token", 3.5)),
    Detector("doppler_token", r"\bdp\.[a-z]{2,5}\.[A-Za-z0-9]{40,}\b", token("doppler_token")),
    Detector(
        "sumologic_access_id",
        r"(?i:sumo)[A-Za-z0-9_.-]*(?i:id)\W{0,3}[:=]\s*\\*[\"']?(su[A-Za-z0-9]{12})\b",
        token("sumologic_access_id"),
        1,
    ),
    Detector(
        "kubernetes_bootstrap_token",
        r"(?i:token)[\w.-]*[\"']?[ \t]*[:=][ \t]*[\"']?([a-z0-9]{6}\.[a-z0-9]{16})\b",
        token("kubernetes_bootstrap_token"),
        1,
    ),
    Detector(
        "bundler_credentials",
        r"\bBUNDLE_[A-Z0-9_]+__[A-Z]+[\"']?[ \t]*[:=][ \t]*[\"']?[^\s\"':;]+:([^\s\"';&]+)",
        auth_value("bundler_credentials", 4),
        1,
    ),
    Detector(
        "sonar_token",
        r"(?i:sonar[_.]?(?:login|token))[\"']?[ \t]*:*[?]?=?[ \t]*[\"']?((?:sq[pua]_)?[A-Za-z0-9]{40})\b",
        token("sonar_token"),
        1,
    ),
    Detector(
        "sourcegraph_token",
        r"(?i:sourcegraph)[A-Za-z0-9_.-]*[\"']?[ \t]*[:=][ \t]*[\"']?([a-fA-F0-9]{40})\b",
        token("sourcegraph_token"),
        1,
    ),
    Detector(
        "codeclimate_reporter_id",
        r"\bCC_TEST_REPORTER_ID[\"']?[ \t]*[:=][ \t]*[\"']?([a-f0-9]{64})\b",
        token("codeclimate_reporter_id"),
        1,
    ),
    Detector(
        "facebook_app_token", r"\b\d+\|[A-Za-z0-9_-]{27}\b", _digits_then("facebook_app_token", "|", 15, 16)
    ),
    Detector("azure_devops_pat", r"\b[A-Za-z0-9]+AZDO[A-Za-z0-9]{4}\b", _sized("azure_devops_pat", 84, 84)),
    Detector("vault_unseal_key", r"\bunseal[ \t]+([A-Za-z0-9+/]{40,}={0,2})", token("vault_unseal_key"), 1),
    Detector(
        "teams_webhook",
        r"https?:\\?/\\?/outlook\.office(?:365)?\.com\\?/webhook(?:b2)?\\?/[A-Za-z0-9@/._\\-]{40,}",
        token("teams_webhook"),
    ),
    Detector("truenas_api_key", r"\b\d+-[A-Za-z0-9]{64}\b", _digits_then("truenas_api_key", "-", 1, 4)),
    Detector("twitch_stream_key", r"\blive_\d+_[A-Za-z0-9]{30}\b", token("twitch_stream_key")),
    Detector(
        "softlayer_api_key",
        r"softlayer\.com\\?/soap\\?/v3(?:\.1)?\\?/([a-z0-9]{64})\b",
        token("softlayer_api_key"),
        1,
    ),
    Detector(
        "basic_auth",
        r"(?:\s|^)-u[ \t]+[^\s]+[ \t]+-p[ \t]*([^\s\"'-][^\s\"']*)",
        auth_value("basic_auth", 4),
        1,
    ),
    # Tokens without a provider prefix
    Detector(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,3}",
        token("jwt"),
    ),
    Detector(
        "password_hash",
        r"(?:\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}|\$(?:1|5|6|8|9|md5|apr1|y|gy|7)\$[./A-Za-z0-9$=+-]{8,}|\$argon2(?:id|i|d)\$[A-Za-z0-9=$,+/.-]{20,}|\$krb5(?:asrep|tgs)\$[^\s\"'`]{20,}|\$(?:pbkdf2|scrypt)[A-Za-z0-9-]*\$[A-Za-z0-9$./+=-]{20,})",
        token("password_hash"),
    ),
    # Credentials in URLs, connection strings, headers and command lines
    Detector(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]*:\\?/\\?/[^\s:/@'\"`<>\\]*:([^\s/@'\"`<>\\]+)@[A-Za-z0-9\[_%-]",
        url_password,
        1,
    ),
    Detector(
        "authorization",
        r"(?i:\bauthorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?:bearer|basic|token|digest|apikey|sso-key|otoken|key)?[ \t]*)([A-Za-z0-9._~+/=:@-]{8,}(?:[ \t]+[A-Za-z0-9._~+/=-]{8,})?)",
        auth_value("authorization"),
        1,
    ),
    Detector(
        "api_key_header",
        r"(?i:\b(?:x-api-key|x-auth-token|x-access-token|api-key|apikey|x-jfrog-art-api|private-token|x-vault-token|token|x-goog-api-key)[\"']?:[ \t]*)([A-Za-z0-9._~+/=-]{8,})",
        auth_value("api_key_header", names_ok=False),
        1,
    ),
    Detector(
        "bearer_token", r"(?i:\bbearer[ \t]+)([A-Za-z0-9._~+/-]{20,}=*)", auth_value("bearer_token", 20), 1
    ),
    Detector(
        "basic_auth",
        r"(?:\s|^)(?:-u|--user|--proxy-user|-U)[ \t]+[\"']?(?:[^\s:\"']+|\"[^\"]+\")[\"']?:([^\s]+)",
        auth_value("basic_auth", 4),
        1,
    ),
    Detector(
        "connection_string_password",
        r"(?i:;[ \t]*(?:password|pwd|secret|sharedaccesskey|accountkey)[ \t]*=[ \t]*)([^;\"'<>\s]+)",
        auth_value("connection_string_password", 4),
        1,
    ),
    Detector(
        "postmark_token",
        r"(?i:postmark)[A-Za-z0-9_.-]*[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b",
        token("postmark_token"),
        1,
    ),
    # Credential constructors and calls whose Nth argument is a password
    Detector(
        "password",
        r"\b(?:NetworkCredential|PasswordAuthentication|UsernamePasswordCredentials|BasicAWSCredentials"
        r"|HTTPBasicAuth|HTTPDigestAuth|login|auth[ \t]*=)[ \t]*\(\s*" + _ARG + r",\s*" + _QUOTED_ARG,
        credential_argument,
        1,
        lane=1,
    ),
    Detector(
        "password",
        r"\bDirectoryEntry[ \t]*\(\s*" + _ARG + r",\s*" + _ARG + r",\s*" + _QUOTED_ARG,
        credential_argument,
        1,
        lane=1,
    ),
    # Prose: "the default password for user 'postgres' is 'admin'"
    Detector(
        "password",
        r"\b(?i:password|passwd|passphrase)(?:[ \t]+(?i:for|of)[ \t]+(?:(?i:the)[ \t]+)?(?:[A-Za-z]+[ \t]+)?"
        r"[\"'][^\"'\r\n]{1,40}[\"'])?[ \t]+(?i:is|was)[ \t]+(?:(?i:set[ \t]+to)[ \t]+)?"
        r"(\"[^\"\r\n]{3,64}\"|'[^'\r\n]{3,64}')",
        stated_password,
        1,
        lane=1,
    ),
    # Config lines: a user line, then a password line whose bare value is a literal
    Detector(
        "password",
        r"(?m:^)[ \t]*(?i:user|username|login|uid)[ \t]*[=:][ \t]*[^\s]+[ \t]*\r?\n"
        r"(?:[ \t]*(?://|#|;)[^\r\n]*\r?\n){0,3}[ \t]*((?i:password|passwd|pass|pwd))[ \t]*[=:][ \t]*"
        r"([^\s\"'][^\s]*)[ \t]*(?:\r?\n|$)",
        paired_password,
        2,
        1,
        lane=1,
    ),
    # `key = value` in any language or config format, and the reverse comparison
    Detector(
        "assignment",
        r"(?i:key)=\\*[\"']" + _KEY + r"\\*[\"'][ \t]+(?i:value)=" + _QUOTED,
        assignment,
        2,
        1,
        lane=1,
    ),
    Detector("assignment", _KEY + _SEP + _VALUE, assignment, 2, 1, lane=1),
    Detector("assignment", _FLAG + _VALUE, flag_assignment, 2, 1, lane=1),
    Detector(
        "assignment",
        r"(?m:^)([ \t]*[A-Za-z0-9_.$@-]*" + _KEYWORD + r"[A-Za-z0-9_.-]*)[ \t]*[=:][ \t]*\r?\n"
        r"((?:[ \t]+[^\s#][^\r\n]*(?:\r?\n|$))+)",
        block_value,
        2,
        1,
        lane=1,
    ),
    # ("api_token", "value") arguments and <add key="Password" value="..."/> entries
    Detector("assignment", r"\\*[\"']" + _KEY + r"\\*[\"'][ \t]*,[ \t]*" + _QUOTED, argument, 2, 1, lane=1),
    Detector(
        "assignment",
        r"(\\*[\"'`][^\"'`\r\n\\]+)\\*[\"'`][ \t]*[!=]==?[ \t]*([A-Za-z0-9_.]*"
        + _KEYWORD
        + r"[A-Za-z0-9_]*)",
        assignment,
        1,
        2,
        lane=1,
    ),
    Detector(
        "high_entropy_string",
        r"\b([A-Za-z_][A-Za-z0-9_.-]*)\\*[\"']?[ \t]*=[ \t]*(\\*[\"']?[A-Za-z0-9+/_~.=-]{20,})",
        high_entropy,
        2,
        1,
        lane=2,
    ),
)
