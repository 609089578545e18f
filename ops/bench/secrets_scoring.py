"""How the secrets bench scores a redactor: recall and false positives per labelled corpus.

Used by `python -m ops.bench secrets` (ops/bench/secrets.py), held_out.py and the corpus tests.

Corpora: ../shared/data/secrets/*.jsonl (FORMATS.md §5). Definitions:

- A **positive is caught** when its secret occurs fewer times in the redacted text than in the
  original. The secret is `expected_secret`; for noseyparker rules with several capture groups
  (user, password, host), a positive is caught when any group is gone (the redactor never removes
  user names or hosts, so in practice the credential group). Without `expected_secret`, the
  secret is the last token of eight or more characters (split on whitespace, quotes and
  `=:,;()<>`), else the longest.
- Positives **out of policy** are counted apart, not in recall: noseyparker samples whose
  categories include `identifier` but not `secret` (ARNs, bucket names, account ids), and
  detect-secrets `ip_public` (IP addresses are not credentials), and placeholder positives whose
  secret holds a run of eight or more `x`/`X` or of one repeated character (`AP6xxxxxxxxxx`,
  `AKIAZZZZZZZZZZZZZZZZ`): the redactor treats such values as placeholders.
  noseyparker `hashed` samples (password hashes) are in policy: they are crackable offline.
- A **negative is a false positive** when redaction changes it, unless the corpus says it is a
  secret of another kind and we did not call it this one: its `gitleaks_regex_matches` names a
  rule other than its own, and none of our finding kinds equals the rule's kind (kinds and rule
  names compared as word sets without generic words like key/token/api/secret; generic kinds
  such as `password` equal only generic rules). `fp_rate_unlisted` leaves out negatives that
  the rule's own raw regex matches (`rule_id` in `gitleaks_regex_matches`): upstream rejects those
  through allowlists of specific known strings (e.g. public Google API keys), which no pattern
  can reproduce without hardcoding the list.
- detect_secrets_test_files: each line that detect-secrets 1.5.0 flags or that carries
  `# pragma: allowlist secret` is a positive, except lines whose only findings are
  "Hex High Entropy String" (bare hex digests are not secrets by policy); its secret is the
  longest quoted string, else the value after `=`/`:` without a YAML tag (`!!binary`). Caught
  when a finding covers it.
- **Family-held-out** figures (ops/bench/held_out.py, families.py, tuning.py): samples are
  grouped by family (the vendor in their rule id); each family is scored without our rules that
  were tuned on it (worker/redaction/TUNING.md): k-fold with one fold per family, since every
  rule's tuning is recorded per family. `held_out`: Kingfisher's whole catalog stays (we did not
  tune it); `strict`: our generic rules from before the log count as tuned on every family, so
  they are left out everywhere; `new_vendor`: Kingfisher's rules of the sample's own vendor are
  left out too (upstream wrote many with these very test cases), which is what a vendor nobody
  has a rule for would meet; `strict_new_vendor`: both; `ours_only`: no Kingfisher at all.
  Held-out false positives are those of a smaller rule set (rules only leave), so they are never
  above the deployed one's: the deployed rule set's false-positive rate is the in-sample one.
  In-sample figures (`recall`, `fp_rate`) use every rule on every sample.
- Throughput: MB of the Claude Code transcript file per CPU second through `redact_block` on
  every content block (after a warm-up of 50 blocks), and through `redact_text` on the raw file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from worker.redaction import Redactor

CORPORA = (
    "gitleaks_rule_cases",
    "noseyparker_rule_examples",
    "detect_secrets_plugin_cases",
    "detect_secrets_test_files",
)
_GENERIC = frozenset(
    [
        "key",
        "keys",
        "token",
        "tokens",
        "api",
        "secret",
        "secrets",
        "access",
        "generic",
        "keyword",
        "password",
        "passwd",
        "pwd",
        "auth",
        "credential",
        "credentials",
        "string",
        "high",
        "entropy",
        "value",
        "np",
    ]
)
_SPLIT = re.compile(r"[\s'\"`=:,;()<>]+")
_PLACEHOLDER = re.compile(r"[xX]{8,}|(.)\1{7,}")


def _words(name: str) -> frozenset[str]:
    return frozenset(w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and not w.isdigit()) - _GENERIC


def same_kind(kind: str, rule: str) -> bool:
    """Whether one of our finding kinds is the kind a rule detects (generic equals generic)."""
    return _words(kind) == _words(rule)


def _rule_name(row: dict[str, Any]) -> str:
    return str(row.get("rule_name") or row["rule_id"])


def _secrets_of(row: dict[str, Any]) -> list[str]:
    expected = row.get("expected_secret")
    if isinstance(expected, str) and expected:
        return [expected]
    if isinstance(expected, list) and expected:
        return [e for e in expected if isinstance(e, str) and e]
    tokens = [t for t in _SPLIT.split(row["text"]) if t]
    long = [t for t in tokens if len(t) >= 8]
    return [long[-1]] if long else [max(tokens, key=len)] if tokens else []


def _in_policy(row: dict[str, Any], secrets: list[str]) -> bool:
    categories = row.get("categories") or []
    if ("identifier" in categories and "secret" not in categories) or row["rule_id"] == "ip_public":
        return False
    return not any(_PLACEHOLDER.search(s) for s in secrets)


def _caught(original: str, redacted: str, secrets: list[str]) -> bool:
    return any(redacted.count(s) < original.count(s) for s in secrets)


def _false_positive(row: dict[str, Any], redactor: Redactor) -> bool:
    text = row["text"]
    if redactor.redact_text(text) == text:
        return False
    own = row["rule_id"]
    other = [r for r in row.get("gitleaks_regex_matches") or [] if r != own]
    kinds = {f.kind for f in redactor.findings(text)}
    return not other or any(same_kind(k, _rule_name(row)) for k in kinds)


def score_rows(rows: Iterable[dict[str, Any]], redactor: Redactor) -> dict[str, Any]:
    """Positives, recall, out-of-policy count, negatives and false-positive rate of labelled rows."""
    positives = caught = out_of_policy = negatives = false_positives = allowlisted = 0
    misses: list[str] = []
    fps: list[str] = []
    for row in rows:
        if row.get("label") == "positive":
            secrets = _secrets_of(row)
            if not _in_policy(row, secrets):
                out_of_policy += 1
                continue
            positives += 1
            if _caught(row["text"], redactor.redact_text(row["text"]), secrets):
                caught += 1
            else:
                misses.append(row["id"])
        elif row.get("label") == "negative":
            negatives += 1
            if _false_positive(row, redactor):
                false_positives += 1
                fps.append(row["id"])
                allowlisted += row["rule_id"] in (row.get("gitleaks_regex_matches") or [])
    return {
        "positives": positives,
        "recall": round(caught / max(1, positives), 3),
        "out_of_policy": out_of_policy,
        "negatives": negatives,
        "fp_rate": round(false_positives / max(1, negatives), 3),
        "fp_rate_unlisted": round((false_positives - allowlisted) / max(1, negatives), 3),
        "caught": caught,
        "fps": false_positives,
        "misses": misses,
        "false_positives": fps,
    }


def _line_secret(line: str) -> str:
    quoted = re.findall(r"'([^']+)'|\"([^\"]+)\"", line)
    values = [a or b for a, b in quoted]
    if values:
        return max(values, key=len)
    value = re.split(r"[=:]", line, maxsplit=1)[-1]
    # a YAML tag (`!!binary MjNj…`) is syntax, not part of the value it types
    return re.sub(r"^!!\w+\s+", "", value.split("#")[0].strip())


def score_test_files(files: Iterable[dict[str, Any]], redactor: Redactor) -> dict[str, Any]:
    """Recall over the flagged and allowlisted lines of detect-secrets' own test files."""
    positives = caught = 0
    misses: list[str] = []
    for f in files:
        text: str = f["text"]
        lines = text.split("\n")
        flagged: dict[int, set[str]] = {}
        for finding in f["detect_secrets_1_5_0_findings"]:
            flagged.setdefault(finding["line_number"], set()).add(finding["type"])
        for number, line in enumerate(lines, 1):
            if "pragma: allowlist secret" in line:
                flagged.setdefault(number, set()).add("pragma")
        spans = redactor.findings(text)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line) + 1)
        for number, types in sorted(flagged.items()):
            if types == {"Hex High Entropy String"}:
                continue
            line = lines[number - 1]
            secret = _line_secret(line)
            at = offsets[number - 1] + line.find(secret)
            positives += 1
            if any(s.start <= at and at + len(secret) <= s.end for s in spans):
                caught += 1
            else:
                misses.append(f"{f['path']}:{number}")
    return {
        "positives": positives,
        "recall": round(caught / max(1, positives), 3),
        "out_of_policy": 0,
        "negatives": 0,
        "fp_rate": 0.0,
        "fp_rate_unlisted": 0.0,
        "caught": caught,
        "fps": 0,
        "misses": misses,
        "false_positives": [],
    }


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Recall and false-positive rate pooled over corpora."""
    positives = sum(r["positives"] for r in rows)
    negatives = sum(r["negatives"] for r in rows)
    fps = sum(r["fps"] for r in rows)
    unlisted = sum(r["fp_rate_unlisted"] * r["negatives"] for r in rows)
    return {
        "positives": positives,
        "recall": round(sum(r["caught"] for r in rows) / max(1, positives), 3),
        "out_of_policy": sum(r["out_of_policy"] for r in rows),
        "negatives": negatives,
        "fp_rate": round(fps / max(1, negatives), 3),
        "fp_rate_unlisted": round(unlisted / max(1, negatives), 3),
        "caught": sum(r["caught"] for r in rows),
        "fps": fps,
        "misses": [],
        "false_positives": [],
    }


def load_rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def score(name: str, rows: list[dict[str, Any]], redactor: Redactor) -> dict[str, Any]:
    if name == "detect_secrets_test_files":
        return score_test_files(rows, redactor)
    return score_rows(rows, redactor)


def score_corpus(root: Path, name: str, redactor: Redactor) -> dict[str, Any]:
    """The figures of one corpus under ../shared/data/secrets."""
    return score(name, load_rows(root / "secrets" / f"{name}.jsonl"), redactor)
