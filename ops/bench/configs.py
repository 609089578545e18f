"""Config-format corpus (issue 25): credentials in credential positions, and near misses, per format.

Each file of tests/data/configs/ is one configuration format written for this bench, every line
labelled in its margin (`C ` credential, `N ` near miss, README.md there). A file is redacted
whole, as the one tool result an agent's `cat` or Read gives, under the standard and the strict
profile, and scored per line:

- a credential line is caught when none of the words of its marked credential is left (beyond
  the times the word is on the line outside the credential: `admin:admin`);
- a near-miss line is changed when its redacted text differs at all.

Run: python -m ops.bench.configs   (or `python -m ops.bench configs`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.bench.common import table
from worker.redaction import Redactor
from worker.redaction.scanner import ALL, CONFIG_POSITIONS, Ruleset, strict_rules

# the rules as they were before config positions (issue 25): everything else
BEFORE = Ruleset.without(frozenset({CONFIG_POSITIONS}))

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "configs"
# upstream example files with planted credentials, formats no rule was written for (issue 42)
PUBLIC_CONFIGS = CORPUS.parent / "public_configs"
_MARK = re.compile("«(.*?)»")
_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9_]+:[0-9a-f]{8}\]")


@dataclass(frozen=True, slots=True)
class Line:
    """One labelled line: `C` (credential), `N` (near miss) or ` ` (neither), its text, its secrets."""

    label: str
    text: str
    secrets: tuple[str, ...]
    outside: str = ""  # the text with its credentials taken out


@dataclass(frozen=True, slots=True)
class ConfigFile:
    name: str
    lines: tuple[Line, ...]

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines) + "\n"


def load(root: Path = CORPUS) -> list[ConfigFile]:
    """Every corpus file, its labels and marks read off its margin."""
    files = []
    for path in sorted(root.iterdir()):
        if path.name == "README.md" or not path.is_file():
            continue
        lines = []
        for raw in path.read_text().splitlines():
            label, body = raw[:1], raw[2:]
            if label not in ("C", "N", " ") or raw[1:2] not in (" ", ""):
                raise ValueError(f"{path.name}: a line must start with 'C ', 'N ' or two spaces: {raw!r}")
            lines.append(
                Line(label, _MARK.sub(r"\1", body), tuple(_MARK.findall(body)), _MARK.sub(" ", body))
            )
        if any(line.label == "C" and not line.secrets for line in lines):
            raise ValueError(f"{path.name}: a credential line without a «marked» credential")
        files.append(ConfigFile(path.name, tuple(lines)))
    return files


def caught(line: Line, redacted: str) -> bool:
    """Whether none of the line's credential words is left in its redacted text."""
    outside = line.outside
    left = _PLACEHOLDER.sub(" ", redacted)
    words = {w for secret in line.secrets for w in secret.split() if len(w) >= 2}
    return all(left.count(w) <= outside.count(w) for w in words)


def _within(line: Line, whole: Line) -> Line:
    """A line's credentials, judged against the whole file's text."""
    return Line("C", whole.text, line.secrets, whole.outside)


def score_file(config: ConfigFile, redactor: Redactor) -> dict[str, Any]:
    """Credential lines caught and near-miss lines changed in one file, with the lines missed."""
    redacted = redactor.redact_text(config.text)
    out = redacted.split("\n")
    creds = [(i, line) for i, line in enumerate(config.lines) if line.label == "C"]
    nears = [(i, line) for i, line in enumerate(config.lines) if line.label == "N"]
    if len(out) - 1 != len(config.lines):
        # a placeholder took line breaks (strict takes a YAML block whole): score on the whole text
        whole = Line("C", config.text, (), "\n".join(line.outside for line in config.lines))
        kept = set(out)
        missed = [f"{config.name}:{i + 1}" for i, line in creds if not caught(_within(line, whole), redacted)]
        changed = [f"{config.name}:{i + 1}: {line.text}" for i, line in nears if line.text not in kept]
    else:
        missed = [f"{config.name}:{i + 1}: {out[i]}" for i, line in creds if not caught(line, out[i])]
        changed = [f"{config.name}:{i + 1}: {out[i]}" for i, line in nears if out[i] != line.text]
    return {
        "format": config.name,
        "credentials": len(creds),
        "caught": len(creds) - len(missed),
        "near_misses": len(nears),
        "changed": len(changed),
        "missed": missed,
        "changed_lines": changed,
    }


def score(rules: Ruleset, files: list[ConfigFile] | None = None) -> list[dict[str, Any]]:
    redactor = Redactor(b"configs-bench", rules)
    return [score_file(f, redactor) for f in files or load()]


def main() -> dict[str, Any]:
    files = load()
    result: dict[str, Any] = {}
    for name, rules in (("before", BEFORE), ("standard", ALL), ("strict", strict_rules())):
        result[name] = score(rules, files)
    merged = [
        {
            "format": s["format"],
            "credentials": s["credentials"],
            "caught_before": b["caught"],
            "caught_standard": s["caught"],
            "caught_strict": t["caught"],
            "near_misses": s["near_misses"],
            "changed_before": b["changed"],
            "changed_standard": s["changed"],
            "changed_strict": t["changed"],
        }
        for b, s, t in zip(result["before"], result["standard"], result["strict"], strict=True)
    ]
    total = {k: sum(r[k] for r in merged) for k in merged[0] if k != "format"}
    print(table([*merged, {"format": f"all {len(merged)} formats", **total}], list(merged[0])))
    for name in ("standard", "strict"):
        for row in result[name]:
            for line in row["missed"]:
                print(f"{name} missed   {line}")
            for line in row["changed_lines"]:
                print(f"{name} changed  {line}")
    return {"formats": merged, "total": total}


if __name__ == "__main__":
    main()
