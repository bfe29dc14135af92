"""The quartzlite workloads: real ``quartzlite node`` processes (``python -m quartzlite
node``), a fresh database per workload (``quartzlite db upgrade``), jobs created through
the bulk path (``SchedulerClient.add_jobs``), job bodies recording planned/actual."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from bench import util
from bench.util import LOG_DIR, NodeProcess, Server, Window, log
from bench.wire import CountingProxy
from tests.cluster.harness import wait_until

#: The settings every table states (NodeConfig names).
SHOWN = ("capacity", "prefetch", "look_ahead_s", "fire_ahead_s", "poll_interval_s", "heartbeat_interval_s",
         "fence_after_s", "session_timeout_s", "result_batch", "compensate_interval_s")
#: The fastest failover settings the docs recommend.
FAST = {"heartbeat_interval_s": 0.5, "fence_after_s": 2.5, "session_timeout_s": 3.5,
        "poll_interval_s": 1.0}
#: Job bodies.
RECORD = "bench.jobs:record"
NOOP = "bench.jobs:noop"
EVERY_SECOND = "* * * * * ?"
CHUNK = 5000


@cache
def node_defaults() -> dict[str, Any]:
    """The node's defaults, read from quartzlite's NodeConfig (whatever this checkout has)."""
    from quartzlite.config import NodeConfig

    found = {}
    for f in fields(NodeConfig):
        if f.name in SHOWN or f.name in ("scan_interval_s", "expiry_interval_s"):
            found[f.name] = f.default
    return found


@cache
def node_options() -> frozenset[str]:
    """Option names ``quartzlite node --help`` offers (before/after the poll rework)."""
    out = subprocess.run([util.PY, "-m", "quartzlite", "node", "--help"], cwd=util.ROOT,
                         env=util.env_with_repo(), capture_output=True, text=True).stdout
    return frozenset(w[2:].replace("-", "_") for w in out.split() if w.startswith("--"))


def translate(options: dict[str, Any]) -> dict[str, Any]:
    """Map ``poll_interval_s`` to the older scan/expiry intervals if this checkout's
    node has not got it yet."""
    have = node_options()
    found = dict(options)
    if "poll_interval_s" in found and "poll_interval_s" not in have:
        value = found.pop("poll_interval_s")
        for old in ("scan_interval_s", "expiry_interval_s"):
            if old in have:
                found[old] = value
    return found


def effective(options: dict[str, Any]) -> dict[str, Any]:
    """The settings a node ran with: defaults, then what we passed."""
    settings = {k: v for k, v in node_defaults().items() if k in SHOWN or k in options}
    settings.update(options)
    return settings


class Cluster:
    """A fresh database and the nodes on it; tear down stops nodes, keeps the database
    until :meth:`drop`."""

    def __init__(self, server: Server, name: str) -> None:
        self.server = server
        self.name = name
        self.database = util.DB_PREFIX + name
        self.url = server.url_for(self.database)
        self.nodes: list[NodeProcess] = []
        self.records = LOG_DIR / f"{name}.records"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.records.unlink(missing_ok=True)
        server.drop(self.database)
        util.quartzlite(self.database, "db", "upgrade", url=self.url)

    def add_jobs(self, specs: list[dict[str, Any]]) -> float:
        """Create jobs through the library's bulk path in chunks; returns seconds."""
        from quartzlite import SchedulerClient

        started = time.perf_counter()
        with SchedulerClient(self.url) as client:
            for start in range(0, len(specs), CHUNK):
                client.add_jobs(specs[start : start + CHUNK])
        return time.perf_counter() - started

    def start(self, count: int, options: dict[str, Any], port: int | None = None,
              launcher: tuple[str, ...] = ("-m", "quartzlite")) -> list[NodeProcess]:
        """``count`` nodes, each on the URL the server gives it (through the proxy on
        ``port`` when given)."""
        passed = translate(options)
        for i in range(count):
            url = self.server.url_for(self.database, i) if port is None \
                else util.url_for(self.database, port)
            self.nodes.append(NodeProcess(url, f"{self.name}-node{i + 1}", passed,
                                          launcher=launcher))
        wait_until(self.sessions_ready, timeout=30, message=f"{count} node session(s)")
        for node in self.nodes:
            node.find_guard()
        return self.nodes

    def sessions_ready(self) -> bool:
        for node in self.nodes:
            if node.proc.poll() is not None:
                raise RuntimeError(f"node {node.name} exited {node.proc.returncode}; "
                                   f"see {node.log_path}")
        pids = {n.pid for n in self.nodes}
        found = {r[0] for r in self.server.query(
            f"SELECT pid FROM `{self.database}`.ql_sessions")}
        return pids <= found

    def owners(self) -> dict[int, list[str]]:
        """Jobs each node's session holds (prepared or executing), by node pid."""
        found: dict[int, list[str]] = {}
        for pid, name in self.server.query(
            f"SELECT s.pid, j.name FROM `{self.database}`.ql_jobs j JOIN `{self.database}`.ql_sessions s "
            "ON s.id = j.owner_session WHERE j.state <> 'idle'"
        ):
            found.setdefault(int(pid), []).append(str(name))
        return found

    def last_heartbeat(self, pid: int) -> float | None:
        """The epoch of the session's last heartbeat (database clock, UTC)."""
        found = self.server.query(
            f"SELECT UNIX_TIMESTAMP(heartbeat_at) FROM `{self.database}`.ql_sessions WHERE pid = %s",
            (pid,))
        return float(found[0][0]) if found and found[0][0] is not None else None

    def run_statuses(self) -> dict[str, int]:
        return {str(s): int(n) for s, n in self.server.query(
            f"SELECT status, COUNT(*) FROM `{self.database}`.ql_runs GROUP BY status")}

    def stop(self, killed: tuple[NodeProcess, ...] = ()) -> dict[str, int | None]:
        """Stop the nodes; a node (other than ``killed`` ones) that had exited on its own
        before (fenced: the shared server went away, say) makes the measurement void."""
        early = [n.name for n in self.nodes
                 if n not in killed and n.proc.poll() is not None]
        codes = {}
        for node in self.nodes:
            codes[node.name] = node.stop()
        if early:
            raise RuntimeError(f"node(s) {', '.join(early)} stopped during the measurement "
                               f"(exit codes {codes}); see bench/logs/")
        return codes

    def drop(self) -> None:
        self.server.drop(self.database)


