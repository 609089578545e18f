"""Scale-out: two hosts, each an API and a Celery worker in a network namespace of its own, share one
Redis and one PostgreSQL; sessions compact on both, one host is killed mid-run, nothing is lost and
no session is ever compacted by two hosts at once.

The hosts are `ip netns` namespaces joined by veth pairs to a bridge on the test's side (a private
/24 in 10.231.0.0/16). Private redis-server and PostgreSQL instances listen on the bridge address
only, so the shared 6379/5432 servers are untouched. Each host also has a UTS namespace of its own
(`unshare --uts`), so its hostname, and Celery's node name `celery@host-a`, say which host it is.

The audit is taken at the network: Redis MONITOR records every command with the address it came
from, so each per-session compaction lock (`SET {prefix}lock:<pk> <token> NX`, released by the
script call carrying the same token) is an interval with a host. A lock still held by the killed
host's token when it dies is its job cut off mid-run: that interval ends at the kill.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from sqlalchemy import text

from tests.conftest import REPO, require
from tests.integration.conftest import make_settings, settings_env, wait_for
from worker.settings import Settings
from worker.store.db import make_engine, migrate
from worker.store.tenants import create_tenant

pytestmark = pytest.mark.services

SESSIONS = 24
ROUNDS_BEFORE_KILL = 3
ROUNDS_AFTER_KILL = 2
LOCK_SECONDS = 10.0  # a killed host's lock must expire within the test; jobs here take well under it


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def _netns_usable() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "unshare", "redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return False, f"{tool} not installed"
    if _postgres_bin() is None:
        return False, "PostgreSQL server binaries (initdb, postgres) not installed"
    name = f"cpdprobe{uuid.uuid4().hex[:4]}"
    made = _run("ip", "netns", "add", name, check=False)
    if made.returncode != 0:
        return False, f"`ip netns add` refused: {made.stderr.strip()}"
    _run("ip", "netns", "del", name, check=False)
    return True, ""


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@dataclass
class Net:
    """A bridge on the test's side and one namespace per host, each with a veth into the bridge."""

    tag: str
    subnet: str  # "10.231.N"
    hosts: dict[str, str] = field(default_factory=dict)  # host name -> its address
    netns: dict[str, str] = field(default_factory=dict)  # host name -> namespace name

    @property
    def bridge(self) -> str:
        return f"cpd{self.tag}br"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def up(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def add_host(self, name: str, octet: int) -> str:
        ns, outside, inside = f"cpd{self.tag}-{name}", f"cpd{self.tag}{name}0", f"cpd{self.tag}{name}1"
        address = f"{self.subnet}.{octet}"
        _run("ip", "netns", "add", ns)
        self.netns[name], self.hosts[name] = ns, address
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", ns)
        _run("ip", "link", "set", outside, "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", inside)
        _run("ip", "-n", ns, "link", "set", inside, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        return address

    def remove_host(self, name: str) -> None:
        """Deleting the namespace takes its veth pair with it: the host is off the network."""
        ns = self.netns.pop(name, None)
        if ns:
            _run("ip", "netns", "del", ns, check=False)

    def down(self) -> None:
        for name in list(self.netns):
            self.remove_host(name)
        _run("ip", "link", "del", self.bridge, check=False)


@pytest.fixture
def net() -> Iterator[Net]:
    ok, why = _netns_usable()
    require(ok, why)
    tag = uuid.uuid4().hex[:4]
    n = Net(tag=tag, subnet=f"10.231.{int(tag, 16) % 250 + 2}")
    try:
        n.up()
        yield n
    finally:
        n.down()


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not answering on {host}:{port} within {timeout}s")


@pytest.fixture
def private_redis(net: Net, tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own, reachable from every namespace through the bridge."""
    port = _free_port(net.gateway)
    proc = subprocess.Popen(
        [
            *("redis-server", "--bind", net.gateway, "--port", str(port), "--save", ""),
            *("--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp_path)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(net.gateway, port, proc, "redis-server")
        yield f"redis://{net.gateway}:{port}/0"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def private_postgres(net: Net) -> Iterator[str]:
    """A PostgreSQL cluster of the test's own (initdb refuses root: it runs as `postgres`)."""
    bindir = _postgres_bin()
    assert bindir is not None
    data = Path(tempfile.mkdtemp(prefix="compactd-pg-"))
    shutil.chown(data, "postgres", "postgres")
    subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data / "db"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        user="postgres",
    )
    with (data / "db" / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {net.subnet}.0/24 trust\n")
    port = _free_port(net.gateway)
    proc = subprocess.Popen(
        [
            *(str(bindir / "postgres"), "-D", str(data / "db"), "-p", str(port)),
            *("-c", f"listen_addresses={net.gateway}", "-c", f"unix_socket_directories={data}"),
            *("-c", "fsync=off", "-c", "max_connections=200"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        user="postgres",  # the server itself, so SIGINT reaches it (runuser held it for 20 s)
    )
    try:
        _wait_port(net.gateway, port, proc, "postgres")
        url = f"postgresql://postgres@{net.gateway}:{port}/postgres"
        wait_for(lambda: _pg_answers(url), timeout=30)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def _pg_answers(url: str) -> bool:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


class Host:
    """The processes of one host: each runs inside its namespace under its own hostname."""

    def __init__(self, net: Net, name: str, settings: Settings, logs: Path) -> None:
        self.net, self.name, self.settings, self.logs = net, name, settings, logs
        self.address = net.hosts[name]
        self.api_port = 8700
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.outs: list[Any] = []

    def start(self, role: str, *args: str) -> None:
        log = (self.logs / f"{self.name}-{role}.log").open("wb")
        self.outs.append(log)
        inner = " ".join(
            [f"hostname host-{self.name} &&", "exec", sys.executable, "-m", "api.cli.command", *args]
        )
        self.procs[role] = subprocess.Popen(
            ["ip", "netns", "exec", self.net.netns[self.name], "unshare", "--uts", "sh", "-c", inner],
            env=settings_env(self.settings),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill reaches the pool children too
        )

    def log(self, role: str) -> str:
        return (self.logs / f"{self.name}-{role}.log").read_text(errors="replace")

    def wait_log(self, role: str, marker: str, timeout: float = 60) -> None:
        def seen() -> bool:
            if self.procs[role].poll() is not None:
                raise AssertionError(f"host {self.name} {role} exited: {self.log(role)[-2000:]}")
            return marker in self.log(role)

        wait_for(seen, timeout=timeout, interval=0.2)

    @property
    def base_url(self) -> str:
        return f"http://{self.address}:{self.api_port}"

    def signal(self, role: str, sig: signal.Signals) -> None:
        os.killpg(self.procs[role].pid, sig)

    def signal_all(self, sig: int) -> None:
        """sig to every process of the host (API, worker and its pool children, beat)."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    def kill(self) -> None:
        """kill -9 every process of the host (API, worker and its pool children, beat)."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for out in self.outs:
            out.close()


@dataclass(frozen=True)
class Command:
    at: float  # Redis server time
    address: str
    words: tuple[str, ...]


class Monitor:
    """Every command the private Redis runs, with the address it came from (`redis-cli MONITOR`)."""

    LINE = re.compile(r"^(\d+\.\d+) \[\d+ ([^\]]+):\d+\] (.*)$")

    def __init__(self, url: str, out: Path) -> None:
        u = urlsplit(url)
        self.out = out
        self._file = out.open("wb")
        self._proc = subprocess.Popen(
            ["redis-cli", "-h", str(u.hostname), "-p", str(u.port), "monitor"], stdout=self._file
        )

    @property
    def commands(self) -> list[Command]:
        found = []
        for line in self.out.read_text(errors="replace").splitlines():
            if (m := self.LINE.match(line)) and m.group(2) != "lua":
                words = tuple(w.strip('"') for w in m.group(3).split(" "))
                found.append(Command(float(m.group(1)), m.group(2), words))
        return found

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait()
        self._file.close()


@dataclass(frozen=True)
class Hold:
    """One compaction lock held by one host: from its SET NX to its release (or the host's death)."""

    session_pk: int
    host: str
    start: float
    end: float
    token: str


def lock_holds(
    commands: list[Command], prefix: str, hosts: dict[str, str], cut: dict[str, float]
) -> list[Hold]:
    """Lock intervals per session and host. A token SET but never released counts only when it was
    still the lock's value after its host was killed (`cut`: token -> kill time): the job died with
    it. Other unreleased SETs were refused (NX) and held nothing."""
    by_address = {address: name for name, address in hosts.items()}
    lock_key = re.compile(re.escape(prefix) + r"lock:(\d+)$")
    started: dict[str, tuple[int, str, float]] = {}
    released: dict[str, float] = {}
    holds: list[Hold] = []
    for c in commands:
        verb = c.words[0].upper() if c.words else ""
        if verb == "SET" and len(c.words) >= 4 and (m := lock_key.match(c.words[1])):
            started[c.words[2]] = (int(m.group(1)), by_address.get(c.address, c.address), c.at)
        # the last call counts: redis-py sends EVALSHA again after loading a script Redis lacked
        elif verb == "EVALSHA" and len(c.words) >= 5 and lock_key.match(c.words[3]) and c.words[4] in started:
            released[c.words[4]] = c.at
    for token, (pk, host, at) in started.items():
        if token in released or token in cut:
            holds.append(Hold(pk, host, at, released.get(token) or cut[token], token))
    return holds


def overlaps(holds: list[Hold]) -> list[tuple[Hold, Hold]]:
    """Pairs of holds on the same session whose intervals intersect."""
    found = []
    by_session: dict[int, list[Hold]] = {}
    for h in holds:
        by_session.setdefault(h.session_pk, []).append(h)
    for hs in by_session.values():
        hs.sort(key=lambda h: h.start)
        for i, later in enumerate(hs):
            found += [(earlier, later) for earlier in hs[:i] if later.start < earlier.end]
    return found


def test_lock_holds_pair_set_and_release_and_flag_overlap() -> None:
    """The audit pairs a SET NX with the release of its token, drops refused SETs and finds overlaps."""
    hosts = {"a": "10.0.0.2", "b": "10.0.0.3"}
    cmds = [
        Command(1.0, "10.0.0.2", ("SET", "p:lock:7", "t1", "NX", "PX", "1000")),
        Command(1.1, "10.0.0.3", ("SET", "p:lock:7", "t2", "NX", "PX", "1000")),  # refused
        Command(2.0, "10.0.0.2", ("EVALSHA", "sha", "1", "p:lock:7", "t1")),
        Command(2.5, "10.0.0.3", ("SET", "p:lock:7", "t3", "NX", "PX", "1000")),
        Command(2.6, "10.0.0.2", ("SET", "p:lock:7", "t4", "NX", "PX", "1000")),  # held when a died
    ]
    holds = lock_holds(cmds, "p:", hosts, cut={"t4": 3.0})
    assert sorted((h.host, h.start, h.end) for h in holds) == [("a", 1.0, 2.0), ("a", 2.6, 3.0)]
    assert overlaps(holds) == []
    assert overlaps([*holds, Hold(7, "b", 2.5, 2.7, "t3")]) != []
    # a long hold overlapping a later, not adjacent one is found too
    assert overlaps([Hold(1, "a", 0, 10, "x"), Hold(1, "b", 1, 2, "y"), Hold(1, "b", 3, 4, "z")]) != []
    assert len(overlaps([Hold(1, "a", 0, 10, "x"), Hold(1, "b", 1, 2, "y"), Hold(1, "b", 3, 4, "z")])) == 2


def _turns(round_no: int) -> list[dict[str, Any]]:
    """One tool loop whose output is long enough to be clipped once it is old."""
    tid = f"toolu_r{round_no:03d}"
    output = "\n".join(f"{round_no:03d}.{i:04d} compiling module_{i} ... ok" for i in range(300))
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": "make"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": output}]},
    ]


def _append_round(clients: list[httpx.Client], round_no: int) -> None:
    for i in range(SESSIONS):
        client = clients[i % len(clients)]
        messages = _turns(round_no)
        body: dict[str, Any] = {"messages": messages, "context_window": 20_000, "output_reserve": 2_000}
        if round_no == 0:
            body["messages"] = [
                {"role": "user", "content": f"Build project {i} and fix what fails."},
                *messages,
            ]
        r = client.post(
            f"/v1/sessions/s{i}/turns", json=body, headers={"Idempotency-Key": f"s{i}-r{round_no}"}
        )
        assert r.status_code == 200, r.text


def _held_locks(r: redis.Redis, prefix: str) -> set[str]:
    """The tokens of the compaction locks held now."""
    return {str(v) for k in r.scan_iter(f"{prefix}lock:*") if (v := r.get(k))}


def _frozen_inside_a_job(host: Host, r: redis.Redis, prefix: str, timeout: float = 10) -> set[str]:
    """Freeze every process of `host` (SIGSTOP) while it holds a compaction lock: the locks it
    holds then (empty if its jobs all ended first). A job holds its lock for a few milliseconds on
    a fast machine, less than the look and a kill can take, so the kill that follows lands on
    processes frozen inside the job; a lock released between the look and the freeze is let go
    (SIGCONT) and the next one waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _held_locks(r, prefix):
            host.signal_all(signal.SIGSTOP)
            if held := _held_locks(r, prefix):
                return held
            host.signal_all(signal.SIGCONT)
        time.sleep(0.002)
    return set()


def _sessions(db_url: str) -> dict[str, tuple[int, int, int]]:
    """client id -> (pk, version, compacted_through)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT client_id, id, version, compacted_through FROM sessions")).all()
            return {r[0]: (r[1], r[2], r[3]) for r in rows}
    finally:
        engine.dispose()


def _all_compacted(db_url: str, turns: int) -> bool:
    rows = _sessions(db_url)
    return len(rows) == SESSIONS and all(v == turns == c for _, v, c in rows.values())


def _seqs(db_url: str) -> dict[int, list[int]]:
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT session_id, seq FROM turns ORDER BY session_id, seq")).all()
    finally:
        engine.dispose()
    out: dict[int, list[int]] = {}
    for pk, seq in rows:
        out.setdefault(pk, []).append(seq)
    return out


def test_two_hosts_compact_one_dies_mid_run_and_nothing_is_lost_or_compacted_twice_at_once(
    net: Net, private_redis: str, private_postgres: str, tmp_path: Path
) -> None:
    """Sessions compact on both hosts; after host a is killed mid-run (kill -9, namespace deleted)
    every appended turn is stored and host b compacts every session to its last seq, and no
    session's compaction lock was ever held by two jobs at once."""
    settings = make_settings(
        tmp_path,
        private_postgres,
        private_redis,
        idle_seconds=0.5,
        sweep_seconds=2.0,
        lock_seconds=LOCK_SECONDS,
        task_time_limit_seconds=60,
        worker_concurrency=2,
    )
    engine = make_engine(private_postgres)
    migrate(engine)  # once, before four processes would race to do it
    key = create_tenant(engine, "scale")[1]
    engine.dispose()
    for name, octet in (("a", 2), ("b", 3)):
        net.add_host(name, octet)
    hosts = {name: Host(net, name, settings, tmp_path) for name in ("a", "b")}
    monitor = Monitor(private_redis, tmp_path / "redis-monitor.log")
    r = redis.Redis.from_url(private_redis, decode_responses=True)
    clients: list[httpx.Client] = []
    try:
        for h in hosts.values():
            h.start("api", "api", "--host", h.address, "--port", str(h.api_port))
            h.start("worker", "worker", "--concurrency", "2")
        hosts["b"].start("beat", "beat")  # the sweep finds sessions whose message died with host a
        for h in hosts.values():
            h.wait_log("worker", f"celery@host-{h.name} ready")
            _wait_port(h.address, h.api_port, h.procs["api"], f"host {h.name} api")
        auth = {"Authorization": f"Bearer {key}"}
        clients += [httpx.Client(base_url=h.base_url, headers=auth, timeout=30) for h in hosts.values()]

        for round_no in range(ROUNDS_BEFORE_KILL):
            _append_round(clients, round_no)
        both = {net.hosts["a"], net.hosts["b"]}
        lock_set = re.compile(re.escape(settings.redis_prefix) + r"lock:\d+$")

        def lock_addresses() -> set[str]:
            return {c.address for c in monitor.commands if len(c.words) > 1 and lock_set.match(c.words[1])}

        wait_for(lambda: both <= lock_addresses(), timeout=60)

        # Kill host a mid-compaction. So that the kill lands inside a job, host b's worker is paused
        # (SIGSTOP) for these rounds: every lock seen is then host a's; host a is frozen while it
        # holds one, then killed (a round whose jobs all end first is followed by another). Host b
        # resumes after the kill. Paused only when idle: a worker frozen inside a job holds its
        # session's row lock in PostgreSQL, and appends to that session wait for it.
        wait_for(
            lambda: _all_compacted(private_postgres, 1 + 2 * ROUNDS_BEFORE_KILL), timeout=60, interval=0.3
        )
        hosts["b"].signal("worker", signal.SIGSTOP)
        rounds, held = ROUNDS_BEFORE_KILL, set[str]()
        while not held and rounds < ROUNDS_BEFORE_KILL + 3:
            _append_round(clients, rounds)
            rounds += 1
            held = _frozen_inside_a_job(hosts["a"], r, settings.redis_prefix)
        hosts["a"].kill()
        killed_at = r.time()
        killed = killed_at[0] + killed_at[1] / 1e6
        net.remove_host("a")
        hosts["b"].signal("worker", signal.SIGCONT)
        a_tokens = {c.words[2] for c in monitor.commands if c.address == net.hosts["a"] and len(c.words) > 2}
        cut = {t: killed for t in held & a_tokens}
        clients[0].close()

        # host b alone takes the rest: more turns through its API, compacted by its worker
        for round_no in range(rounds, rounds + ROUNDS_AFTER_KILL):
            _append_round(clients[1:], round_no)
        expected_turns = 1 + 2 * (rounds + ROUNDS_AFTER_KILL)

        wait_for(lambda: _all_compacted(private_postgres, expected_turns), timeout=90, interval=0.5)
        prompts = [clients[1].get(f"/v1/sessions/s{i}/prompt").json() for i in range(SESSIONS)]
    finally:
        for c in clients:
            c.close()
        r.close()
        for h in hosts.values():
            h.stop()
        monitor.close()

    seqs = _seqs(private_postgres)
    assert all(
        seqs[pk] == list(range(1, expected_turns + 1)) for pk, _, _ in _sessions(private_postgres).values()
    )
    assert all(p["version"] == expected_turns and p["token_count"] <= p["budget_tokens"] for p in prompts)
    holds = lock_holds(monitor.commands, settings.redis_prefix, net.hosts, cut)
    by_host = {h.host for h in holds}
    assert by_host == {"a", "b"}, by_host
    assert cut, "host a held no lock when it was killed: it was not killed mid-compaction"
    assert overlaps(holds) == []
    # the sessions whose job died with host a were compacted by host b afterwards
    cut_sessions = {h.session_pk for h in holds if h.token in cut}
    assert all(
        any(h.host == "b" and h.start >= killed for h in holds if h.session_pk == pk) for pk in cut_sessions
    )
    assert "session.compacted" in hosts["a"].log("worker") and "session.compacted" in hosts["b"].log("worker")
