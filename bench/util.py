"""What every workload needs: the server (databases, status counters, who is
connected), node processes, CPU time from /proc, records and percentiles."""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pymysql

from tests.cluster.harness import pid_alive, wait_until  # shared with the test harness

ROOT = Path(__file__).resolve().parents[1]
LOG_DIR = ROOT / "bench" / "logs"
PY = sys.executable
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def _server_url() -> str:
    """BENCH_SERVER_URL, else the server of QUARTZLITE_DATABASE_URL (the one `make db`
    checked), else the local server; without a database name."""
    url = os.environ.get("BENCH_SERVER_URL") or os.environ.get("QUARTZLITE_DATABASE_URL") \
        or "mysql+pymysql://root@127.0.0.1:3306"
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


SERVER_URL = _server_url()
DB_PREFIX = "qlbench_"
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: Server counters read at the start and the end of each measured window.
STATUS_VARS = (
    "Questions", "Com_select", "Com_update", "Com_insert", "Com_delete", "Com_commit",
    "Com_rollback", "Com_begin", "Com_set_option", "Com_admin_commands", "Connections",
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def url_for(database: str, port: int | None = None) -> str:
    """The database's URL on the server, or through a local proxy on ``port``."""
    if port is None:
        return f"{SERVER_URL.rstrip('/')}/{database}"
    params = server_params()
    auth = params["user"] + (f":{params['password']}" if params["password"] else "")
    return f"mysql+pymysql://{auth}@127.0.0.1:{port}/{database}"


def server_params() -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    u = make_url(SERVER_URL + "/x")
    return {"host": u.host or "127.0.0.1", "port": u.port or 3306, "user": u.username or "root",
            "password": u.password or ""}


class Server:
    """One admin connection of the bench (autocommit). Between the two status reads of
    a measured window it sends nothing."""

    def __init__(self) -> None:
        self._connect()

    def _connect(self) -> None:
        self.conn = pymysql.connect(**server_params(), autocommit=True)
        self.query("SET time_zone = '+00:00'")  # quartzlite stores UTC
        self.conn_id = self.query("SELECT CONNECTION_ID()")[0][0]
        #: How many statements one pair of status reads adds to Questions (calibrated).
        self.own_statements = 2

    def query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement; after a lost connection (the server restarted), connect
        again, waiting up to a minute for the server, and run it once more."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as error:
            if error.args and error.args[0] not in (0, 2003, 2006, 2013):
                raise
            log(f"lost the server ({error}); connecting again")
            wait_until(self._reconnect, timeout=60, interval=1.0, message="the MySQL server")
            with self.conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())

    def _reconnect(self) -> bool:
        try:
            self._connect()
        except pymysql.err.MySQLError:
            return False
        return True

    def version(self) -> str:
        return str(self.query("SELECT VERSION()")[0][0])

    def url_for(self, database: str, node: int = 0) -> str:
        """The URL the ``node``-th node of a workload (and its CLI) is given: here the
        same for every node; a cluster of several members may list them in another
        order for each."""
        return url_for(database)

    def pids(self) -> list[int]:
        """The database server's processes on this machine (their CPU is the window's
        ``mysql_server_s``)."""
        pid = server_pid()
        return [] if pid is None else [pid]

    def ports(self) -> set[int]:
        """The ports clients connect to (a window tells the measured processes'
        connections from other clients' by them)."""
        return {server_params()["port"]}

    def status(self) -> dict[str, int]:
        """One statement: the global counters of :data:`STATUS_VARS`."""
        names = ",".join(f"'{n}'" for n in STATUS_VARS)
        found = self.query(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
        return {name: int(value) for name, value in found}

    def calibrate(self) -> int:
        """Questions added by our own pair of status reads with nothing else running
        (the smallest of a few tries: another client may be active)."""
        deltas = []
        for _ in range(5):
            a = self.status()
            b = self.status()
            deltas.append(b["Questions"] - a["Questions"])
        self.own_statements = min(deltas)
        return self.own_statements

    def clients(self) -> list[dict[str, Any]]:
        """Connections other than ours, with their database and what they do."""
        found = self.query(
            "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE FROM information_schema.PROCESSLIST "
            "WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Binlog Dump')"
        )
        keys = ("id", "user", "host", "db", "command", "time", "state")
        return [dict(zip(keys, row, strict=True)) for row in found]

    def create(self, database: str) -> None:
        self.query(f"DROP DATABASE IF EXISTS `{database}`")
        self.query(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")

    def drop(self, database: str) -> None:
        self.query(f"DROP DATABASE IF EXISTS `{database}`")

    def drop_all_bench(self) -> None:
        for (name,) in self.query("SHOW DATABASES"):
            if str(name).startswith(DB_PREFIX):
                self.drop(str(name))

    def close(self) -> None:
        self.conn.close()


def delta(before: dict[str, int], after: dict[str, int], own: int) -> dict[str, int]:
    """Counter deltas; ``Questions`` less the bench's own status reads (and the
    SHOW STATUS itself, which MariaDB counts under Com_show_status, not these)."""
    found = {k: after[k] - before[k] for k in before}
    found["Questions"] -= own
    return found


class Window:
    """A measured window: server counters and CPU of some processes, with a check
    that nobody but the measured processes (and the bench) was connected."""

    def __init__(self, server: Server, pids: Sequence[int], databases: Sequence[str]) -> None:
        self.server = server
        self.pids = list(pids)
        self.databases = set(databases)
        self.foreign: list[dict[str, Any]] = []
        self.wire_gap: int | None = None
        self.agreed: bool | None = None

    def _check(self, quiet_for: float) -> None:
        """Other clients that sent something within the last ``quiet_for`` seconds
        (an idle connection's TIME is the seconds since its last statement)."""
        for c in self.server.clients():
            if c["db"] in self.databases:
                continue
            if c["command"] != "Sleep" or (c["time"] or 0) < quiet_for:
                self.foreign.append(c)

    def __enter__(self) -> Window:
        self._check(0.0)
        self.sockets0 = server_sockets(self.pids, self.server.ports())
        self.host0 = host_cpu()
        self.server0 = self._server_cpu()
        self.self0 = cpu_seconds(os.getpid())
        self.cpu0 = {pid: cpu_seconds(pid) for pid in self.pids}
        self.t0 = time.monotonic()
        self.s0 = self.server.status()
        return self

    def __exit__(self, *exc: object) -> None:
        self.s1 = self.server.status()
        self.t1 = time.monotonic()
        self.cpu1 = {pid: cpu_seconds(pid) for pid in self.pids}
        self.self1 = cpu_seconds(os.getpid())
        self.server1 = self._server_cpu()
        self.host1 = host_cpu()
        self.sockets1 = server_sockets(self.pids, self.server.ports())
        self._check(self.seconds + 1)

    def _server_cpu(self) -> float | None:
        """CPU seconds of the database server's processes (None: not on this machine)."""
        pids = self.server.pids()
        return sum(cpu_seconds(pid) for pid in pids) if pids else None

    def host(self) -> dict[str, Any]:
        """Where the machine's CPU went during the window: the measured processes, the
        database server, the bench, and everything else (other users of the machine)."""
        busy = self.host1[0] - self.host0[0]
        measured = sum(self.cpu().values())
        mysql = None if self.server0 is None or self.server1 is None else self.server1 - self.server0
        bench = self.self1 - self.self0
        others = busy - measured - (mysql or 0.0) - bench
        return {
            "cores": os.cpu_count(),
            "busy_s": round(busy, 2),
            "busy_pct": round(100 * busy / (self.seconds * (os.cpu_count() or 1)), 1),
            "measured_s": round(measured, 2),
            "mysql_server_s": None if mysql is None else round(mysql, 2),
            "bench_s": round(bench, 2),
            "other_processes_s": round(max(0.0, others), 2),
        }

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def counters(self) -> dict[str, int]:
        return delta(self.s0, self.s1, self.server.own_statements)

    def cpu(self) -> dict[int, float]:
        return {pid: round(self.cpu1[pid] - self.cpu0[pid], 3) for pid in self.pids}

    def foreign_connections(self) -> int:
        """Connections made to the server during the window by anyone but the measured
        processes (whose new sockets we can see): a sign that some other client came
        and went between our two looks at the process list."""
        ours = len(self.sockets1 - self.sockets0)
        return max(0, self.s1["Connections"] - self.s0["Connections"] - ours)

    def clean(self) -> bool:
        """No other client was seen active, and nobody else connected."""
        return not self.foreign and self.foreign_connections() == 0

    def summary(self) -> dict[str, Any]:
        """What every busy workload's report says of its window."""
        return {
            "statements": self.counters(),
            "window_s": round(self.seconds, 2),
            "clean": self.clean(),
            "foreign_connections": self.foreign_connections(),
            "host_cpu": self.host(),
            "foreign_clients": self.foreign,
        }

    def idle_summary(self, wire: dict[str, Any]) -> dict[str, Any]:
        """What an idle report says of a window measured by :func:`idle_window`: the
        server's statement count when nobody else was active, else the process's own
        (wire) count."""
        counters = self.counters()
        per_s = round(counters["Questions"] / self.seconds, 3)
        return {
            "window_s": round(self.seconds, 2),
            "statements": counters,
            "statements_per_s_server": per_s,
            "statements_per_s_wire": wire["statements_per_s"],
            "statements_per_s": per_s if self.agreed else wire["statements_per_s"],
            "server_minus_wire": self.wire_gap,
            "wire": wire,
            "clean": bool(self.agreed),
            "host_cpu": self.host(),
            "foreign_clients": self.foreign,
        }


def idle_window(server: Server, proxy: Any, pids: Sequence[int], databases: Sequence[str],
                seconds: float, attempts: int = 3) -> tuple[Window, dict[str, Any], int]:
    """Measure an idle process over ``seconds`` on the server and on the wire (its
    traffic passes ``proxy``); a window counts as clean when nobody else was seen and the
    server's Questions delta matches the wire count (within 1). Measured again, up to
    ``attempts`` times, while not clean. Returns the window, the wire summary, tries."""
    from bench.wire import difference, summary

    for attempt in range(1, attempts + 1):
        wire0 = proxy.snapshot()
        with Window(server, pids, databases) as window:
            time.sleep(seconds)
        wire1 = proxy.snapshot()
        wire = summary(difference(wire1[0], wire0[0]), difference(wire1[1], wire0[1]),
                       window.seconds)
        gap = window.counters()["Questions"] - wire["statements"]
        window.wire_gap = gap
        if window.clean() and abs(gap) <= 1:
            window.agreed = True
            return window, wire, attempt
        window.agreed = False
        log(f"idle window not clean (server counted {gap:+d} statements beyond this process's, "
            f"{len(window.foreign)} other client(s) seen); measuring again")
    return window, wire, attempts


# -- processes -----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds; 0 when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


#: Seconds the whole run may spend waiting for a quiet machine (see wait_quiet).
QUIET_BUDGET_S = [float(os.environ.get("BENCH_QUIET_BUDGET_S", "240"))]


def wait_quiet(limit_s: float = 60.0, threshold: float = 0.15) -> float:
    """Before a workload: wait until the machine is quiet (other processes, the database
    server included, busy less than ``threshold`` of one core for two seconds in a row),
    at most ``limit_s`` and within the run's budget. Returns the seconds waited."""
    started = time.monotonic()
    quiet = 0
    me = os.getpid()
    while True:
        budget = min(limit_s, QUIET_BUDGET_S[0]) - (time.monotonic() - started)
        busy0, me0 = host_cpu()[0], cpu_seconds(me)
        time.sleep(1.0)
        busy = host_cpu()[0] - busy0 - (cpu_seconds(me) - me0)
        quiet = quiet + 1 if busy < threshold else 0
        if quiet >= 2 or budget <= 1:
            waited = time.monotonic() - started
            QUIET_BUDGET_S[0] = max(0.0, QUIET_BUDGET_S[0] - max(0.0, waited - 2))
            if quiet < 2:
                log(f"the machine is busy (other processes: {busy:.2f} CPU-s per s); "
                    "measuring anyway")
            elif waited > 3:
                log(f"waited {waited:.0f} s for the machine to be quiet")
            return waited


def server_sockets(pids: Sequence[int], ports: set[int]) -> set[int]:
    """Inodes of the TCP sockets these processes hold to the server's ``ports``."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except OSError:
            continue
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            remote_port = int(parts[2].rsplit(":", 1)[1], 16)
            if remote_port in ports and int(parts[9]) in inodes:
                found.add(int(parts[9]))
    return found


def host_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


_SERVER_PID: list[int | None] = []


def server_pid() -> int | None:
    """The local MySQL/MariaDB server process, if it runs on this machine."""
    if _SERVER_PID and _SERVER_PID[0] is not None and not pid_alive(_SERVER_PID[0]):
        _SERVER_PID.clear()  # the server restarted
    if not _SERVER_PID:
        found = None
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if (entry / "comm").read_text().strip() in ("mariadbd", "mysqld"):
                        found = int(entry.name)
                        break
                except OSError:
                    continue
        _SERVER_PID.append(found)
    return _SERVER_PID[0]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def env_with_repo() -> dict[str, str]:
    """Our environment, with the checkout on PYTHONPATH (the nodes import bench.jobs) and
    without QUARTZLITE_* settings (every setting a run uses is passed and stated)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARTZLITE_")}
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)
    return env


def quartzlite(database: str, *args: str, timeout: float = 600,
               url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the quartzlite CLI against a bench database (on the bench's server, unless
    ``url`` says where); raise with its output on failure."""
    proc = subprocess.run(
        [PY, "-m", "quartzlite", "--database-url", url or url_for(database), *args],
        cwd=ROOT, env=env_with_repo(), capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"quartzlite {' '.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc


class NodeProcess:
    """One ``python -m quartzlite node`` on ``url``, in a process group of its own, logging
    to a file."""

    def __init__(self, url: str, name: str, options: dict[str, Any],
                 launcher: Sequence[str] = ("-m", "quartzlite")) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.options = dict(options)
        self.log_path = LOG_DIR / f"{name}.log"
        args = [PY, *launcher, "--database-url", url, "node"]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env_with_repo(), stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.guard: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def find_guard(self) -> int | None:
        if self.guard is None:
            kids = children(self.pid)
            self.guard = kids[0] if kids else None
        return self.guard

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def kill(self) -> None:
        """SIGKILL the node's process group now (its guard sees the pipe close)."""
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (graceful), then SIGKILL to the group after ``timeout``."""
        guard = self.find_guard()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"node {self.name} did not stop within {timeout}s: SIGKILL")
                self.kill()
        try:
            os.killpg(self.pid, signal.SIGKILL)  # anything its runs left in its group
        except (ProcessLookupError, PermissionError):
            pass
        if guard is not None:
            deadline = time.monotonic() + 5
            while pid_alive(guard) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(guard):
                os.kill(guard, signal.SIGKILL)
        self._log.close()
        return self.proc.returncode


def wait_server(timeout: float = 120) -> None:
    """Wait until the server accepts connections again (it may be restarting)."""

    def answers() -> bool:
        try:
            pymysql.connect(**server_params(), connect_timeout=2).close()
        except pymysql.err.MySQLError:
            return False
        return True

    wait_until(answers, timeout=timeout, interval=1.0, message="the MySQL server")


def sleep_until(epoch: float) -> None:
    left = epoch - time.time()
    if left > 0:
        time.sleep(left)


# -- records and statistics ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    job: str
    planned: float
    actual: float
    pid: int

    @property
    def lateness(self) -> float:
        return self.actual - self.planned


def _epoch(value: str) -> float:
    """Seconds since the epoch, or an ISO instant (shell bodies record those)."""
    try:
        return float(value)
    except ValueError:
        return datetime.fromisoformat(value).timestamp()


def read_records(path: Path) -> list[Record]:
    found: list[Record] = []
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            found.append(Record(parts[0], _epoch(parts[1]), float(parts[2]), int(parts[3])))
    return found


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def slot_key(planned: float) -> int:
    """Planned instants as integer milliseconds (exact for whole-second slots)."""
    return round(planned * 1000)


def duplicates(records: Iterable[Record]) -> int:
    """Executions beyond the first of the same (job, planned instant)."""
    counts = Counter((r.job, slot_key(r.planned)) for r in records)
    return sum(n - 1 for n in counts.values() if n > 1)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def lateness_stats(records: Sequence[Record]) -> dict[str, float | None]:
    late = [r.lateness for r in records]
    return {
        "lateness_p50_ms": ms(percentile(late, 50)),
        "lateness_p99_ms": ms(percentile(late, 99)),
        "lateness_max_ms": ms(max(late) if late else None),
    }


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def slots_report(records: Sequence[Record], jobs: Sequence[str], start: int, end: int) -> dict[str, Any]:
    """Every-second jobs over the window ``start <= t < end`` (whole seconds).

    Throughput and lateness are over the executions that *started* in the window (what a
    scheduler achieved then, late catch-up runs of earlier slots included); missed slots
    are the slots *planned* in the window that never ran (by the end of the run);
    duplicates are extra executions of a (job, planned instant), over all records."""
    started = [r for r in records if start <= r.actual < end]
    planned = [r for r in records if start * 1000 <= slot_key(r.planned) < end * 1000]
    seen = {(r.job, slot_key(r.planned)) for r in planned}
    expected = len(jobs) * (end - start)
    missed = sum(1 for j in jobs for s in range(start, end) if (j, s * 1000) not in seen)
    return {
        "slots_expected": expected,
        "fires": len(started),
        "slots_run": len(seen),
        "missed_slots": missed,
        "duplicates": duplicates(records),
        "off_grid_fires": sum(1 for r in started if slot_key(r.planned) % 1000),
        "late_over_1s": sum(1 for r in started if r.lateness >= 1.0),
        **lateness_stats(started),
    }


def burst_stats(records: Sequence[Record], jobs: int, t0: float) -> dict[str, Any]:
    """What a burst of ``jobs`` one-shot jobs due at ``t0`` did, from the bodies' records
    (the same for every system)."""
    distinct = {r.job for r in records}
    first = min((r.actual for r in records), default=None)
    last = max((r.actual for r in records), default=None)
    makespan = None if last is None else last - t0
    return {
        "fired": len(distinct),
        "missing": jobs - len(distinct),
        "duplicates": duplicates(records),
        "first_start_s": None if first is None else round(first - t0, 4),
        "makespan_s": None if makespan is None else round(makespan, 4),
        "fires_per_s": None if not makespan or makespan <= 0 else round(len(distinct) / makespan, 1),
        **lateness_stats(records),
    }


def per_pid(records: Iterable[Record]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[str(r.pid)] += 1
    return dict(counts)


# -- the machine ---------------------------------------------------------------------


def machine(server: Server) -> dict[str, Any]:
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    try:
        import apscheduler

        aps_version = str(apscheduler.__version__)
    except Exception:  # noqa: BLE001
        aps_version = "?"
    import sqlalchemy

    import quartzlite

    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "mysql": server.version(),
        "sqlalchemy": sqlalchemy.__version__,
        "pymysql": pymysql.__version__,
        "apscheduler": aps_version,
        "quartzlite": getattr(quartzlite, "__version__", "?"),
        "quartzlite_commit": git_head(),
    }


def git_head() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "quartzlite"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+uncommitted changes in quartzlite/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def dump_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
