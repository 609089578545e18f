"""Offline subcommands of `compactd` (no services): `compact` and `replay`. Registered by api/cli/command.py."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the engine is imported by the commands that run it, not by every `compactd` start (api, worker, up)
if TYPE_CHECKING:
    from worker.compaction.model import FileWrite, Policy
    from worker.redaction.scanner import Ruleset

# the names pointers.file_ref and pointers.archive_ref give: what `compact` writes and may remove
_REF_NAME = re.compile(r"[fh]_[0-9a-f]{16}")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the offline subcommands to the CLI's subparsers."""
    p = sub.add_parser("compact", help="compact a transcript file offline and print the Anthropic request")
    p.add_argument("file", type=Path, help="transcript to compact (any supported format)")
    _common(p)
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for offloaded/clipped/archived files (default: ./compactd-files/<name>); "
        "each run replaces the files an earlier run wrote there",
    )
    p.add_argument("--json", action="store_true", help="print {request, stats} as JSON instead of a summary")
    p.add_argument(
        "--redaction-key-file",
        type=Path,
        metavar="FILE",
        help="the key placeholders are made with, created (mode 0600) if missing "
        "(default: $XDG_CONFIG_HOME/compactd/redaction.key): the same key, the same output",
    )
    p.set_defaults(func=run_compact)

    r = sub.add_parser(
        "replay",
        help="feed a transcript turn by turn at an agent's pace and report what it is served",
        description="Offline (default) the worker is simulated on the same clock as the appends; "
        "with --http the transcript is appended to a running compactd and its prompts fetched.",
    )
    r.add_argument("file", type=Path, help="transcript to replay (any supported format)")
    _common(r)
    r.add_argument(
        "--pace",
        default="1",
        help="SECONDS between appends, or recorded[xF]: the transcript's own times scaled by F "
        "(e.g. recordedx0.1). Default 1",
    )
    r.add_argument(
        "--http", metavar="BASE", help="drive a running service at BASE (e.g. http://127.0.0.1:8700)"
    )
    r.add_argument("--key", help="API key for --http")
    r.add_argument("--session", help="session id to create with --http (default: a new random one)")
    r.add_argument(
        "--job-seconds",
        type=float,
        help="offline: fix each job's duration instead of measuring it (deterministic runs)",
    )
    r.add_argument(
        "--price", type=float, default=3.0, help="input price, USD per million tokens (default 3.0)"
    )
    r.add_argument("--plot", type=Path, help="write a PNG of prompt size per turn")
    r.add_argument("--json", action="store_true", help="print the per-fetch rows and the summary as JSON")
    r.set_defaults(func=run_replay)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        default="auto",
        help="the transcript's format: anthropic, openai, claude_code, swe_agent, openhands, langchain "
        "or auto (default: detected)",
    )
    p.add_argument(
        "--context-window",
        type=int,
        default=200_000,
        metavar="TOKENS",
        help="the model's window, in tokens (default 200000)",
    )
    p.add_argument(
        "--output-reserve",
        type=int,
        metavar="TOKENS",
        default=8_192,
        help="tokens kept free for the reply, at most a quarter of the window (default 8192)",
    )
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a policy knob, e.g. clip_tokens=800",
    )
    p.add_argument(
        "--redaction",
        choices=("standard", "strict"),
        help="strict also redacts references, placeholders and identifiers (default standard; "
        "not with replay --http, where the service's COMPACTD_REDACTION applies)",
    )


def policy_from(args: argparse.Namespace) -> Policy:
    from worker.compaction.model import Policy

    base = Policy().for_window(args.context_window, args.output_reserve)
    overrides: dict[str, Any] = {}
    for item in args.policy:
        key, _, value = item.partition("=")
        if key not in Policy.__dataclass_fields__ or not value:
            raise SystemExit(
                f"compactd: unknown policy knob {key!r} (known: {', '.join(Policy.__dataclass_fields__)})"
            )
        kind = type(getattr(base, key))
        overrides[key] = kind(value)
    return base.with_overrides(overrides)


def rules_from(args: argparse.Namespace) -> Ruleset:
    """The --redaction profile's rules."""
    from worker.redaction.scanner import ALL, strict_rules

    return strict_rules() if args.redaction == "strict" else ALL


def _load(args: argparse.Namespace) -> Any:
    from worker.compaction.errors import CompactionError
    from worker.compaction.formats import load_transcript

    try:
        return load_transcript(args.file, format=args.format)
    except (OSError, CompactionError) as exc:
        raise SystemExit(f"compactd: cannot import {args.file}: {exc}") from None


