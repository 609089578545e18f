"""The `compactd` command: up (everything on one machine), api, worker, beat, prune, flower, tenant, and offline tools."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from api.cli import offline, stats, transfer
from api.cli.embedded_redis import with_redis
from worker.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValidationError as exc:
        # a bad COMPACTD_* variable: name it, in one line each, without the value it had
        for error in exc.errors():
            field = ".".join(str(p) for p in error.get("loc", ())) or "settings"
            print(f"compactd: COMPACTD_{field.upper()}: {error.get('msg', 'invalid')}", file=sys.stderr)
        return 2


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
    w.add_argument("--quiet", action="store_true", help="no start-up banner (compactd up passes it)")
    w.add_argument("--ready-file", type=Path, default=None, help="touch this file once the worker is ready")
    w.set_defaults(func=run_worker)
    sub.add_parser(
        "prewarm", help="compile Kingfisher's secret rules into COMPACTD_RULE_CACHE_DIR (install/start-up)"
    ).set_defaults(func=run_prewarm)
    b = sub.add_parser("beat", help="run Celery beat (exactly one per deployment)")
    b.add_argument("--quiet", action="store_true", help="no start-up banner (compactd up passes it)")
    b.set_defaults(func=run_beat)
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
    stats.register(sub)
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
    tr = tsub.add_parser(
        "reset-key", help="print a new API key for a tenant (its other keys stop working now)"
    )
    tr.add_argument("name", help="the tenant's name")
    tr.set_defaults(func=run_tenant_reset)
    ro = tsub.add_parser(
        "rotate", help="print a new API key; the tenant's other keys keep working for --overlap, then stop"
    )
    ro.add_argument("name", help="the tenant's name")
    ro.add_argument(
        "--overlap",
        type=_duration,
        default=timedelta(hours=1),
        help="how long the old keys keep working: 90s, 30m, 1h, 2d or 0 (default 1h)",
    )
    ro.set_defaults(func=run_tenant_rotate)
    rv = tsub.add_parser(
        "revoke", help="refuse a tenant's key at once on every API process (every key without an option)"
    )
    rv.add_argument("name", help="the tenant's name")
    which = rv.add_mutually_exclusive_group()
    which.add_argument("--key-id", help="the key's id, as `compactd tenant keys` lists it")
    which.add_argument(
        "--key-prefix", help="the key's first 12 characters, as `compactd tenant keys` lists them"
    )
    rv.set_defaults(func=run_tenant_revoke)
    tk = tsub.add_parser("keys", help="list a tenant's keys: ids, prefixes, state and dates (never the keys)")
    tk.add_argument("name", help="the tenant's name")
    tk.set_defaults(func=run_tenant_keys)
    pk = tsub.add_parser(
        "provider-key",
        help="hold a provider key for a tenant (read from stdin, stored sealed; POST /v1/messages uses it)",
    )
    pk.add_argument("name", help="the tenant's name")
    pk.add_argument(
        "--clear", action="store_true", help="hold none (COMPACTD_UPSTREAM_API_KEY applies again)"
    )
    pk.set_defaults(func=run_tenant_provider_key)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(value: str) -> timedelta:
    """`90s`, `30m`, `1h`, `2d`, or a bare number of seconds."""
    text = value.strip().lower()
    unit = _UNITS.get(text[-1:], 0)
    number = text[:-1] if unit else text
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration such as 90s, 30m, 1h or 2d") from None
    if not seconds >= 0 or seconds > 366 * 86400:
        raise argparse.ArgumentTypeError(f"{value!r} must be between 0 and 366 days")
    return timedelta(seconds=seconds)


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment, with --host/--port taking precedence."""
    given = {name: getattr(args, name) for name in ("host", "port") if getattr(args, name) is not None}
    return Settings(**given)


def run_up(args: argparse.Namespace) -> int:
    from api.cli.up import up

    return up(_settings(args))