def _expiry_after(log_text: str, since: float) -> float | None:
    """Seconds from ``since`` to the first "expired ... session(s)" line of a node log."""
    for line in log_text.splitlines():
        if " expired " in line and "session(s)" in line:
            try:
                stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
                stamp += int(line[20:23]) / 1000
            except (ValueError, IndexError):
                continue
            if stamp >= since - 1:
                return round(stamp - since, 3)
    return None


def _statuses(cluster: Cluster) -> dict[str, int]:
    """Runs by status once the nodes stopped (a failed query is not worth a failed run)."""
    try:
        return cluster.run_statuses()
    except Exception as error:  # noqa: BLE001
        return {"error": str(error)}  # type: ignore[dict-item]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def every_second_specs(prefix: str, n: int, records: Path) -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i:05d}", "schedule": EVERY_SECOND, "callable": RECORD,
             "kwargs": {"path": str(records)}} for i in range(n)]


# -- burst ---------------------------------------------------------------------------


def _options(capacity: int | None) -> dict[str, Any]:
    """Node options: nothing (the defaults a user gets), or capacity raised."""
    return {} if capacity is None else {"capacity": capacity}


def burst(server: Server, nodes: int, jobs: int, capacity: int | None) -> dict[str, Any]:
    """``jobs`` one-shot jobs (``@at T0``) on ``nodes`` nodes (capacity None: defaults)."""
    cluster = Cluster(server, f"burst{nodes}{'d' if capacity is None else ''}")
    options = _options(capacity)
    try:
        started = cluster.start(nodes, options)
        time.sleep(1.0)
        lead = 8.0
        t0 = math.ceil(time.time() + lead)
        specs = [{"name": f"burst{i:05d}", "schedule": f"@at {_iso(t0)}", "callable": RECORD,
                  "kwargs": {"path": str(cluster.records)}} for i in range(jobs)]
        create_s = cluster.add_jobs(specs)
        if time.time() > t0 - 3:
            log(f"warning: creating the burst took {create_s:.1f}s, T0 is close")
        with Window(server, [n.pid for n in started], [cluster.database]) as window:
            deadline = t0 + 120
            while util.count_lines(cluster.records) < jobs and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # late duplicates
        records = util.read_records(cluster.records)
    finally:
        codes = cluster.stop()
        statuses = _statuses(cluster)
        cluster.drop()
    return burst_report(records, jobs, t0, window, started, nodes, options, create_s) | {
        "run_statuses": statuses, "exit_codes": codes}


