"""The `compactd` command: up (everything on one machine), api, worker, beat, prune, flower, tenant, and offline tools."""

from __future__ import annotations

import argparse
import sys
import warnings

from api import offline, stats_cli, transfer
from worker.settings import Settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand, every option with its help text."""
    parser = argparse.ArgumentParser(prog="compactd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
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
    w.set_defaults(func=run_worker)
    sub.add_parser(
        "prewarm", help="compile Kingfisher's secret rules into COMPACTD_RULE_CACHE_DIR (install/start-up)"
    ).set_defaults(func=run_prewarm)
    sub.add_parser("beat", help="run Celery beat (exactly one per deployment)").set_defaults(func=run_beat)
    p = sub.add_parser(
        "prune", help="prune every session's working memory once, now (what beat does nightly)"
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be removed or merged, and why")
    p.set_defaults(func=run_prune)
    f = sub.add_parser("flower", help="run Flower, the Celery monitor")
    f.add_argument("--port", type=int, default=5555, help="port Flower listens on (default 5555)")
    f.add_argument("--address", default="127.0.0.1", help="address Flower listens on (default 127.0.0.1)")
    f.set_defaults(func=run_flower)
    _tenant_commands(sub)
    offline.register(sub)
    stats_cli.register(sub)
    transfer.register(sub)
    return parser


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


def _tenant_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    t = sub.add_parser("tenant", help="manage tenants and their API keys")
    tsub = t.add_subparsers(dest="tenant_command", required=True)
    tc = tsub.add_parser("create", help="create a tenant and print its new API key")
    tc.add_argument("name", help="the tenant's name")
    tc.set_defaults(func=run_tenant_create)
    tr = tsub.add_parser("reset-key", help="print a new API key for a tenant (the old one stops working)")
    tr.add_argument("name", help="the tenant's name")
    tr.set_defaults(func=run_tenant_reset)


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with --host/--port taking precedence."""
    given = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name) is not None}
    return Settings(**given)


def run_up(args: argparse.Namespace) -> int:
    from api.up import up

    return up(_settings(args))


def run_api(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from api.up import listen
    from worker.resources import Resources
    from worker.store.tenants import ensure_tenant

    settings = _settings(args)
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
    server.run(sockets=[sock])
    return 0 if server.started else 3


def _celery(settings: Settings):  # type: ignore[no-untyped-def]
    from worker.celery_app import app, configure

    configure(settings)
    return app


def run_worker(args: argparse.Namespace) -> int:
    settings = Settings()
    from worker.resources import Resources

    res = Resources.build(settings)  # migrate once, before the pool forks
    _ = res.summarizer  # a misconfigured summarizer fails here, not in the first task
    res.close()
    app = _celery(settings)
    _shorten_superuser_warning()
    concurrency = args.concurrency or settings.worker_concurrency
    app.worker_main(
        [
            "worker",
            "-Q",
            settings.queue,
            f"--concurrency={concurrency}",
            f"--pool={args.pool}",
            f"--loglevel={settings.log_level}",
            "--without-gossip",
            "--without-mingle",
        ]
    )
    return 0


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
        ["beat", f"--schedule={settings.var_dir / 'celerybeat-schedule'}", f"--loglevel={settings.log_level}"]
    )
    return 0


def _with_redis(settings: Settings, command: str) -> Settings:
    """Settings with a Redis to use: COMPACTD_REDIS_URL, else the embedded one of a running
    `compactd up` (its socket in COMPACTD_VAR_DIR); else a one-line error, not a traceback."""
    if settings.redis_url:
        return settings
    sock = settings.var_dir / "redis.sock"
    if sock.exists():
        return settings.model_copy(update={"redis_url": f"unix://{sock.resolve()}"})
    raise SystemExit(
        f"{command}: needs Redis: set COMPACTD_REDIS_URL, or run it beside a running `compactd up` "
        f"(it uses {sock})"
    )


def run_prune(args: argparse.Namespace) -> int:
    from api.app import celery_enqueue
    from worker import jobs
    from worker.memory.prune import describe
    from worker.resources import Resources
    from worker.store import memory

    settings = _with_redis(Settings(), "compactd prune")
    res = Resources.build(settings)
    try:
        if not args.dry_run:
            report = jobs.prune_now(res, enqueue=celery_enqueue(settings, res))
            print(" ".join(f"{k}={v}" for k, v in report.items()))
            return 0
        plans = jobs.prune_plans(res)
        for planned in plans:
            print(f"session {planned.client_id} (tenant {planned.tenant_id}, pk {planned.session_pk}):")
            for step in planned.steps:
                print(f"  {describe(step)}")
        gone = memory.orphaned_sessions(res.engine)
        if gone:
            print(
                f"memory of {len(gone)} deleted or expired sessions would go (pks {', '.join(map(str, gone))})"
            )
        if not plans and not gone:
            print("nothing to prune")
        return 0
    finally:
        res.close()


def run_flower(args: argparse.Namespace) -> int:
    app = _celery(Settings())
    app.start(["flower", f"--port={args.port}", f"--address={args.address}"])
    return 0


def run_tenant_create(args: argparse.Namespace) -> int:
    from worker.store.db import make_engine, migrate
    from worker.store.tenants import create_tenant

    engine = make_engine(Settings().database_url)
    migrate(engine)
    _, key = create_tenant(engine, args.name)
    print(key)
    return 0


def run_tenant_reset(args: argparse.Namespace) -> int:
    from worker.store.db import make_engine, migrate
    from worker.store.tenants import reset_key

    engine = make_engine(Settings().database_url)
    migrate(engine)
    key = reset_key(engine, args.name)
    if key is None:
        print(f"compactd: no tenant named {args.name!r}", file=sys.stderr)
        return 1
    print(key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
