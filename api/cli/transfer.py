"""`compactd import` and `compactd export`: a transcript into a session, a session out as JSON. Registered by api/cli/command.py.

Both work on the service's store (COMPACTD_DATABASE_URL, COMPACTD_REDIS_URL), not over HTTP: an
import goes through the same append core as POST /turns (worker/flows/append.py), so it is
redacted, validated and idempotent the same way, and compaction jobs are sent as for any append.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

# SQLAlchemy and the store are imported by `import`/`export` when they run, not by every `compactd` start

CHUNK_MESSAGES = 50
PAGE_TURNS = 500


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `import` and `export` to the CLI's subparsers."""
    i = sub.add_parser(
        "import",
        help="append a transcript file (any supported format) to a session, in chunks; re-running is a no-op",
    )
    i.add_argument("file", type=Path, help="transcript to import (Claude Code, SWE-agent, OpenHands, ...)")
    i.add_argument("--session", required=True, help="session id to append to (created if new)")
    _tenant_option(i)
    i.add_argument(
        "--format",
        default="auto",
        help="the transcript's format: anthropic, openai, claude_code, swe_agent, openhands, langchain "
        "or auto (default: detected)",
    )
    i.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="the session's window (default: the session's own, else COMPACTD_CONTEXT_WINDOW)",
    )
    i.add_argument(
        "--model",
        help="the session's model, which sets its window (default: the model the transcript records, "
        "if it records one; --context-window wins)",
    )
    i.add_argument(
        "--chunk",
        type=int,
        default=CHUNK_MESSAGES,
        metavar="MESSAGES",
        help=f"messages per append (default {CHUNK_MESSAGES}); a re-run must use the same value to be a no-op",
    )
    _progress_option(i)
    i.set_defaults(func=run_import)

    e = sub.add_parser("export", help="write a session's stored history or its served prompt as JSON")
    e.add_argument("session", help="session id to export")
    _tenant_option(e)
    e.add_argument(
        "--what",
        choices=("archive", "prompt"),
        default="archive",
        help="archive: every stored turn, verbatim as stored (redacted), as {system, messages}; "
        "prompt: the prompt a fetch serves now, as {system, messages} (default archive)",
    )
    e.add_argument(
        "--format",
        dest="out_format",
        choices=("json", "text"),
        default="json",
        help="json: {system, messages} (default; `compactd import` reads it back); "
        "text: one block per turn, roles and tool calls spelled out, for reading",
    )
    e.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE (default: stdout)")
    _progress_option(e)
    e.set_defaults(func=run_export)


def _tenant_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", help="tenant name (default: COMPACTD_DEFAULT_TENANT, else 'default')")


def _progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action="store_true",
        help="show a progress bar on stderr even when it is not a terminal (it shows on a terminal anyway)",
    )