def burst_report(records: list[util.Record], jobs: int, t0: float, window: Window,
                 started: list[Any], nodes: int, options: dict[str, Any],
                 create_s: float) -> dict[str, Any]:
    counters = window.counters()
    fires = len(records)
    return {
        "system": "quartzlite",
        "nodes": nodes,
        "jobs": jobs,
        "t0": t0,
        "create_s": round(create_s, 3),
        **util.burst_stats(records, jobs, t0),
        "fires_by_pid": util.per_pid(records),
        **window.summary(),
        "statements_per_fire": round(counters["Questions"] / fires, 2) if fires else None,
        "cpu_s": {str(k): v for k, v in window.cpu().items()},
        "settings": effective(options),
    }


# -- steady and the cost curve -------------------------------------------------------


def steady(server: Server, name: str, nodes: int, jobs: int, duration: int,
           capacity: int | None, warmup: float = 4.0, extra: dict[str, Any] | None = None,
           specs_for: Callable[[str, int, Path], list[dict[str, Any]]] | None = None,
           ) -> dict[str, Any]:
    """``jobs`` every-second jobs on ``nodes`` nodes (capacity None: defaults); measured
    over ``duration`` whole seconds after a warm-up."""
    cluster = Cluster(server, name)
    options = {**_options(capacity), **(extra or {})}
    try:
        specs = (specs_for or every_second_specs)("tick", jobs, cluster.records)
        create_s = cluster.add_jobs(specs)
        started = cluster.start(nodes, options)
        ws = math.ceil(time.time() + warmup)
        we = ws + duration
        util.sleep_until(ws)
        with Window(server, [n.pid for n in started], [cluster.database]) as window:
            util.sleep_until(we)
        threads = {n.name: util.thread_count(n.pid) for n in started}
        time.sleep(2.0)  # the window's last slots
        records = util.read_records(cluster.records)
    finally:
        codes = cluster.stop()
        statuses = _statuses(cluster)
        cluster.drop()
    names = [s["name"] for s in specs]
    report = util.slots_report(records, names, ws, we)
    counters = window.counters()
    cpu = window.cpu()
    host = window.host()
    by_pid = util.per_pid(r for r in records if ws <= r.actual < we)
    fires = report["fires"]
    return {
        "system": "quartzlite",
        "nodes": nodes,
        "jobs": jobs,
        "duration_s": duration,
        "create_s": round(create_s, 3),
        **report,
        "fires_per_s": round(report["fires"] / duration, 1),
        "duplicates_all": util.duplicates(records),
        "fires_by_pid": by_pid,
        **window.summary(),
        "statements_per_s": round(counters["Questions"] / window.seconds, 1),
        "statements_per_fire": round(counters["Questions"] / report["fires"], 2) if report["fires"] else None,
        "cpu_s": {str(k): v for k, v in cpu.items()},
        "cpu_ms_per_fire": round(1000 * sum(cpu.values()) / fires, 3) if fires else None,
        "cpu_ms_per_fire_by_node": {
            str(pid): round(1000 * cpu.get(int(pid), 0.0) / n, 3) for pid, n in by_pid.items() if n
        },
        "mysql_ms_per_fire": round(1000 * (host.get("mysql_server_s") or 0.0) / fires, 3)
        if fires and host.get("mysql_server_s") is not None else None,
        "cpu_utilisation": round(sum(cpu.values()) / window.seconds, 3),
        "threads": threads,
        "run_statuses": statuses,
        "exit_codes": codes,
        "settings": effective(options),
    }