def run_compact(args: argparse.Namespace) -> int:
    import orjson

    from api.cli.redaction_key import KeyFileError, default_key_file, load_or_create
    from worker.compaction.assemble import assemble
    from worker.compaction.model import Transcript
    from worker.compaction.pipeline import compact
    from worker.compaction.tokens import count_request
    from worker.compaction.validate import request_problems
    from worker.ingest import ingest
    from worker.redaction import Redactor

    policy = policy_from(args)
    imported = _load(args)
    started = time.perf_counter()
    # the user's own key, made once (a fixed public key would let a placeholder confirm a guessed
    # password; a key per run would make two runs differ)
    try:
        key = load_or_create(args.redaction_key_file or default_key_file())
    except KeyFileError as exc:
        raise SystemExit(f"compactd: {exc}") from None
    redactor = Redactor(key, rules_from(args))
    ingested = ingest(imported.messages, first_seq=1, redactor=redactor, policy=policy)
    system = redactor.redact_text(imported.system)
    t = Transcript(system=system, turns=ingested.turns, files=ingested.files)
    result = compact(t, policy, summarize=True)
    seconds = time.perf_counter() - started
    request = assemble(result.transcript)
    out = args.out or Path("compactd-files") / args.file.stem
    files = result.transcript.files
    replaced = write_files(out, files)
    size = args.file.stat().st_size
    stats = {
        "format": imported.format,
        "warnings": list(imported.warnings),
        "turns": len(t.turns),
        "tokens_before": t.tokens(),
        "tokens_after": result.tokens,
        "ratio": round(result.tokens / max(1, t.tokens()), 4),
        "request_tokens": count_request(request),
        "budget_tokens": policy.budget_tokens,
        "stages": [r.as_dict() for r in result.reports],
        "files_written": len(files),
        "files_dir": str(out) if files else None,
        "files_replaced": replaced,
        "valid": not request_problems(request, allow_pending_tool_use=True),
        "seconds": round(seconds, 3),
        "mb_per_second": round(size / 1e6 / max(seconds, 1e-9), 2),
    }
    if args.json:
        sys.stdout.write(
            orjson.dumps({"request": request, "stats": stats}, option=orjson.OPT_INDENT_2).decode() + "\n"
        )
        return 0
    sys.stdout.write(orjson.dumps(request).decode() + "\n")
    print(
        f"{args.file.name}: {imported.format}, {stats['turns']} turns, {stats['tokens_before']:,} -> "
        f"{stats['tokens_after']:,} tokens ({stats['ratio']:.1%}), budget {policy.budget_tokens:,}, "
        f"valid={stats['valid']}, {_files_line(len(files), out, replaced)}",
        file=sys.stderr,
    )
    for r in stats["stages"]:
        print(f"  {r['stage']:<10} {r['tokens_before']:>9,} -> {r['tokens_after']:>9,}", file=sys.stderr)
    for w in imported.warnings:
        print(f"  warning: {w}", file=sys.stderr)
    return 0


def write_files(out: Path, files: Sequence[FileWrite]) -> int:
    """Write this run's virtual files into out, first removing the ones an earlier run left there
    (other files stay): the folder then holds exactly this run's output. Returns how many went."""
    earlier = (
        [p for p in out.iterdir() if _REF_NAME.fullmatch(p.name) and p.is_file()] if out.is_dir() else []
    )
    for path in earlier:
        path.unlink()
    if files:
        out.mkdir(parents=True, exist_ok=True)
    for f in files:
        (out / f.ref).write_text(f.content)
    return len(earlier)


def _files_line(written: int, out: Path, replaced: int) -> str:
    line = f"{written} file{'' if written == 1 else 's'} in {out}" if written else "no files"
    return line + (f" (replacing {replaced} from an earlier run)" if replaced else "")


PLOT_MISSING = (
    "compactd: --plot needs matplotlib, an optional extra: `uv sync --extra plot` in a checkout "
    "(or `pip install 'compactd[plot]'`)"
)


def _require_matplotlib() -> None:
    """Stop before a long replay, in one line saying how to install it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(PLOT_MISSING) from None


def run_replay(args: argparse.Namespace) -> int:
    import orjson

    from worker.flows.simulate import parse_pace, plot, replay
    from worker.redaction import Redactor

    if args.plot:
        _require_matplotlib()
    try:
        pace = parse_pace(args.pace)
    except ValueError as exc:
        raise SystemExit(f"compactd: {exc}") from None
    policy = policy_from(args)
    imported = _load(args)
    timestamps = imported.meta.get("timestamps")
    if pace.recorded and not timestamps:
        raise SystemExit(f"compactd: {args.file.name} records no timestamps: use --pace SECONDS")
    if args.http:
        from api.cli.drive import ReplayError, replay_http

        if not args.key:
            raise SystemExit("compactd: --http needs --key (an API key of the service)")
        if args.redaction:
            raise SystemExit(
                "compactd: --redaction applies offline only: with --http the service redacts "
                "under its own COMPACTD_REDACTION"
            )
        try:
            report = replay_http(
                args.http,
                args.key,
                imported.system,
                imported.messages,
                pace=pace,
                timestamps=timestamps,
                context_window=args.context_window,
                session_id=args.session,
                price_per_mtok=args.price,
            )
        except ReplayError as exc:
            raise SystemExit(f"compactd: {exc}") from None
    else:
        report = replay(
            imported.system,
            imported.messages,
            policy,
            pace=pace,
            timestamps=timestamps,
            job_seconds=args.job_seconds,
            price_per_mtok=args.price,
            # a fixed key: placeholders tokenize alike from run to run (`--job-seconds` runs repeat)
            redactor=Redactor(b"replay", rules_from(args)),
        )
    if args.plot:
        plot(report, str(args.plot), f"{args.file.name} at a {args.context_window:,}-token window")
    if args.json:
        payload = {"summary": report.summary(), "fetches": report.rows()}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if report.over_budget == 0 else 1
    print(
        f"{'turn':>5} {'at s':>8} {'prompt':>8} {'budget':>8} {'raw':>8} {'read':>8} {'epoch':>5}  fallback"
    )
    for f in report.fetches:
        print(
            f"{f.turn:>5} {f.at_seconds:>8.2f} {f.prompt_tokens:>8,} {f.budget_tokens:>8,} {f.raw_tokens:>8,} "
            f"{f.billed.read_tokens:>8,} {f.epoch:>5}  {f.fallback or ''}"
        )
    for key, value in report.summary().items():
        print(f"{key}: {value}")
    return 0 if report.over_budget == 0 else 1