class Progress:
    """A one-line progress bar on a stream, redrawn in place; silent when disabled."""

    WIDTH = 30

    def __init__(self, label: str, total: int, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.label, self.total, self.enabled = label, max(total, 1), enabled
        self.stream = stream or sys.stderr
        self.done = 0

    def advance(self, amount: int = 1) -> None:
        self.done = min(self.total, self.done + amount)
        if self.enabled:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def show_progress(args: argparse.Namespace) -> bool:
    return bool(args.progress) or sys.stderr.isatty()


def _stage_printer(enabled: bool) -> Any:
    """A function printing one `compactd import: …` line on stderr per step, when progress shows."""

    def say(text: str) -> None:
        if enabled:
            print(f"compactd import: {text}", file=sys.stderr, flush=True)

    return say


def chunk_keys(data: bytes, format: str, chunk: int, count: int) -> list[str]:
    """Idempotency keys for the chunks of one file: the same file, format and chunking always give
    the same keys, so a re-run (or a resumed one) stores nothing twice."""
    digest = hashlib.sha256(data + f"\0{format}\0{chunk}".encode()).hexdigest()[:24]
    return [f"import:{digest}:{i}" for i in range(count)]


def chunks(messages: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [messages[i : i + size] for i in range(0, len(messages), size)]


@contextmanager
def _store(command: str) -> Iterator[Any]:
    """The service's resources, closed after; an unreachable store is one line, not a traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    from api.cli.embedded_redis import with_redis
    from worker.resources import Resources
    from worker.settings import Settings

    settings = with_redis(Settings(), command)
    try:
        res = Resources.build(settings)
    except (SQLAlchemyError, OSError) as exc:
        raise SystemExit(f"{command}: cannot open the store: {type(exc).__name__}") from None
    try:
        yield res
    except SQLAlchemyError as exc:
        raise SystemExit(f"{command}: the database failed: {type(exc).__name__}") from None
    finally:
        res.close()


def _tenant_id(res: Any, name: str | None, command: str) -> tuple[int, str]:
    from worker.store.tenants import NoSuchTenant, tenant_id_named

    name = name or res.settings.default_tenant
    try:
        return tenant_id_named(res.engine, name), name
    except NoSuchTenant:
        raise SystemExit(
            f"{command}: no tenant named {name!r} (create it with `compactd tenant create`)"
        ) from None


def run_import(args: argparse.Namespace) -> int:
    from worker.compaction.errors import CompactionError
    from worker.compaction.formats import load_transcript
    from worker.contracts import AppendRequest
    from worker.enqueue import CeleryEnqueue
    from worker.flows.append import BrokenConversation, append_messages
    from worker.metrics import record_append, recorder_for
    from worker.store.sessions import IdempotencyMismatch

    command = "compactd import"
    if args.chunk < 1:
        raise SystemExit(f"{command}: --chunk must be at least 1")
    say = _stage_printer(show_progress(args))
    say(f"reading {args.file}")
    try:
        data = args.file.read_bytes()
        imported = load_transcript(data, format=args.format)
    except (OSError, CompactionError) as exc:
        raise SystemExit(f"{command}: cannot import {args.file}: {exc}") from None
    if not imported.messages:
        raise SystemExit(f"{command}: {args.file} holds no messages")
    model = args.model or imported.meta.get("model")
    say(
        f"{imported.format}, {len(imported.messages)} messages"
        + (f", model {model}" + ("" if args.model else " (recorded)") if model else "")
        + "; opening the store"
    )
    parts = chunks(imported.messages, args.chunk)
    keys = chunk_keys(data, imported.format, args.chunk, len(parts))
    with _store(command) as res:
        tenant, tenant_name = _tenant_id(res, args.tenant, command)
        with CeleryEnqueue(res.settings, res) as enqueue:
            recorder = recorder_for(res.cache)  # /metrics counts an imported chunk as an append
            bar = Progress(f"import {args.file.name}", len(imported.messages), enabled=show_progress(args))
            bar.advance(0)
            new, last = 0, None
            for i, (part, key) in enumerate(zip(parts, keys, strict=True)):
                body = AppendRequest(
                    messages=part,
                    system=(imported.system or None) if i == 0 else None,
                    context_window=args.context_window if i == 0 else None,
                    model=model if i == 0 else None,
                )
                try:
                    outcome = append_messages(
                        res, tenant, args.session, body, idempotency_key=key, activity=None, enqueue=enqueue
                    )
                except (BrokenConversation, CompactionError, IdempotencyMismatch) as exc:
                    bar.close()
                    recorder.flush()
                    first = i * args.chunk
                    raise SystemExit(
                        f"{command}: messages {first}-{first + len(part) - 1} refused: {exc}"
                        " (the chunks before were stored; a re-run continues from there)"
                    ) from None
                if not outcome.appended.replayed:
                    new += outcome.turns
                    record_append(recorder, outcome.turns, outcome.redactions)
                last = outcome.appended
                bar.advance(len(part))
            bar.close()
            recorder.flush()
    print(
        f"{args.file.name}: {imported.format}, {len(imported.messages)} messages into session "
        f"{args.session!r} of tenant {tenant_name!r}: {new} new turns"
        f"{'' if new else ' (already imported)'}, version {last.version if last else 0}"
        + (f", a {last.context_window:,}-token window" if last and last.context_window else ""),
        file=sys.stderr,
    )
    return 0


def run_export(args: argparse.Namespace) -> int:
    import orjson

    from worker.flows.serve import fetch
    from worker.store.sessions import get_session

    command = "compactd export"
    with _store(command) as res:
        tenant, tenant_name = _tenant_id(res, args.tenant, command)
        row = get_session(res.engine, tenant, args.session)
        if row is None:
            raise SystemExit(f"{command}: no session {args.session!r} for tenant {tenant_name!r}")
        if args.what == "prompt":
            served = fetch(res.engine, res.cache, tenant, args.session, res.policy_for)
            if served is None:
                raise SystemExit(f"{command}: no session {args.session!r} for tenant {tenant_name!r}")
            body = orjson.loads(served.body)
            out = {"system": body["system"], "messages": body["messages"]}
        else:
            bar = Progress(f"export {args.session}", row.version, enabled=show_progress(args))
            out = {"system": row.system, "messages": list(archive_messages(res.engine, row.id, bar))}
            bar.close()
    if args.out_format == "text":
        from api.cli.readable import render_turns

        payload = ("\n\n".join(render_turns(out["system"], out["messages"])) + "\n").encode()
    else:
        payload = orjson.dumps(out) + b"\n"
    if args.output:
        args.output.write_bytes(payload)
    else:
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    return 0


def archive_messages(engine: Any, session_pk: int, bar: Progress) -> Iterator[dict[str, Any]]:
    """Every stored turn as an Anthropic message, in seq order, read a page at a time."""
    import orjson

    from worker.store.turns import turns_page

    after = 0
    while True:
        rows = turns_page(engine, session_pk, after, PAGE_TURNS)
        if not rows:
            return
        for r in rows:
            yield {"role": r.role, "content": orjson.loads(r.content)}
        bar.advance(len(rows))
        after = rows[-1].seq
