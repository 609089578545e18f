"""The `compactd` command: up (everything on one machine), api, worker, beat, prune, flower, tenant, and offline tools."""

from __future__ import annotations

import argparse
import sys

from api import offline
from worker.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compactd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "up", help="run API, worker and beat with embedded defaults (SQLite, embedded Redis)"
    ).set_defaults(func=run_up)
    sub.add_parser("api", help="run the HTTP API (uvicorn, uvloop, httptools)").set_defaults(func=run_api)
    w = sub.add_parser("worker", help="run a Celery worker")
    w.add_argument("--concurrency", type=int, default=None)
    w.add_argument("--pool", default="prefork")
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
    f.add_argument("--port", type=int, default=5555)
    f.add_argument("--address", default="127.0.0.1")
    f.set_defaults(func=run_flower)
    t = sub.add_parser("tenant", help="manage tenants and their API keys")
    tsub = t.add_subparsers(dest="tenant_command", required=True)
    tc = tsub.add_parser("create", help="create a tenant and print its new API key")
    tc.add_argument("name")
    tc.set_defaults(func=run_tenant_create)
    tr = tsub.add_parser("reset-key", help="print a new API key for a tenant (the old one stops working)")
    tr.add_argument("name")
    tr.set_defaults(func=run_tenant_reset)
    offline.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def run_up(args: argparse.Namespace) -> int:
    from api.up import up

    return up(Settings())


def run_api(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from worker.resources import Resources
    from worker.store.tenants import ensure_tenant

    settings = Settings()
    if settings.default_api_key:
        res = Resources.build(settings)
        ensure_tenant(res.engine, settings.default_tenant, settings.default_api_key)
        res.close()
    uvicorn.run(
        create_app(settings, log_setup=True),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return 0


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


def run_prune(args: argparse.Namespace) -> int:
    from api.app import celery_enqueue
    from worker import jobs
    from worker.memory.prune import describe
    from worker.resources import Resources
    from worker.store import memory

    settings = Settings()
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
