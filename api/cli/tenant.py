"""`compactd tenant ...`: create tenants, and reset, rotate, revoke and list their API keys."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from api.cli.embedded_redis import with_redis
from worker.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `tenant` and its subcommands to the CLI's subparsers."""
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
        help="hold a provider key for a tenant (read from stdin, stored sealed; the drop-in endpoints use it)",
    )
    pk.add_argument("name", help="the tenant's name")
    pk.add_argument(
        "--provider",
        choices=("anthropic", "openai"),
        default="anthropic",
        help="anthropic: POST /v1/messages (the default); openai: /v1/responses and /v1/chat/completions",
    )
    pk.add_argument(
        "--clear",
        action="store_true",
        help="hold none (COMPACTD_UPSTREAM_API_KEY, or COMPACTD_OPENAI_UPSTREAM_API_KEY, applies again)",
    )
    pk.set_defaults(func=run_tenant_provider_key)
    up = tsub.add_parser(
        "upstream",
        help="send a tenant's drop-in calls to another upstream than the deployment's (an OpenAI-compatible"
        " server of its own, another gateway)",
    )
    up.add_argument("name", help="the tenant's name")
    up.add_argument(
        "--provider", choices=("anthropic", "openai"), default="openai", help="whose API (default openai)"
    )
    chosen = up.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--url", help="the base URL (OpenAI: as its SDK takes it, with /v1)")
    chosen.add_argument("--clear", action="store_true", help="the deployment's upstream again")
    up.set_defaults(func=run_tenant_upstream)


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
    from worker.keyfile import redaction_key
    from worker.proxy.provider_keys import valid_key
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
    kid = set_provider_key(engine, redaction_key(Settings()), tenant, key, args.provider)
    whose = f"{args.provider} provider key"
    print(f"{whose} {kid} held for {args.name}" if kid else f"no {whose} held for {args.name}")
    print("API processes use the change within 10 s", file=sys.stderr)
    return 0


@_tenant_command
def run_tenant_upstream(args: argparse.Namespace, engine: Engine) -> int:
    """Where the tenant's calls go (checked to be an http(s) URL); API processes see it within 10 s."""
    from urllib.parse import urlsplit

    from worker.settings import shown_url
    from worker.store.proxy import store_tenant_upstream
    from worker.store.tenants import TenantError, tenant_id_named

    tenant = tenant_id_named(engine, args.name)
    url = None if args.clear else str(args.url).rstrip("/")
    if url is not None and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname):
        raise TenantError("the upstream must be an http:// or https:// URL with a host")
    store_tenant_upstream(engine, tenant, args.provider, url)
    where = shown_url(url) if url else "the deployment's upstream"
    print(f"{args.provider} calls of {args.name} go to {where}")
    print("API processes use the change within 10 s", file=sys.stderr)
    return 0
