"""Sample families, for family-held-out secret figures.

A sample's family is the vendor or shape its rule is about, read from the rule id the same way in
every corpus: `aws-access-token` (gitleaks), `np.aws.2` (noseyparker) and `aws_key`
(detect-secrets) are all family `aws`.
Lines of detect-secrets' test files have no rule: they are one family, `detect-secrets-files`.
A few names of one vendor are one family (`vault` is `hashicorp`, `pem` is `private`).
"""

from __future__ import annotations

import re
from typing import Any

FILES_FAMILY = "detect-secrets-files"
_SAME = {
    "vault": "hashicorp",
    "pem": "private",
    "sonarqube": "sonar",
    "gcp": "google",
    "gcs": "google",
    "s3": "aws",
    "arn": "aws",
    "onepassword": "1password",
    "msteams": "teams",
    "terraform": "hashicorp",
}


def canonical(word: str) -> str:
    """One name per vendor: `vault` -> `hashicorp`."""
    return _SAME.get(word, word)


def family(row: dict[str, Any]) -> str:
    """The family of a labelled sample: the first word of its rule id, lowercased."""
    rule = row.get("rule_id")
    if not isinstance(rule, str) or not rule:
        return FILES_FAMILY
    rule = rule.lower().removeprefix("np.")
    return canonical(re.split(r"[-_.]", rule, maxsplit=1)[0])
