"""Shell commands as working memory sees them: a normalized key, the check runner, the outcome.

normalize("cd app && .venv/bin/python -m pytest tests/x.py -q 2>&1 | tail -5") == "pytest tests/x.py -q"
runner("pytest tests/x.py -q") == ("pytest", "test")      outcome(text, is_error) -> Outcome
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from worker.compaction.facts import ERROR_LINE

MAX_KEY_CHARS = 200
MAX_SUMMARY_CHARS = 160

_CD = re.compile(r"^cd\s+\S+\s*(?:&&|;)\s*")
_ENV = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
_WRAPPER = re.compile(
    r"^(?:(?:uv|poetry|pipenv|pdm|hatch)\s+run\s+(?:--\S+\s+)*|npx\s+|bunx\s+|timeout\s+\S+\s+|time\s+"
    r"|\S*\.venv/bin/|python3?\s+-m\s+(?=pytest|unittest|mypy|ruff))"
)
_REDIRECT = re.compile(r"\s*(?:\d?>>?&?\s*\d\b|\d?>>?\s*/dev/null|&>\s*\S+)")
_OR_TRUE = re.compile(r"\s*\|\|\s*(?:true|:|echo\b.*)$")
_VIEWER_PIPE = re.compile(r"\s*\|\s*(?:tail|head|tee|grep|less|cat|sort|uniq)\b.*$")

# (runner, kind, pattern at the start of a segment); kind "test" runs tests, "check" builds or lints
RUNNERS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (name, kind, re.compile(pattern))
    for name, kind, pattern in (
        ("pytest", "test", r"(?:py\.test|pytest)\b"),
        ("unittest", "test", r"(?:python3?\s+-m\s+)?unittest\b"),
        ("tox", "test", r"tox\b"),
        ("jest", "test", r"jest\b"),
        ("vitest", "test", r"vitest\b"),
        ("mocha", "test", r"mocha\b"),
        ("npm test", "test", r"(?:npm|yarn|pnpm|bun)\s+(?:run\s+)?test\b"),
        ("go test", "test", r"go\s+test\b"),
        ("cargo test", "test", r"cargo\s+(?:test|nextest)\b"),
        ("mix test", "test", r"mix\s+test\b"),
        ("rspec", "test", r"(?:bundle\s+exec\s+)?rspec\b"),
        ("phpunit", "test", r"(?:vendor/bin/)?phpunit\b"),
        ("make test", "test", r"make\s+(?:test|check)\b"),
        ("gradle test", "test", r"(?:\./)?gradlew?\s+test\b"),
        ("mvn test", "test", r"mvn\b.*\btest\b"),
        ("dotnet test", "test", r"dotnet\s+test\b"),
        ("mypy", "check", r"mypy\b"),
        ("ruff", "check", r"ruff\b"),
        ("tsc", "check", r"tsc\b"),
        ("eslint", "check", r"eslint\b"),
        ("mix compile", "check", r"mix\s+compile\b"),
        ("mix credo", "check", r"mix\s+credo\b"),
        ("cargo build", "check", r"cargo\s+(?:build|check|clippy)\b"),
        ("go build", "check", r"go\s+(?:build|vet)\b"),
        ("npm run", "check", r"(?:npm|yarn|pnpm|bun)\s+run\s+(?:lint|build|typecheck|check)\b"),
        ("make", "check", r"make\b"),
    )
)
# commands whose failure is an answer, not a problem (grep finds nothing, a file does not exist)
PROBES = frozenset(
    [
        "grep",
        "rg",
        "ag",
        "ls",
        "find",
        "test",
        "[",
        "which",
        "whereis",
        "type",
        "command",
        "stat",
        "file",
        "diff",
        "cmp",
        "cat",
        "head",
        "tail",
        "less",
        "wc",
        "echo",
        "printf",
        "pwd",
        "sleep",
        "ps",
        "pgrep",
        "kill",
        "jq",
    ]
)

_FAILED_COUNT = re.compile(r"(?i)\b[1-9]\d*\s+(?:failed|failures?|errors?\s+(?:in|during))\b")
_FAILED_MARK = re.compile(
    r"(?m)^(?:FAILED\b|FAIL\b|--- FAIL:|npm ERR!)|test result: FAILED|Traceback \(most recent call last\)"
)
_EXIT = re.compile(r"(?im)^(?:exit code|exited with code|exit status)[: ]+(\d+)")
_BACKGROUND = re.compile(r"(?i)running in (?:the )?background|command still running")
# the user stopped the call: it never ran, so it says nothing about the project
_REJECTED = re.compile(r"(?i)doesn't want to proceed with this tool use|request interrupted by user")
_DETAIL = (
    re.compile(r"(?m)^FAILED\s+\S.*$"),  # pytest's short summary
    re.compile(r"(?m)^--- FAIL:.*$"),  # go test
    re.compile(r"(?m)^E\s+\S.*$"),  # pytest's assertion lines
    re.compile(r"(?m)^\s*[\w.]*(?:Error|Exception)\b:?.*$"),  # an exception line
    re.compile(r"(?im)^.*\bfound [1-9]\d* .*$"),  # a linter's count ("found 2 issues")
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a command's result says: passed, failed (with a one-line summary) or not known yet."""

    kind: Literal["pass", "fail", "unknown"]
    summary: str = ""


