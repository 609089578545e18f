"""The detector table: every one of our rules, in order.

Each entry is a `Detector` (rules.py): an RE2 pattern and the judge that confirms a candidate.
The table is assembled from three places:

    vendors.py     TOKENS: key blocks, vendor token formats, JWTs, password hashes (by looks)
    positions.py   POSITIONS, PROPERTY_POSITIONS: credentials where they sit, URL passwords,
                   Authorization and API-key headers, `curl -u`, connection strings, properties
                   lines and attributes (by structure)
    here           credential constructors, prose, config line pairs and keyword assignments
                   (`key = value`, `--password x`), judged in judges.py with keywords.py

Order matters only between patterns that can start at the same position: the first listed wins.
"""

from __future__ import annotations

from worker.redaction.judges import (
    argument,
    assignment,
    block_value,
    credential_argument,
    flag_assignment,
    high_entropy,
    paired_password,
    stated_password,
    token,
)
from worker.redaction.positions import POSITIONS, PROPERTY_POSITIONS
from worker.redaction.rules import Detector
from worker.redaction.vendors import TOKENS

_KEYWORD = r"(?i:pass|pwd|pw\b|secret|token|key|credential|auth|bearer|cred\b|pat\b)"
_KEY = r"([A-Za-z0-9_.$@-]*" + _KEYWORD + r"[A-Za-z0-9_.-]*(?:\[\d*\])?)"
_SEP = r"\\*[\"']?[ \t]*(?:=>|:{1,3}=|\?=|===?|!==?|[:=])[ \t]*"
# `--password x`, `-Password x`, netrc/gradle `password x`: a space separates key and value
# a flag starts a word, a quoted string (`"--token x"`) or a value (`?args=--token%20x`)
_FLAG = r"((?:[\s\"'=]|^)--?[A-Za-z0-9_.-]*" + _KEYWORD + r"[A-Za-z0-9_.-]*|\b(?i:password|passwd))[ \t]+"
_QUOTED = r"(\\*\"[^\"\\\r\n]{4,}|\\*'[^'\\\r\n]{4,})"
_UNQUOTED = r"[^\s\"'`,;&]"
# a call argument (quoted string or bare expression) and a quoted one
_ARG = r"(?:\"[^\"\r\n]*\"|'[^'\r\n]*'|[^,()\"'\r\n]+)\s*"
_QUOTED_ARG = r"(\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}')"
# unquoted values: not a short number (`"input_tokens": 1234`), which no judge would accept
# for the strict profile's own assignment rules (strict.py)
KEY_PATTERN, SEPARATOR = _KEY, _SEP
_VALUE = (
    # a backslash inside quotes is part of the value unless it escapes the quote (`\\"` in JSON)
    r"(\\*\"(?:[^\"\\\r\n]|\\[^\"\\\r\n]){4,}|\\*'(?:[^'\\\r\n]|\\[^'\\\r\n]){4,}|`[^`\r\n]{4,}|(?:!!\w+[ \t]+)?"
    r"(?:[0-9]{8,}|[^\s\"'`,;&0-9]|[0-9]{1,7}[^\s\"'`,;&0-9}\]])" + _UNQUOTED + r"*)"
)


DETECTORS: tuple[Detector, ...] = (
    *TOKENS,  # vendors.py, lane 0
    *POSITIONS,  # positions.py: URLs, headers, command lines, connection strings (lane 0)
    # a vendor format found by its name, listed after the connection strings as it always was
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
    *PROPERTY_POSITIONS,  # positions.py: properties lines and attributes (lane 1)
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
    # its own rule name, so the held-out bench can leave it out alone (TUNING.md 2026-11-24)
    Detector("flag_assignment", _FLAG + _VALUE, flag_assignment, 2, 1, lane=1),
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
