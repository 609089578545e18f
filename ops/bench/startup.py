"""`python -m ops.bench startup`: `compactd up` timed from launch to its ready summary, cold and warm.

Each run starts the real `compactd up` (the venv's console script, what `make up` runs) on a pseudo
terminal, as a person would, in a scratch directory, and stops it with Ctrl-C once the summary is
printed. Figures per run:

- wall: seconds from launch to the "compactd is ready" line (the summary's own figure, too);
- the `up.*` log lines: seconds since `up` began when migrations were done, the API answered, the
  worker was ready;
- CPU seconds (user + system, /proc) each process had used when the summary appeared: `up` itself,
  the embedded Redis, the API, the worker (its parent and pool processes) — the sum is what bounds
  the wall time on a machine with few cores (about max(sum / cores, the longest process)).

Three starts per run, each with its own bytecode cache (PYTHONPYCACHEPREFIX, so the figures do not
depend on what the virtualenv holds or on PYTHONDONTWRITEBYTECODE):
- cold: a new directory (a new database, redaction key and Redis) and an empty bytecode cache:
  every module compiled from source, as on a first start after an install that compiled nothing;
- first: another new directory, the bytecode cached (what `make up` does after `make`'s install,
  which compiles the bytecode);
- warm: the first start's directory again, bytecode cached: a restart.
Set STARTUP_RUNS (default 3) for more runs of each; STARTUP_COMMAND to time another `compactd`.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ops.bench.common import table

READY = re.compile(rb"compactd is ready in ([\d.]+) s")
UP_LINE = re.compile(rb"(up\.\w+)\W.*?seconds\W+([\d.]+)")
TICK = os.sysconf("SC_CLK_TCK")
TIMEOUT = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def process_cpu(root: int) -> dict[str, float]:
    """CPU seconds of `root` and every process below it, summed per role (up, redis, api, worker, beat)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (s := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = s
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        below.setdefault(ppid, []).append(pid)
    cpu: dict[str, float] = {}
    todo = [(root, "up")]
    while todo:
        pid, role = todo.pop()
        cpu[role] = cpu.get(role, 0.0) + stats.get(pid, (0, 0.0))[1]
        for child in below.get(pid, []):
            todo.append((child, role if role != "up" else _role(_cmdline(child))))
    return cpu


def _role(cmdline: str) -> str:
    """The process's part: redis-server, or the `compactd` subcommand it runs (api, worker, beat)."""
    if "redis-server" in cmdline:
        return "redis"
    words = cmdline.split()
    if "api.cli.command" in words:
        words = words[words.index("api.cli.command") + 1 :]
    return next((w for w in words if w in ("api", "worker", "beat")), "other")


def run_once(workdir: Path, *, pycache: Path) -> dict[str, object]:
    """One `compactd up` in workdir, stopped once ready: wall, summary, up.* lines, CPU per process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTD_")}
    env["COMPACTD_PORT"] = str(_free_port())
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the cold start fills the cache the others use
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    # STARTUP_COMMAND: another `compactd` to time (e.g. an older checkout run with PYTHONPATH)
    command = os.environ.get("STARTUP_COMMAND", str(Path(sys.executable).with_name("compactd"))).split()
    primary, secondary = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(
        [*command, "up"], cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    out = b""
    row: dict[str, object] = {}
    try:
        while (ready := READY.search(out)) is None:
            if proc.poll() is not None or time.monotonic() - started > TIMEOUT:
                raise SystemExit(f"compactd up did not become ready:\n{out.decode(errors='replace')}")
            if select.select([primary], [], [], 0.05)[0]:
                try:
                    out += os.read(primary, 65536)
                except OSError:
                    break
        wall = time.monotonic() - started
        cpu = process_cpu(proc.pid)
        row = {"wall s": f"{wall:.2f}", "summary s": ready.group(1).decode() if ready else "?"}
        for name, seconds in UP_LINE.findall(out):
            row[name.decode()] = seconds.decode()
        for role in ("up", "redis", "api", "worker"):
            row[f"cpu {role}"] = f"{cpu.get(role, 0.0):.2f}"
        row["cpu sum"] = f"{sum(v for k, v in cpu.items() if k != 'beat'):.2f}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(primary)
    return row


COLUMNS = (
    "start",
    "wall s",
    "summary s",
    "up.migrated",
    "up.api_ready",
    "up.worker_ready",
    "cpu up",
    "cpu redis",
    "cpu api",
    "cpu worker",
    "cpu sum",
)


def main() -> None:
    runs = int(os.environ.get("STARTUP_RUNS", "3"))
    rows: list[dict[str, object]] = []
    print(f"load average before: {' '.join(os.getloadavg().__repr__().strip('()').split(', '))}", flush=True)
    for i in range(runs):
        scratch = Path(tempfile.mkdtemp(prefix="compactd-startup-"))
        try:
            pycache = scratch / "pycache"
            for kind, workdir in (("cold", "a"), ("first", "b"), ("warm", "b")):
                (scratch / workdir).mkdir(exist_ok=True)
                rows.append({"start": f"{kind} {i + 1}", **run_once(scratch / workdir, pycache=pycache)})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    for kind in ("cold", "first", "warm"):
        mine = [r for r in rows if str(r["start"]).startswith(kind)]
        rows.append(
            {
                "start": f"{kind} median",
                **{
                    c: f"{statistics.median(float(str(r[c])) for r in mine if c in r):.2f}"
                    for c in COLUMNS[1:]
                },
            }
        )
    print(table(rows, COLUMNS))
    print(f"load average after: {' '.join(os.getloadavg().__repr__().strip('()').split(', '))}")
    print(
        "wall and up.* in seconds since launch; cpu = user + system seconds used by each process until ready"
    )


if __name__ == "__main__":
    main()