def normalize(command: str) -> str:
    """The key of a command: its first line without cd, env, wrappers, redirections and viewer pipes."""
    line = command.strip().splitlines()[0] if command.strip() else ""
    before = None
    while before != line:
        before = line
        line = _CD.sub("", line)
        line = _ENV.sub("", line)
        line = _WRAPPER.sub("", line)
    line = _REDIRECT.sub("", line)
    line = _OR_TRUE.sub("", line)
    line = _VIEWER_PIPE.sub("", line)
    return " ".join(line.split())[:MAX_KEY_CHARS]


def segments(key: str) -> list[str]:
    """The commands a normalized `a && b` chain runs, each normalized."""
    return [normalize(s) for s in key.split("&&") if s.strip()]


def runner(key: str) -> tuple[str, str] | None:
    """(runner, kind) of the first test or check command in a chain, or None."""
    for segment in segments(key):
        for name, kind, pattern in RUNNERS:
            if pattern.match(segment):
                return name, kind
    return None


def words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def is_probe(key: str) -> bool:
    """A command whose non-zero exit is an answer (grep found nothing), not a blocker."""
    first = words(segments(key)[0])[:2] if segments(key) else []
    if not first:
        return True
    return first[0] in PROBES or (first[0] == "git" and first[1:2] in (["status"], ["diff"], ["log"]))


def whole_suite(segment: str) -> bool:
    """A runner invoked on no path: the whole suite (`pytest -q`, `mix test`), not one file."""
    return not any("/" in w or "::" in w or re.search(r"\.\w+$", w) for w in words(segment)[1:])


def family(segment: str) -> str | None:
    """Program and subcommand (`git push`), for commands with subcommands; None otherwise."""
    w = words(segment)
    if len(w) >= 2 and re.fullmatch(r"[a-z][a-z-]*", w[1]):
        return f"{w[0]} {w[1]}"
    return None


def outcome(text: str, is_error: bool) -> Outcome:
    """Pass or fail from a command's output: the error flag, a non-zero exit, failure counts,
    FAILED marks or a traceback. A command still running in the background, or one the user
    rejected, is not known."""
    if _REJECTED.search(text[:300]):
        return Outcome("unknown")
    exit_code = _EXIT.search(text)
    failed = (
        is_error
        or (exit_code is not None and exit_code.group(1) != "0")
        or _FAILED_COUNT.search(text) is not None
        or _FAILED_MARK.search(text) is not None
    )
    if not failed:
        return Outcome("unknown") if _BACKGROUND.search(text) else Outcome("pass")
    return Outcome("fail", summarize_failure(text, exit_code.group(1) if exit_code else None))


def summarize_failure(text: str, exit_code: str | None) -> str:
    """One line: the failure count line, then the first failing test or exception line."""
    count_line = next((ln for ln in text.splitlines() if _FAILED_COUNT.search(ln)), "")
    detail = next((m.group(0) for p in _DETAIL if (m := p.search(text))), "")
    if not detail:
        detail = next((ln for ln in text.splitlines() if ERROR_LINE.search(ln) and not _EXIT.match(ln)), "")
    parts = [_tidy(p) for p in (count_line, detail) if _tidy(p)]
    if not parts:
        said = next((_tidy(ln) for ln in text.splitlines() if _tidy(ln) and not _EXIT.match(ln)), "")
        parts = [f"exit code {exit_code}" if exit_code else "failed", *([said] if said else [])]
    line = " — ".join(dict.fromkeys(parts))
    return line if len(line) <= MAX_SUMMARY_CHARS else line[: MAX_SUMMARY_CHARS - 2] + " …"


def _tidy(line: str) -> str:
    return " ".join(line.replace("\\n", " ").strip().strip("=").split())