# -- shell jobs ----------------------------------------------------------------------

#: A shell body that records like :func:`bench.jobs.record`, with bash builtins only
#: (no fork beyond bash itself): the job, its planned instant (ISO), bash's start, the node.
SHELL_RECORD = ('printf "%s %s %s %s\\n" "$QUARTZLITE_JOB" "$QUARTZLITE_PLANNED_AT" '
                '"$EPOCHREALTIME" "$PPID" >> {path}')


def shell_specs(prefix: str, n: int, records: Path) -> list[dict[str, Any]]:
    command = SHELL_RECORD.format(path=shlex.quote(str(records)))
    return [{"name": f"{prefix}{i:05d}", "schedule": EVERY_SECOND, "command": command}
            for i in range(n)]


def shell(server: Server, name: str, nodes: int, jobs: int, duration: int) -> dict[str, Any]:
    """``jobs`` every-second shell jobs with the defaults: lateness is bash's start."""
    return steady(server, name, nodes, jobs, duration, None, specs_for=shell_specs)


def spawn_floor(samples: int = 200) -> dict[str, Any]:
    """What starting bash costs on this machine, from one Python process (as a node
    starts a shell run, without the node): Popen to bash's first builtin, one at a time;
    ``samples`` started as fast as they can be, none waiting for another (the floor of a
    burst of shell runs due at one instant); and the same with at most 16 running at
    once (the default capacity), each started as one ends."""
    script = 'printf "%s" "$EPOCHREALTIME"'

    def spawn() -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)

    alone: list[float] = []
    for _ in range(samples):
        began = time.time()
        proc = spawn()
        alone.append(float(proc.communicate()[0]) - began)
    began = time.time()
    burst = [spawn() for _ in range(samples)]
    at_once = max(float(p.communicate()[0]) for p in burst) - began
    began = time.time()
    procs: list[subprocess.Popen[str]] = []
    together: list[float] = []
    for _ in range(samples):
        while len(procs) >= 16:
            together.append(float(procs.pop(0).communicate()[0]) - began)
        procs.append(spawn())
    together += [float(p.communicate()[0]) - began for p in procs]
    alone.sort()
    return {
        "samples": samples,
        "spawn_p50_ms": util.ms(alone[len(alone) // 2]),
        "spawn_p99_ms": util.ms(alone[min(len(alone) - 1, int(len(alone) * 0.99))]),
        "all_started_at_once_ms": util.ms(at_once),
        "all_started_16_at_once_ms": util.ms(max(together)),
        "gated_16_at_once_ms": util.ms(_gated_floor(samples)),
    }


def _gated_floor(samples: int) -> float:
    """``samples`` bash started a second ahead, each waiting on its stdin (as a node's
    bash waits at its gate), then let go 16 at a time, each as one ends: when the last
    one runs (seconds after the first was let go)."""
    script = 'read -r _; exec </dev/null; printf "%s" "$EPOCHREALTIME"'
    waiting = [subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
               for _ in range(samples)]
    time.sleep(1.0)
    began = time.time()
    going: list[subprocess.Popen[str]] = []
    last = 0.0
    for proc in waiting:
        while len(going) >= 16:
            last = max(last, _printed(going.pop(0)))
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        going.append(proc)
    last = max([last] + [_printed(p) for p in going])
    return last - began


def _printed(proc: subprocess.Popen[str]) -> float:
    assert proc.stdout is not None
    value = float(proc.stdout.read())
    proc.wait()
    return value


# -- failover --------------------------------------------------------------------------


def failover(server: Server, mode: str, jobs: int, kill_at: float, duration: int,
             capacity: int) -> dict[str, Any]:
    """2 nodes, ``jobs`` every-second jobs; SIGKILL the node holding most of them at
    ``kill_at`` seconds into the window, run to ``duration``."""
    cluster = Cluster(server, f"failover_{mode}")
    options = {"capacity": capacity, **(FAST if mode == "fast" else {})}
    try:
        specs = every_second_specs("fo", jobs, cluster.records)
        cluster.add_jobs(specs)
        started = cluster.start(2, options)
        ws = math.ceil(time.time() + 5.0)
        kill = ws + kill_at
        we = ws + duration
        util.sleep_until(kill - 0.3)
        owners = cluster.owners()
        victim = max(started, key=lambda n: len(owners.get(n.pid, [])))
        survivor = next(n for n in started if n is not victim)
        with Window(server, [n.pid for n in started], [cluster.database]) as window:
            util.sleep_until(kill)
            killed_at = time.time()
            victim.kill()
            last_beat = cluster.last_heartbeat(victim.pid)
            util.sleep_until(we)
        util.sleep_until(we + 3)
        records = util.read_records(cluster.records)
        survivor_log = survivor.log_path.read_text(errors="replace")
    finally:
        codes = cluster.stop(killed=tuple(n for n in cluster.nodes if n.proc.returncode == -9))
        statuses = _statuses(cluster)
        cluster.drop()
    names = [s["name"] for s in specs]
    report = util.slots_report(records, names, ws, we)
    return {
        "system": "quartzlite",
        "mode": mode,
        "nodes": 2,
        "jobs": jobs,
        "duration_s": duration,
        "kill_at_s": kill_at,
        **report,
        **recovery(records, names, killed_at, we, owners.get(victim.pid, [])),
        "duplicates_all": util.duplicates(records),
        "victim_pid": victim.pid,
        "victim_held_jobs": len(owners.get(victim.pid, [])),
        "survivor_held_jobs": len(owners.get(survivor.pid, [])),
        "fires_by_pid": util.per_pid(records),
        "victim_last_heartbeat_before_kill_s": None if last_beat is None
        else round(killed_at - last_beat, 3),
        "kill_to_expiry_s": _expiry_after(survivor_log, killed_at),
        "host_cpu": window.host(),
        "run_statuses": statuses,
        "exit_codes": codes,
        "settings": effective(options),
    }


def recovery(records: list[util.Record], names: list[str], killed_at: float, end: int,
             held: list[str]) -> dict[str, Any]:
    """How the cluster came back after the kill.

    * recovery gap: from the kill to the first wall-clock second in which every job
      fired (any slot: a recovered job first runs the slot it was stranded on, late),
      measured to the last of those first starts in that second;
    * back on schedule: from the kill to the first slot S in which every job ran its
      slot S within S..S+1 (whole seconds, as the kill is on a whole second);
    * orphans: the jobs the killed node held, plus any job without an on-time run in
      one of the two slots after the kill; their first start after the kill, and their
      worst lateness (the late runs of the slots they were stranded on)."""
    everyone = set(names)
    by_second: dict[int, dict[str, float]] = {}
    for r in sorted(records, key=lambda r: r.actual):
        if r.actual >= killed_at:
            by_second.setdefault(math.floor(r.actual), {}).setdefault(r.job, r.actual)
    gap = None
    for second in range(math.floor(killed_at), end):
        firsts = by_second.get(second, {})
        if set(firsts) >= everyone:
            gap = max(firsts[j] for j in everyone) - killed_at
            break
    on_time: dict[int, set[str]] = {}
    for r in records:
        key = util.slot_key(r.planned)
        if key % 1000 == 0 and 0 <= r.lateness < 1.0:
            on_time.setdefault(key // 1000, set()).add(r.job)
    first_slot = math.floor(killed_at) + 1
    scheduled = next((s for s in range(first_slot, end) if on_time.get(s, set()) >= everyone), None)
    orphans = set(held)
    for s in (first_slot, first_slot + 1):
        orphans |= everyone - on_time.get(s, set())
    first_after: dict[str, float] = {}
    for r in sorted(records, key=lambda r: r.actual):
        if r.job in orphans and r.actual >= killed_at:
            first_after.setdefault(r.job, r.actual)
    late = [r.lateness for r in records if r.job in orphans and r.planned >= killed_at - 1]
    return {
        "killed_at": killed_at,
        "recovery_gap_s": None if gap is None else round(gap, 3),
        "back_on_schedule_s": None if scheduled is None else round(scheduled - killed_at, 3),
        "orphaned_jobs": len(orphans),
        "orphans_first_fire_after_kill_s": round(min(first_after.values()) - killed_at, 3) if first_after else None,
        "orphans_all_fired_after_kill_s": round(max(first_after.values()) - killed_at, 3)
        if first_after and len(first_after) == len(orphans) else None,
        "orphans_worst_lateness_ms": util.ms(max(late)) if late else None,
    }


# -- idle at scale and bulk creation ------------------------------------------------------


def idle_specs(prefix: str, n: int) -> list[dict[str, Any]]:
    """Jobs that are not due during the test: ``@at`` about half a year from now."""
    when = (datetime.now(UTC) + timedelta(days=180)).replace(microsecond=0)
    at = f"@at {when.isoformat().replace('+00:00', 'Z')}"
    return [{"name": f"{prefix}{i:06d}", "schedule": at, "callable": NOOP} for i in range(n)]


def create_library(server: Server, name: str, n: int) -> tuple[Cluster, dict[str, Any]]:
    cluster = Cluster(server, name)
    seconds = cluster.add_jobs(idle_specs("idle", n))
    count = int(server.query(f"SELECT COUNT(*) FROM `{cluster.database}`.ql_jobs")[0][0])
    return cluster, {"path": f"SchedulerClient.add_jobs, chunks of {CHUNK}", "jobs": count,
                     "seconds": round(seconds, 2), "jobs_per_s": round(count / seconds)}


def create_cli(server: Server, name: str, n: int) -> tuple[Cluster, dict[str, Any]]:
    cluster = Cluster(server, name)
    path = LOG_DIR / f"{name}.import.json"
    path.write_text(json.dumps(idle_specs("imp", n)))
    started = time.perf_counter()
    util.quartzlite(cluster.database, "job", "import", str(path))
    seconds = time.perf_counter() - started
    path.unlink()
    count = int(server.query(f"SELECT COUNT(*) FROM `{cluster.database}`.ql_jobs")[0][0])
    return cluster, {"path": "quartzlite job import FILE (one process, one transaction)",
                     "jobs": count, "seconds": round(seconds, 2), "jobs_per_s": round(count / seconds)}


def idle(server: Server, cluster: Cluster, seconds: float, settle: float = 8.0,
         options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One node (default settings) on ``cluster``'s jobs, measured over ``seconds``."""
    options = dict(options or {})
    jobs = int(server.query(f"SELECT COUNT(*) FROM `{cluster.database}`.ql_jobs")[0][0])
    params = util.server_params()
    proxy = CountingProxy(params["host"], params["port"])
    try:
        (node,) = cluster.start(1, options, port=proxy.port)
        time.sleep(settle)
        pids = [node.pid] + ([node.guard] if node.guard else [])
        window, wire, attempts = util.idle_window(server, proxy, pids, [cluster.database], seconds)
        threads = util.thread_count(node.pid)
    finally:
        codes = cluster.stop()
        proxy.close()
    cpu = window.cpu()
    return {
        "system": "quartzlite",
        "jobs": jobs,
        **window.idle_summary(wire),
        "cpu_s_node": cpu.get(node.pid),
        "cpu_s_guard": cpu.get(node.guard) if node.guard else None,
        "cpu_pct_node": round(100 * cpu.get(node.pid, 0.0) / window.seconds, 2),
        "threads": threads,
        "attempts": attempts,
        "exit_codes": codes,
        "settings": effective(options),
    }