def run_api(args: argparse.Namespace) -> int:
    import uvicorn

    from api.cli.up import listen
    from api.http.app import create_app
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
    if args.ready_file is not None:
        _touch_when_ready(args.ready_file)
    app.worker_main(
        [
            *(["--quiet"] if args.quiet else []),
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


def run_prune(args: argparse.Namespace) -> int:
    from worker.enqueue import CeleryEnqueue
    from worker.flows import prune as pruning
    from worker.memory.prune import describe
    from worker.resources import Resources
    from worker.store import memory

    settings = with_redis(Settings(), "compactd prune")
    res = Resources.build(settings)
    try:
        if not args.dry_run:
            with CeleryEnqueue(settings, res) as enqueue:
                report = pruning.prune_now(res, enqueue=enqueue)
            print(" ".join(f"{k}={v}" for k, v in report.items()))
            return 0
        plans = pruning.prune_plans(res)
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


def _tenant_command(run: Callable[[argparse.Namespace, Engine], int]) -> Callable[[argparse.Namespace], int]:
    """A tenant command with its errors as one line on stderr and exit code 1, never a traceback."""

    def command(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import SQLAlchemyError

        from worker.resources import engine_for
        from worker.store.db import migrate
        from worker.store.tenants import TenantError

        name = f"compactd tenant {args.tenant_command}"
        engine = None
        try:
            engine = engine_for(Settings())
            migrate(engine)
            return run(args, engine)
        except TenantError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
        except SQLAlchemyError as exc:
            # never the URL itself: it may carry the database password
            print(
                f"{name}: the database (COMPACTD_DATABASE_URL) failed: {type(exc).__name__}", file=sys.stderr
            )
        finally:
            if engine is not None:
                engine.dispose()
        return 1

    return command


def _keys_changed(command: str) -> None:
    """Tell every API process that keys changed (their caches re-read the database on the next request).

    Without a Redis to tell, the change is still in the database; processes that could not see it
    either re-read on every request (their Redis is down) or serve from a cache no older than
    deps.KEY_CACHE_SECONDS.
    """
    import redis

    from api.http.deps import KEY_CACHE_SECONDS
    from api.http.guard import bump_stamp

    settings = Settings()
    try:
        settings = with_redis(settings, command)
        client = redis.Redis.from_url(settings.redis_url or "", socket_timeout=2, socket_connect_timeout=2)
        bump_stamp(client, settings.redis_prefix)
        client.close()
    except SystemExit:
        _unannounced(command, "there is no Redis to tell (set COMPACTD_REDIS_URL)", KEY_CACHE_SECONDS)
    except redis.RedisError as exc:
        _unannounced(command, f"Redis did not answer ({type(exc).__name__})", KEY_CACHE_SECONDS)


def _unannounced(command: str, why: str, seconds: float) -> None:
    print(
        f"{command}: done in the database, but {why}: API processes may accept the old key "
        f"for up to {seconds:.0f} s",
        file=sys.stderr,
    )


@_tenant_command
def run_tenant_create(args: argparse.Namespace, engine: Engine) -> int:
    from worker.store.tenants import create_tenant

    print(create_tenant(engine, args.name)[1])
    return 0


@_tenant_command
def run_tenant_reset(args: argparse.Namespace, engine: Engine) -> int:
    from worker.store.tenants import NoSuchTenant, reset_key

    key = reset_key(engine, args.name)
    if key is None:
        raise NoSuchTenant(f"no tenant named {args.name!r}")
    _keys_changed("compactd tenant reset-key")
    print(key)
    return 0


@_tenant_command
def run_tenant_rotate(args: argparse.Namespace, engine: Engine) -> int:
    from worker.store.tenants import rotate_key

    key = rotate_key(engine, args.name, args.overlap)
    _keys_changed("compactd tenant rotate")
    print(key)
    print(f"the tenant's other keys keep working for {args.overlap}, then stop", file=sys.stderr)
    return 0


@_tenant_command
def run_tenant_revoke(args: argparse.Namespace, engine: Engine) -> int:
    from worker.store.tenants import revoke_keys

    ids = revoke_keys(engine, args.name, key_id=args.key_id, prefix=args.key_prefix)
    _keys_changed("compactd tenant revoke")
    print(f"revoked {len(ids)} key(s)" + (f": {', '.join(ids)}" if ids else ""))
    return 0


@_tenant_command
def run_tenant_keys(args: argparse.Namespace, engine: Engine) -> int:
    from worker.store.tables import utcnow
    from worker.store.tenants import list_keys

    now = utcnow()
    print(f"{'id':<14}{'prefix':<14}{'state':<10}{'created (UTC)':<21}until (UTC)")
    for k in list_keys(engine, args.name):
        until = k.revoked_at or k.expires_at
        shown = until.isoformat(" ", "seconds") if until else "-"
        print(
            f"{k.key_id:<14}{k.prefix or '-':<14}{k.state(now):<10}"
            f"{k.created_at.isoformat(' ', 'seconds'):<21}{shown}"
        )
    return 0


@_tenant_command
def run_tenant_provider_key(args: argparse.Namespace, engine: Engine) -> int:
    """The key comes on stdin (never argv: the process list shows arguments); only its id is printed."""
    from worker.flows.proxy import set_provider_key
    from worker.proxy.provider_keys import valid_key
    from worker.resources import redaction_key
    from worker.store.tenants import TenantError, tenant_id_named

    tenant = tenant_id_named(engine, args.name)
    key = None
    if not args.clear:
        if sys.stdin.isatty():
            import getpass

            key = getpass.getpass("provider key: ").strip()
        else:
            key = sys.stdin.readline().strip()
        if not valid_key(key):
            raise TenantError("the provider key on stdin must be 1-500 printable characters, no spaces")
    kid = set_provider_key(engine, redaction_key(Settings()), tenant, key)
    print(f"provider key {kid} held for {args.name}" if kid else f"no provider key held for {args.name}")
    print("API processes use the change within 10 s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
