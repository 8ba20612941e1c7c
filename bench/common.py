"""Shared benchmark plumbing: throwaway stores, child processes, and the table printer."""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from memsync.runtime.storage import Store, upgrade

POSTGRES_ADMIN_URL = os.environ.get(
    "MEMSYNC_BENCH_POSTGRES_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
CITUS_PORT = int(os.environ.get("MEMSYNC_CITUS_PORT", "9700"))
"""The local Citus cluster's coordinator (scripts/citus); its workers take the next two."""
CITUS_NODES = (CITUS_PORT, CITUS_PORT + 1, CITUS_PORT + 2)


@contextmanager
def throwaway_store(backend: str, directory: str) -> Iterator[str]:
    """Yield the URL of a new, migrated store; drop it afterwards. ``backend`` is
    sqlite, postgresql, or citus (a database of its own on the local Citus cluster)."""
    if backend == "citus":
        with throwaway_citus_store() as url:
            yield url
        return
    if backend == "sqlite":
        url = f"sqlite:///{directory}/bench-{uuid.uuid4().hex[:8]}.db"
        store = Store.from_url(url)
        upgrade(store)
        store.dispose()
        yield url
        return
    name = f"memsync_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    store = Store.from_url(url)
    upgrade(store)
    store.dispose()
    try:
        yield url
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _citus_node_url(port: int, database: str = "postgres") -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"


def citus_reachable(timeout: int = 3) -> bool:
    """Whether the local Citus cluster's three nodes answer (benchmarks skip it if not)."""
    for port in CITUS_NODES:
        engine = sa.create_engine(_citus_node_url(port), connect_args={"connect_timeout": timeout})
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
        except sa.exc.OperationalError:
            return False
        finally:
            engine.dispose()
    return True


@contextmanager
def throwaway_citus_store() -> Iterator[str]:
    """Yield the URL of a new database on the local Citus cluster, migrated (every
    tenant table distributed, as ``memsync db upgrade`` does); drop it afterwards.

    The cluster's own database (``memsync``, the test suite's) is never touched: this
    one is made on each node, with the extension on each, and the coordinator told
    where it and its workers are, as scripts/citus does for its database."""
    name = f"memsync_bench_{uuid.uuid4().hex[:8]}"
    admins = [
        sa.create_engine(_citus_node_url(port), isolation_level="AUTOCOMMIT")
        for port in CITUS_NODES
    ]
    try:
        for admin in admins:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        # Workers last: adding a node needs the extension there already.
        for port in reversed(CITUS_NODES):
            node = sa.create_engine(_citus_node_url(port, name), isolation_level="AUTOCOMMIT")
            with node.connect() as connection:
                connection.exec_driver_sql("CREATE EXTENSION citus")
                if port == CITUS_PORT:
                    connection.exec_driver_sql(
                        f"SELECT citus_set_coordinator_host('127.0.0.1', {CITUS_PORT})"
                    )
                    for worker in CITUS_NODES[1:]:
                        connection.exec_driver_sql(f"SELECT citus_add_node('127.0.0.1', {worker})")
            node.dispose()
        url = _citus_node_url(CITUS_PORT, name)
        store = Store.from_url(url)
        upgrade(store)
        store.dispose()
        yield url
    finally:
        # The coordinator first: it holds connections to the workers' databases.
        for admin in admins:
            _drop_database(admin, name)


def _drop_database(admin: sa.Engine, name: str, attempts: int = 10) -> None:
    """Drop ``name`` through ``admin``, retrying a while: on a shared cluster the test
    suite stops and starts workers (scripts/citus stop-node), and a drop must outlast
    a restart rather than leave the database behind."""
    for attempt in range(attempts):
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            break
        except sa.exc.OperationalError:
            if attempt == attempts - 1:
                raise
            admin.dispose()  # the pool's connections died with the node
            time.sleep(2)
    admin.dispose()


def wait_until_serving(client: httpx.Client, timeout: float = 60.0) -> None:
    """Poll the server's ``/v1/health`` until it answers (a fresh ``memsync serve``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.get("/v1/health").raise_for_status()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def memsync_server(
    url: str,
    directory: str,
    config: str = "",
    *,
    wrapper: Sequence[str] = (),
    start_timeout: float = 30,
    processes: int = 1,
) -> Iterator[tuple[str, int]]:
    """``memsync serve`` on a free loopback port, as a subprocess, against the store at
    ``url`` with the YAML ``config``; yield its base URL and pid once it answers.
    ``wrapper`` runs the server under another program (valgrind), which must keep its
    pid; such a server may need a longer ``start_timeout`` (seconds). ``processes``:
    its ``--processes`` (1 by default, so that the pid is the one serving process whose
    CPU time a benchmark reads)."""
    port = free_port()
    path = Path(directory) / "memsync.yaml"
    path.write_text(config or "{}\n")
    server = subprocess.Popen(
        [
            *wrapper,
            *(sys.executable, "-m", "memsync", "--config", str(path)),
            *("serve", "--port", str(port), "--processes", str(processes)),
        ],
        env={**os.environ, "MEMSYNC_STORE": url},
        # The access log goes nowhere (as to a log file), and stays off this process's
        # stdout, which carries the child's result.
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5) as client:
            wait_until_serving(client, timeout=start_timeout)
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(timeout=start_timeout)  # a slow starter (valgrind) is slow to stop too


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident memory (VmHWM) of a process, in MiB."""
    with open(f"/proc/{pid or 'self'}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) a process has used so far. On a shared machine it
    varies far less than wall time, so it is what before/after comparisons rest on."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        # Fields after the command name (in parentheses); utime and stime are 14 and 15.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its live descendants (a supervisor and the serving
    processes it forked); a descendant that has exited is counted in its parent's
    children's times only once waited for, which a benchmark's phase does not cross."""
    parents: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        parents[int(fields[1])].append(int(entry))
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        pending.extend(parents.get(current, ()))
    return total


def machine_busy_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine has spent busy and idle so far (all cores, from
    ``/proc/stat``): a phase's difference says whether the cores were saturated."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    per_second = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / per_second, idle / per_second


def run_child(module: str, arguments: Sequence[str]) -> dict[str, Any]:
    """Run one scenario in a fresh interpreter (so peak memory is its own)."""
    completed = subprocess.run(
        [sys.executable, "-m", module, "--child", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{module} {arguments} failed:\n{completed.stderr}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def machine() -> str:
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A Markdown table, ready to paste into docs/benchmarks.md."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) + " |")


def counted_instructions(output: Path) -> int:
    """The total of a callgrind output file (its ``summary:`` or ``totals:`` line)."""
    totals = re.findall(r"^(?:summary|totals): (\d+)", output.read_text(errors="replace"), re.M)
    if not totals:
        raise RuntimeError(f"no totals in {output}")
    return max(int(total) for total in totals)
