"""API keys: hashed in their own table, revoked at once on every API process, rotated with an overlap; the CLI's errors."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from api.http.app import create_app
from api.http.deps import KEY_CACHE_SECONDS
from tests.conftest import REPO
from tests.integration.conftest import (
    Worker,
    flush_prefix,
    free_port,
    make_settings,
    run_cli,
    settings_env,
    wait_for,
)
from worker.settings import Settings
from worker.store.db import make_engine, migrate
from worker.store.tables import utcnow
from worker.store.tenants import (
    create_tenant,
    grant_for_digest,
    hash_key,
    list_keys,
    revoke_keys,
    rotate_key,
    tenant_for_key,
)

pytestmark = pytest.mark.services


def test_keys_are_stored_hashed_and_listed_by_id_and_prefix_only(engine: Engine) -> None:
    """The keys table holds a sha256 and a public id and prefix; nothing in it is the key."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    tid, key = create_tenant(engine, name)
    with engine.connect() as conn:
        stored = str(conn.execute(text("SELECT * FROM api_keys")).all())
    assert key not in stored and hash_key(key) in stored
    (info,) = list_keys(engine, name)
    assert info.prefix == key[:12] and info.key_id == hash_key(key)[:12] and info.state(utcnow()) == "active"
    assert tenant_for_key(engine, key) == tid


def test_rotation_keeps_the_old_key_until_the_overlap_ends(engine: Engine) -> None:
    """After rotate with a 1 h overlap both keys work; past the hour only the new one does."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    tid, old = create_tenant(engine, name)
    now = utcnow()
    new = rotate_key(engine, name, timedelta(hours=1), now=now)
    for at in (now, now + timedelta(minutes=59)):
        assert grant_for_digest(engine, hash_key(old), at) is not None
    assert grant_for_digest(engine, hash_key(old), now + timedelta(hours=1, seconds=1)) is None
    grant = grant_for_digest(engine, hash_key(new), now + timedelta(days=30))
    assert grant is not None and grant.tenant_id == tid
    # a second rotation never lengthens the first one's overlap
    rotate_key(engine, name, timedelta(days=2), now=now)
    assert grant_for_digest(engine, hash_key(old), now + timedelta(hours=2)) is None


def test_revocation_by_id_or_prefix_refuses_only_that_key(engine: Engine) -> None:
    """Revoking one key (by id, or by prefix) leaves the tenant's other keys working."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    _, first = create_tenant(engine, name)
    second = rotate_key(engine, name, timedelta(days=1))
    third = rotate_key(engine, name, timedelta(days=1))
    assert revoke_keys(engine, name, key_id=hash_key(first)[:12]) == [hash_key(first)[:12]]
    assert revoke_keys(engine, name, prefix=second[:12]) == [hash_key(second)[:12]]
    assert tenant_for_key(engine, first) is None and tenant_for_key(engine, second) is None
    assert tenant_for_key(engine, third) is not None
    revoke_keys(engine, name)
    assert tenant_for_key(engine, third) is None


def test_migration_moves_existing_tenants_keys_into_the_keys_table(engine: Engine) -> None:
    """A database from before the keys table (tenants.api_key_hash only) keeps every key working after migrate()."""
    tid, key = create_tenant(engine, f"t-{uuid.uuid4().hex[:8]}")
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM api_keys"))
        conn.execute(text("UPDATE schema_version SET version = 6"))
    assert tenant_for_key(engine, key) is None
    migrate(engine)
    migrate(engine)  # idempotent
    assert tenant_for_key(engine, key) == tid
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM api_keys")).scalar() == 1


@pytest.fixture(scope="module")
def two_apis(
    tmp_path_factory: pytest.TempPathFactory, pg_schema_url: str, redis_url: str
) -> Iterator[tuple[Settings, list[str]]]:
    """Two real `compactd api` processes sharing one PostgreSQL schema and one Redis prefix."""
    tmp = tmp_path_factory.mktemp("apis")
    settings = make_settings(tmp, pg_schema_url, redis_url)
    ports = [free_port(), free_port()]
    apis = [Worker(settings.model_copy(update={"port": p}), "api", log=tmp / f"api{p}.log") for p in ports]
    try:
        for a in apis:
            # generous: under load a cold start takes a while; nothing is timed
            a.wait_ready("api.started", timeout=120)
        yield settings, [f"http://127.0.0.1:{p}" for p in ports]
    finally:
        for a in apis:
            a.stop()
        flush_prefix(redis_url, settings.redis_prefix)


