"""The service's processes: `compactd up` (everything on one machine), `api`, `worker`, `beat`,
`flower`, and `prewarm` (compile the secret rules before the first start)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import warnings
from pathlib import Path

from worker.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the process subcommands to the CLI's subparsers."""
    up = sub.add_parser("up", help="run API, worker and beat with embedded defaults (SQLite, embedded Redis)")
    _listen_options(up)
    up.set_defaults(func=run_up)
    api = sub.add_parser("api", help="run the HTTP API (uvicorn, uvloop, httptools)")
    _listen_options(api)
    api.set_defaults(func=run_api)
    w = sub.add_parser("worker", help="run a Celery worker")
    w.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="worker processes (default: COMPACTD_WORKER_CONCURRENCY)",
    )
    w.add_argument(
        "--pool", default="prefork", help="Celery pool: prefork, solo or threads (default prefork)"
    )
    w.add_argument("--quiet", action="store_true", help="no start-up banner (compactd up passes it)")
    w.add_argument("--ready-file", type=Path, default=None, help="touch this file once the worker is ready")
    w.set_defaults(func=run_worker)
    sub.add_parser(
        "prewarm", help="compile Kingfisher's secret rules into COMPACTD_RULE_CACHE_DIR (install/start-up)"
    ).set_defaults(func=run_prewarm)
    b = sub.add_parser("beat", help="run Celery beat (exactly one per deployment)")
    b.add_argument("--quiet", action="store_true", help="no start-up banner (compactd up passes it)")
    b.set_defaults(func=run_beat)
    f = sub.add_parser("flower", help="run Flower, the Celery monitor")
    f.add_argument("--port", type=int, default=5555, help="port Flower listens on (default 5555)")
    f.add_argument("--address", default="127.0.0.1", help="address Flower listens on (default 127.0.0.1)")
    f.set_defaults(func=run_flower)


def _listen_options(p: argparse.ArgumentParser) -> None:
    defaults = Settings.model_fields
    p.add_argument(
        "--host",
        help=f"address the API listens on (default: COMPACTD_HOST, else {defaults['host'].default})",
    )
    p.add_argument(
        "--port",
        type=_port,
        help=f"port the API listens on (default: COMPACTD_PORT, else {defaults['port'].default})",
    )


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (1-65535)")
    return int(value)


def settings_of(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with --host/--port taking precedence."""
    given = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name) is not None}
    return Settings(**given)


def run_up(args: argparse.Namespace) -> int:
    from api.cli.up import up

    return up(settings_of(args))


def run_api(args: argparse.Namespace) -> int:
    import uvicorn

    from api.cli.up import listen
    from api.http.app import create_app
    from worker.resources import Resources
    from worker.store.tenants import ensure_tenant

    settings = settings_of(args)
    # bound before anything else starts: a busy port fails fast, in one line
    sock = listen(settings.host, settings.port)
    if settings.default_api_key:
        res = Resources.build(settings)
        ensure_tenant(res.engine, settings.default_tenant, settings.default_api_key)
        res.close()
    config = uvicorn.Config(
        create_app(settings, log_setup=True),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    # uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again for its caller: here it
    # ends the process quietly (Ctrl-C reaches every process of the terminal's group, `compactd
    # up`'s API child included, and `up` sends SIGTERM after it), not with a traceback or a kill
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, _stopped)
    with contextlib.suppress(KeyboardInterrupt, _Stopped):
        server.run(sockets=[sock])
    # stopped: a later signal (`up` may send SIGTERM after Ctrl-C) must not cut the interpreter's exit
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)
    return 0 if server.started else 3


class _Stopped(Exception):
    """Raised by the API's signal handlers once uvicorn has shut down."""


def _stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def _celery(settings: Settings):  # type: ignore[no-untyped-def]
    from worker.celery_app import app, configure

    configure(settings)
    return app


def run_worker(args: argparse.Namespace) -> int:
    settings = Settings()
    from worker.resources import Resources

    concurrency = args.concurrency or settings.worker_concurrency
    # migrate once, before the pool forks; the rule catalog too when several pool processes share it
    res = Resources.build(settings, warm_rules=concurrency > 1)
    _ = res.summarizer  # a misconfigured summarizer fails here, not in the first task
    res.close()
    app = _celery(settings)
    _shorten_superuser_warning()
    if args.ready_file is not None:
        _touch_when_ready(args.ready_file)
    from worker.celery_app import start_worker

    return start_worker(
        app,
        queue=settings.queue,
        concurrency=concurrency,
        pool=args.pool,
        loglevel=settings.log_level,
        quiet=args.quiet,
    )


def _touch_when_ready(path: Path) -> None:
    """Create `path` when Celery says the worker consumes (how `compactd up` knows it is ready)."""
    from celery.signals import worker_ready

    def touch(**_: object) -> None:
        path.touch()

    worker_ready.connect(touch, weak=False)


def _shorten_superuser_warning() -> None:
    """Show Celery's superuser SecurityWarning (root, or a sudo/wheel group) as one line."""
    from celery.exceptions import SecurityWarning

    show = warnings.showwarning

    # Celery prints an 8-line banner at every start, but running a worker with superuser privileges is
    # a real risk, in production and under `compactd up` alike: so it is shortened, not hidden. Only
    # this warning is: Celery's other security warnings, and its refusal to run as root with pickle
    # (we accept JSON only), are untouched; a -W error filter still turns it into an error.
    def shorten(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        text = str(message)
        if not (issubclass(category, SecurityWarning) and "superuser privileges" in text):
            return show(message, category, filename, lineno, file, line)
        user = text.strip().splitlines()[-1].removeprefix("User information: ")
        print(
            f"compactd worker: running with superuser privileges ({user}); "
            "run workers as an unprivileged user (the Docker image does)",
            file=file or sys.stderr,
        )

    warnings.showwarning = shorten


def run_prewarm(args: argparse.Namespace) -> int:
    from worker.redaction import kingfisher

    settings = Settings()
    print(f"kingfisher rule cache {settings.rule_cache_dir}: {kingfisher.prewarm(settings.rule_cache_dir)}")
    return 0


def run_beat(args: argparse.Namespace) -> int:
    settings = Settings()
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    app = _celery(settings)
    app.start(
        [
            *(["--quiet"] if args.quiet else []),
            "beat",
            f"--schedule={settings.var_dir / 'celerybeat-schedule'}",
            f"--loglevel={settings.log_level}",
        ]
    )
    return 0


def run_flower(args: argparse.Namespace) -> int:
    app = _celery(Settings())
    app.start(["flower", f"--port={args.port}", f"--address={args.address}"])
    return 0
