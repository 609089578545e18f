"""Real services for integration tests: Redis and PostgreSQL on loopback, SQLite files, Celery worker processes."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, create_engine, text

from api.http.app import create_app
from tests.conftest import REPO, require

# re-exported: the private-server fixtures, and helpers the integration tests import from here
from tests.services import (  # noqa: F401
    PG_URL,
    answers,
    free_port,
    private_postgres,
    private_redis,
    private_schema,
    stop,
)
from worker.resources import Resources
from worker.settings import Settings
from worker.store.db import make_engine, migrate, normalize_url
from worker.store.tenants import create_tenant

REDIS_URL = os.environ.get("COMPACTD_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")


@pytest.fixture(autouse=True, scope="module")
def _collect_garbage() -> Iterator[None]:
    """A full collection after each module: an unclosed socket or file is reported (as an error,
    ResourceWarning) in the module that left it, not in whichever test the collector next runs
    in. Per module, not per test: a full collection per test made the planted corpus (thousands
    of quick tests over a large heap) several times slower."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def redis_url() -> str:
    require(answers("127.0.0.1", 6379), "Redis not answering on 127.0.0.1:6379 (run `make services`)")
    return REDIS_URL


@pytest.fixture(scope="session")
def pg_schema_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for this test run (dropped at the end), as a URL selecting it."""
    require(answers("127.0.0.1", 5432), "PostgreSQL not answering on 127.0.0.1:5432 (run `make services`)")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalize_url(PG_URL))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture
def pg_url(pg_schema_url: str) -> Iterator[str]:
    """A PostgreSQL URL selecting a schema of its own, dropped after the test."""
    with private_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs against SQLite and PostgreSQL (a fresh schema per test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'compactd.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`database_url` for a module's shared app: one SQLite file, or one PostgreSQL schema, per
    module and backend (the test ids are the same: [sqlite], [postgresql])."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'compactd.db'}"
        return
    request.getfixturevalue("pg_schema_url")  # PostgreSQL is answering (or skip/fail)
    with private_schema() as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    e = make_engine(database_url)
    migrate(e)
    yield e
    e.dispose()


@pytest.fixture
def tenant(engine: Engine) -> int:
    return create_tenant(engine, f"t-{uuid.uuid4().hex[:8]}")[0]


def make_settings(tmp_path: Path, database_url: str, redis_url: str, **overrides: Any) -> Settings:
    """Settings isolated per test: own DB, Redis key prefix, Celery queue and var dir."""
    tag = uuid.uuid4().hex[:10]
    values: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": redis_url,
        "var_dir": tmp_path / "var",
        "redis_prefix": f"test-{tag}:",
        "queue": f"test-{tag}",
        "redaction_key": "test-redaction-key",
        "idle_seconds": 0.3,
        "log_level": "INFO",
        **overrides,
    }
    return Settings(**values)


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment a subprocess needs to build the same Settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    for name, value in settings.model_dump().items():
        if value is not None and not isinstance(value, SecretStr):
            env[f"COMPACTD_{name.upper()}"] = str(value)
    env["PYTHONPATH"] = str(REPO)
    return env


def run_cli(settings: Settings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`compactd ARGS` as a subprocess configured like `settings`, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "api.cli.command", *args],
        env=settings_env(settings),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# `compactd ARGS` with the broker's visibility timeout replaced (Worker's `visibility`)
_VISIBILITY = (
    "import sys, worker.celery_app as c\n"
    "base = c.celery_config\n"
    "def short(s):\n"
    "    conf = base(s)\n"
    "    opts = dict(conf['broker_transport_options'], visibility_timeout={seconds},\n"
    "                unacked_restore_interval=1, unacked_restore_throttle=1)\n"
    "    return {{**conf, 'broker_transport_options': opts}}\n"
    "c.celery_config = short\n"
    "from api.cli.command import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


class Worker:
    """A real `compactd worker` (or api, beat) subprocess. `visibility`: the broker redelivers a
    message left unacked that many seconds (the shipped config keeps it longer than any task plus
    a minute), for tests of redelivery that would otherwise wait that minute out."""

    def __init__(
        self,
        settings: Settings,
        *args: str,
        log: Path,
        env: dict[str, str] | None = None,
        visibility: int | None = None,
    ) -> None:
        self.log = log
        self.out = log.open("wb")
        start = (
            ["-m", "api.cli.command"]
            if visibility is None
            else ["-c", _VISIBILITY.format(seconds=visibility)]
        )
        self.proc = subprocess.Popen(
            [sys.executable, *start, *args],
            env=settings_env(settings) | (env or {}),
            cwd=REPO,
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, marker: str = "ready", timeout: float = 120) -> None:
        """Waits for `marker` in the log: generous (a start on a loaded 2-core machine), never a speed check."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                self.stop()
                raise AssertionError(f"process exited: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"not ready in {timeout}s: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop(self.proc, timeout=20)
        self.out.close()


def flush_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class AppClient:
    """The HTTP API in this process (a TestClient over `create_app`) with two tenants: the test's
    (`tenant`, `key`; `auth` is its header) and another (`other_key`). Compactions the API
    schedules are recorded in `enqueued` (unless the app was opened with the real Celery enqueue)."""

    client: TestClient
    res: Resources
    settings: Settings
    tenant: int
    key: str
    other_key: str
    enqueued: list[tuple[Any, ...]] = field(default_factory=list)
    recorder: Any = None  # where the app records scheduled compactions (open_app's default)

    @property
    def app(self) -> FastAPI:
        return self.client.app  # type: ignore[return-value]

    @property
    def auth(self) -> dict[str, str]:
        return bearer(self.key)

    def request(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        """`path` as tenant `key` (the test's unless told); `headers=` adds to the auth header."""
        headers = {**bearer(key or self.key), **(kwargs.pop("headers", None) or {})}
        response: Any = self.client.request(method, path, headers=headers, **kwargs)
        return response

    def get(self, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, key, **kwargs)

    def post(self, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, key, **kwargs)

    def patch(self, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", path, key, **kwargs)

    def delete(self, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", path, key, **kwargs)

    def append(
        self,
        sid: str,
        *messages: dict[str, Any],
        key: str | None = None,
        headers: dict | None = None,
        **body: Any,
    ) -> httpx.Response:
        """POST /v1/sessions/{sid}/turns with these messages (and any other body fields)."""
        json = {"messages": list(messages), **body}
        return self.post(f"/v1/sessions/{sid}/turns", key, json=json, headers=headers)

    def appended(self, sid: str, *messages: dict[str, Any], key: str | None = None, **body: Any) -> Any:
        """`append`, asserting a 200; its JSON body."""
        r = self.append(sid, *messages, key=key, **body)
        assert r.status_code == 200, r.text
        return r.json()

    def fresh_tenants(self) -> AppClient:
        """The same app for another test: two new tenants and an empty `enqueued`. A module shares
        one app (its start, migrations and tenants cost more than most tests) when its tests keep
        apart by tenant and read nothing app-wide (metrics, whole tables)."""
        tenant, key = create_tenant(self.res.engine, f"a-{uuid.uuid4().hex[:8]}")
        other = create_tenant(self.res.engine, f"b-{uuid.uuid4().hex[:8]}")[1]
        enqueued: list[tuple[Any, ...]] = []
        if self.recorder is not None:
            self.recorder.into = enqueued
        return dataclasses.replace(self, tenant=tenant, key=key, other_key=other, enqueued=enqueued)

    def session_pk(self, sid: str, tenant: int | None = None) -> int:
        from worker.store.sessions import get_session

        return get_session(self.res.engine, tenant or self.tenant, sid).id

    def compact(self, sid: str) -> str:
        """Runs the session's compaction job here (the worker's own code, not through Celery)."""
        from worker.flows import compact as jobs
        from worker.store.sessions import get_session

        row = get_session(self.res.engine, self.tenant, sid)
        return jobs.compact(self.tenant, row.id, row.version, self.res)


def assert_problem(r: httpx.Response, status: int, *hidden: str) -> dict[str, Any]:
    """A problem+json answer of `status` with a title, no traceback, none of the `hidden` strings
    (something the request carried that an error body must never echo); its body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "Traceback" not in r.text and not [h for h in hidden if h in r.text], r.text
    body = r.json()
    assert body["status"] == status and body["title"], body
    return dict(body)


RECORD: Any = object()  # open_app's default enqueue: record each scheduled compaction


class _Recorder:
    def __init__(self) -> None:
        self.into: list[tuple[Any, ...]] = []

    def __call__(self, *job: Any) -> None:
        self.into.append(job)


@contextlib.contextmanager
def open_app(
    settings: Settings,
    *,
    enqueue: Any = RECORD,
    raise_server_exceptions: bool = False,
    app: Callable[[FastAPI], FastAPI] | None = None,
) -> Iterator[AppClient]:
    """The API in this process over `settings`, with tenants "a" (the test's) and "b"; its Redis
    keys and queue are flushed afterwards. `enqueue=None` sends compactions to Celery for real;
    `app` may change the app before it starts."""
    recorder = _Recorder() if enqueue is RECORD else None
    chosen = recorder if enqueue is RECORD else enqueue
    built = create_app(settings, enqueue=chosen)
    try:
        with TestClient(app(built) if app else built, raise_server_exceptions=raise_server_exceptions) as tc:
            res: Resources = built.state.resources
            tenant, key = create_tenant(res.engine, "a")
            other = create_tenant(res.engine, "b")[1]
            yield AppClient(
                tc, res, settings, tenant, key, other, recorder.into if recorder else [], recorder
            )
    finally:
        with contextlib.suppress(redis.ConnectionError):  # a test may point the app at no Redis
            flush_prefix(settings.redis_url or "", settings.redis_prefix)
            flush_prefix(settings.redis_url or "", settings.queue)


@pytest.fixture(scope="module")
def module_app(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    module_database_url: str,
    redis_url: str,
) -> Iterator[AppClient]:
    """One in-process app per backend for a whole module (an app start is ~1 s of migrations);
    tests keep apart with `api`'s fresh tenants. Jobs are recorded, not sent to Celery."""
    tmp = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with open_app(make_settings(tmp, module_database_url, redis_url)) as client:
        yield client


@pytest.fixture
def api(module_app: AppClient) -> AppClient:
    """The module's app with tenants of this test's own (module_app)."""
    return module_app.fresh_tenants()


@dataclass(frozen=True)
class Service:
    """A running compactd: `compactd api` and `compactd worker` processes on loopback."""

    url: str
    key: str  # the default tenant's key (COMPACTD_DEFAULT_API_KEY)
    settings: Settings
    api_log: Path
    worker_log: Path

    @property
    def auth(self) -> dict[str, str]:
        return bearer(self.key)

    def http(self, key: str | None = None, timeout: float = 30) -> httpx.Client:
        """An HTTP client on the API with tenant `key` (the default tenant's unless told); close it."""
        return httpx.Client(base_url=self.url, headers=bearer(key or self.key), timeout=timeout)


@contextlib.contextmanager
def running_service(
    tmp: Path, database_url: str, redis_url: str, *, env: dict[str, str] | None = None, **overrides: Any
) -> Iterator[Service]:
    """`compactd api` and `compactd worker --concurrency=1` over `database_url` with a default key,
    started together and stopped (their Redis keys and queue flushed) at the end. A start is a few
    seconds of imports and rule loading per process: share one per module or session where the
    tests can keep apart by session id."""
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    settings = make_settings(tmp, database_url, redis_url, port=port, default_api_key=key, **overrides)
    api = Worker(settings, "api", log=tmp / "api.log", env=env)
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp / "worker.log", env=env)
    try:
        api.wait_ready("api.started")
        worker.wait_ready()
        yield Service(f"http://127.0.0.1:{port}", key, settings, tmp / "api.log", tmp / "worker.log")
    finally:
        api.stop()
        worker.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """One running compactd (API + worker, SQLite) for the whole run, for tests that keep apart by
    session id: a small offload threshold (a short tool output becomes a virtual file) and no
    debounce before a compaction (a /compact runs at once)."""
    tmp = tmp_path_factory.mktemp("compactd")
    with running_service(
        tmp,
        f"sqlite:///{tmp / 'compactd.db'}",
        redis_url,
        offload_tokens=300,
        preview_tokens=50,
        idle_seconds=0.0,
    ) as running:
        yield running