def status(base: str, key: str) -> int:
    return httpx.get(f"{base}/v1/tools", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code


def test_a_revoked_key_is_refused_at_once_by_every_api_process(two_apis: tuple[Settings, list[str]]) -> None:
    """Two real `compactd api` processes with the key cached: after `compactd tenant revoke` the very next request on each is 401."""
    settings, bases = two_apis
    name = f"t-{uuid.uuid4().hex[:8]}"
    created = run_cli(settings, "tenant", "create", name)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    for base in bases:
        assert [status(base, key) for _ in range(3)] == [200] * 3  # cached after the first
    revoked = run_cli(settings, "tenant", "revoke", name, "--key-prefix", key[:12])
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stderr == ""  # Redis was told
    for base in bases:
        r = httpx.get(f"{base}/v1/tools", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 401, r.text
        assert r.headers["content-type"] == "application/problem+json" and key not in r.text
    listed = run_cli(settings, "tenant", "keys", name)
    assert "revoked" in listed.stdout and key[:12] in listed.stdout and key not in listed.stdout


def test_rotation_overlap_ends_on_running_api_processes(two_apis: tuple[Settings, list[str]]) -> None:
    """After `compactd tenant rotate --overlap 3s` both keys work on both processes, then the old
    one is refused (401) once the overlap ends, well before a cached grant would expire
    (KEY_CACHE_SECONDS), and the new one is not."""
    settings, bases = two_apis
    name = f"t-{uuid.uuid4().hex[:8]}"
    engine = make_engine(settings.database_url)
    _, old = create_tenant(engine, name)
    for base in bases:
        assert status(base, old) == 200  # cached by both processes
    rotated = run_cli(settings, "tenant", "rotate", name, "--overlap", "3s")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    for base in bases:
        assert status(base, new) == 200 and status(base, old) == 200
    for base in bases:
        wait_for(lambda b=base: status(b, old) == 401, KEY_CACHE_SECONDS / 2)  # type: ignore[misc]
        assert status(base, new) == 200
    engine.dispose()


def test_with_redis_down_keys_are_checked_in_the_database_on_every_request(
    tmp_path: Path, database_url: str
) -> None:
    """Fail closed: with no Redis to carry the revocation stamp, a key revoked in the database is refused on the next request."""
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    settings = make_settings(
        tmp_path, database_url, dead_redis, rate_limit_per_second=1.0, rate_limit_burst=1
    )
    with TestClient(create_app(settings, enqueue=lambda *a: None), raise_server_exceptions=False) as client:
        engine = client.app.state.resources.engine  # type: ignore[attr-defined]
        name = f"t-{uuid.uuid4().hex[:8]}"
        _, key = create_tenant(engine, name)
        auth = {"Authorization": f"Bearer {key}"}
        # rate limits fail open: far past the 1/s limit, nothing is refused
        assert all(client.get("/v1/tools", headers=auth).status_code == 200 for _ in range(5))
        revoke_keys(engine, name)
        assert client.get("/v1/tools", headers=auth).status_code == 401


def test_tenant_commands_fail_in_one_line(tmp_path: Path) -> None:
    """An existing name, an unknown tenant or key, a bad duration, an unreachable database: one line on stderr, exit 1 (2 for usage), no traceback."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", var_dir=tmp_path / "var")
    assert run_cli(settings, "tenant", "create", "acme").returncode == 0
    rotated = run_cli(settings, "tenant", "rotate", "acme", "--overlap", "1h")
    assert rotated.returncode == 0 and rotated.stdout.startswith("cpd_"), rotated.stderr
    assert run_cli(settings, "tenant", "keys", "acme").stdout.count("cpd_") == 2  # prefixes, one per key
    cases = [
        (("tenant", "create", "acme"), 1, "already exists"),
        (("tenant", "reset-key", "nobody"), 1, "no tenant named 'nobody'"),
        (("tenant", "rotate", "nobody"), 1, "no tenant named 'nobody'"),
        (("tenant", "revoke", "acme", "--key-id", "000000000000"), 1, "no unrevoked key"),
        (("tenant", "keys", "nobody"), 1, "no tenant named 'nobody'"),
        (("tenant", "provider-key", "nobody", "--clear"), 1, "no tenant named 'nobody'"),
        (("tenant", "rotate", "acme", "--overlap", "soon"), 2, "not a duration"),
    ]
    for args, code, words in cases:
        done = run_cli(settings, *args)
        assert done.returncode == code, (args, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2  # argparse adds its usage line
    down = settings.model_copy(update={"database_url": "postgresql://u:secretpw@127.0.0.1:1/x"})
    done = run_cli(down, "tenant", "keys", "acme")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "secretpw" not in done.stderr
    env = {**settings_env(settings), "COMPACTD_PORT": "x"}
    bad = subprocess.run(
        [sys.executable, "-m", "api.cli.command", "tenant", "keys", "acme"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "COMPACTD_PORT" in bad.stderr and "Traceback" not in bad.stderr
