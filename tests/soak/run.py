"""The soak: real node processes on a private mariadbd, a seeded nemesis, racing writes,
and the checker (tests/soak/checker.py) at the end. See tests/soak/__init__.py."""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from quartzlite.client import SchedulerClient
from tests.cluster.harness import FAST, Db, NodeProcess, pid_alive
from tests.cluster.mariadb import private_database
from tests.cluster.proxy import TcpProxy
from tests.soak import checker
from tests.soak.bodies import append, shell_command, uptime

HEARTBEAT = float(FAST["heartbeat-interval-s"])
FENCE_AFTER = float(FAST["fence-after-s"])
SESSION_TIMEOUT = float(FAST["session-timeout-s"])
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
#: One node's wall clock is this far off (faketime; its monotonic clock is left alone).
SKEW = "-3m"
NODE_OPTIONS = {"capacity": "40"}


def _around(value: float) -> list[float]:
    """Durations just below and just above ``value``."""
    return [round(value * 0.8, 2), round(value * 1.25, 2)]


FREEZES = _around(HEARTBEAT) + _around(FENCE_AFTER) + _around(SESSION_TIMEOUT)
PARTITIONS = [1.0, *_around(FENCE_AFTER), round(SESSION_TIMEOUT * 1.5, 2)]
OUTAGES = [1.0, round(FENCE_AFTER * 0.6, 2), round(FENCE_AFTER * 1.6, 2)]


def db_now(db: Db) -> datetime:
    return db.scalar("SELECT UTC_TIMESTAMP(6)").replace(tzinfo=UTC)


@dataclass
class Slot:
    """One of the soak's node places: what runs there now and what ran before."""

    index: int
    proxy: TcpProxy
    flags: list[str]
    env: dict[str, str]
    state_dir: Path
    node: NodeProcess | None = None
    frozen: bool = False
    exits: list[tuple[int, int]] = field(default_factory=list)  # (pid, return code)
    guards: set[int] = field(default_factory=set)
    faulted_at: float = 0.0  # monotonic instant of its last fault (or of the db's)


class Soak:
    def __init__(self, seconds: float, seed: int, workdir: Path | None = None) -> None:
        self.seconds = seconds
        self.seed = seed
        self.rng = random.Random(seed)
        self.dir = workdir or Path(tempfile.mkdtemp(prefix=f"ql-soak-{seed}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records = self.dir / "records.log"
        self.records.touch()
        self.timeline: list[dict[str, Any]] = []
        self.began = time.monotonic()
        self.stop = threading.Event()  # end of the chaos
        self.done = threading.Event()  # end of the whole soak
        self.lock = threading.Lock()
        self.db_down = False
        self.db_faulted_at = 0.0
        self.slots: list[Slot] = []
        self.writer_stats: Counter[str] = Counter()
        self.checked: list[str] = []
        self.fail_below: dict[str, int] = {}
        self.killable: set[str] = set()
        self.bursts: list[str] = []
        self.silent: list[str] = []
        self.pending_faults: list[threading.Thread] = []
        #: When each node could not record outcomes (the checker's excuse for a rerun).
        self.impairments = checker.Impairments()
        self.wall_minus_uptime = time.time() - uptime()
        #: Every node process's log, restarts included.
        self.node_logs: list[Path] = []

    # -- timeline ----------------------------------------------------------------------

    def note(self, fault: str, **details: Any) -> None:
        entry = {"t": round(time.monotonic() - self.began, 2), "fault": fault, **details}
        with self.lock:
            self.timeline.append(entry)

    # -- jobs --------------------------------------------------------------------------

    def add_jobs(self, client: SchedulerClient) -> None:
        path = str(self.records)
        common = {"misfire_grace_s": 2.0}
        jobs: list[dict[str, Any]] = []

        def callable_job(name: str, seconds: float = 0.0, fail_below: int = 0) -> dict[str, Any]:
            return {"name": name, "callable": "tests.soak.bodies:work",
                    "kwargs": {"path": path, "seconds": seconds, "fail_below": fail_below}}

        def shell_job(name: str, seconds: float = 0.0, fail_below: int = 0) -> dict[str, Any]:
            return {"name": name, "command": shell_command(path, seconds, fail_below)}

        for i in range(25):
            for kind, make in (("cb", callable_job), ("sh", shell_job)):
                name = f"{kind}-{i:02d}"
                jobs.append({**make(name), **common, "schedule": "* * * * * ?",
                             "recovery_policy": "rerun" if i % 2 == 0 else "skip",
                             "misfire_policy": "fire_once" if i % 3 else "skip"})
                self.checked.append(name)
        for i in range(8):
            jobs.append({**shell_job(f"long-sh-{i}", seconds=3 + i % 4), **common,
                         "schedule": "@every 2s", "recovery_policy": ("rerun", "skip")[i % 2]})
        for i in range(3):
            jobs.append({**callable_job(f"long-py-{i}", seconds=2), **common,
                         "schedule": "@every 3s", "recovery_policy": ("rerun", "skip")[i % 2]})
        for i in range(8):
            make = shell_job if i % 2 else callable_job
            name = f"retry-{i}"
            jobs.append({**make(name, fail_below=1), **common, "schedule": "@every 2s",
                         "max_attempts": 3, "retry_backoff_s": 0.2, "retry_max_backoff_s": 0.5})
            self.fail_below[name] = 1
        for i in range(2):
            name = f"kill-{i}"
            jobs.append({**shell_job(name, seconds=5), **common, "schedule": "@every 3s"})
            self.killable.add(name)
        for i in range(5):
            jobs.append({**callable_job(f"toggle-{i}"), **common, "schedule": "* * * * * ?"})
        client.add_jobs(jobs)

    # -- nodes -------------------------------------------------------------------------

    def start_node(self, slot: Slot) -> None:
        url = make_url(self.url).set(host="127.0.0.1", port=slot.proxy.port)
        options = {**NODE_OPTIONS, "state-dir": str(slot.state_dir)}
        slot.node = NodeProcess(url.render_as_string(hide_password=False), f"soak{slot.index}",
                                options=options, flags=slot.flags, env=slot.env)
        self.impairments.place[slot.node.pid] = slot.index
        self.node_logs.append(slot.node.log_path)
        self.note("node_started", node=slot.index, pid=slot.node.pid)

    def supervise(self) -> None:
        """Restart what dies (like systemd would), and learn each node's guard pid."""
        while not self.done.is_set():
            for slot in self.slots:
                node = slot.node
                if node is None:
                    continue
                code = node.proc.poll()
                if code is not None:
                    self.impairments.add(node.pid, uptime())
                    slot.exits.append((node.pid, code))
                    self.note("node_exited", node=slot.index, pid=node.pid, code=code)
                    node.stop()
                    slot.node = None
                    if not self.done.is_set():
                        time.sleep(0.3)
                        self.start_node(slot)
                    continue
                slot.guards.update(guards_of(node.pid))
            self.done.wait(0.2)

    # -- nemesis -----------------------------------------------------------------------

    def nemesis(self) -> None:
        faults = [
            (self.kill_node, 3), (self.freeze_node, 4), (self.kill_guard, 1),
            (self.freeze_guard, 1), (self.partition, 3), (self.db_restart, 1),
            (self.db_kill9, 2),
        ]
        actions = [f for f, w in faults for _ in range(w)]
        while not self.stop.wait(self.rng.uniform(1.5, 4.5)):
            self.pending_faults = [t for t in self.pending_faults if t.is_alive()]
            if len(self.pending_faults) >= 2:
                continue  # at most two faults at once (besides the clock)
            action = self.rng.choice(actions)
            slot = self.rng.choice(self.slots)
            duration = self.rng.random()  # each action picks its own from this
            thread = threading.Thread(target=self._safely, args=(action, slot, duration),
                                      daemon=True, name=f"fault-{action.__name__}")
            self.pending_faults.append(thread)
            thread.start()

    def _safely(self, action: Any, slot: Slot, pick: float) -> None:
        try:
            action(slot, pick)
        except Exception as error:  # noqa: BLE001 - a fault that could not be made is noted
            self.note("fault_error", action=action.__name__, error=repr(error))

    @staticmethod
    def _choose(values: list[float], pick: float) -> float:
        return values[min(len(values) - 1, int(pick * len(values)))]

    def _mark(self, slot: Slot | None) -> None:
        now = time.monotonic()
        if slot is None:
            self.db_faulted_at = now
        else:
            slot.faulted_at = now

    def kill_node(self, slot: Slot, pick: float) -> None:
        node = slot.node
        if node is None or slot.frozen:
            return
        self._mark(slot)
        self.note("sigkill_node", node=slot.index, pid=node.pid)
        self.impairments.add(node.pid, uptime())
        node.signal(signal.SIGKILL)

    def freeze_node(self, slot: Slot, pick: float) -> None:
        node = slot.node
        if node is None or slot.frozen:
            return
        seconds = self._choose(FREEZES, pick)
        slot.frozen = True
        self._mark(slot)
        self.note("sigstop_node", node=slot.index, pid=node.pid, seconds=seconds)
        began = uptime()
        node.signal(signal.SIGSTOP)
        time.sleep(seconds)
        node.signal(signal.SIGCONT)
        self.impairments.add(node.pid, began, uptime())
        slot.frozen = False
        self._mark(slot)

    def kill_guard(self, slot: Slot, pick: float) -> None:
        node = slot.node
        if node is None or slot.frozen:
            return
        for pid in guards_of(node.pid):
            self._mark(slot)
            self.note("sigkill_guard", node=slot.index, guard=pid)
            os.kill(pid, signal.SIGKILL)

    def freeze_guard(self, slot: Slot, pick: float) -> None:
        node = slot.node
        if node is None:
            return
        seconds = self._choose(FREEZES, pick)
        for pid in guards_of(node.pid):
            self._mark(slot)
            self.note("sigstop_guard", node=slot.index, guard=pid, seconds=seconds)
            os.kill(pid, signal.SIGSTOP)
            time.sleep(seconds)
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self._mark(slot)

    def partition(self, slot: Slot, pick: float) -> None:
        seconds = self._choose(PARTITIONS, pick)
        mode = "reject" if pick * 1000 % 2 < 1 else "blackhole"
        self._mark(slot)
        self.note(f"partition_{mode}", node=slot.index, seconds=seconds)
        began = uptime()
        getattr(slot.proxy, mode)()
        time.sleep(seconds)
        slot.proxy.forward()
        self.impairments.add(("place", slot.index), began, uptime() + 0.5)  # + reconnecting
        self._mark(slot)

    def _db_outage(self, how: str, pick: float) -> None:
        with self.lock:
            if self.db_down:
                return
            self.db_down = True
        seconds = self._choose(OUTAGES, pick)
        self._mark(None)
        self.note(f"db_{how}", seconds=seconds)
        began = uptime()
        try:
            if how == "kill9":
                self.server.kill9()
            else:
                self.server.stop()
            time.sleep(seconds)
        finally:
            self.server.start()
            self.impairments.add("db", began, uptime() + 0.5)  # + reconnecting
            self._mark(None)
            with self.lock:
                self.db_down = False
            self.note("db_up")

    def db_restart(self, slot: Slot, pick: float) -> None:
        self._db_outage("restart", pick)

    def db_kill9(self, slot: Slot, pick: float) -> None:
        self._db_outage("kill9", pick)

    # -- racing writes -----------------------------------------------------------------

    def writer(self) -> None:
        """API/library writes racing the faults: pause, resume, trigger, update, kill,
        bursts of one-shot jobs, jobs added and deleted again."""
        client = SchedulerClient(self.url)
        rng = random.Random(self.seed + 1)
        burst = 0
        next_burst = time.monotonic() + 5
        scratch: list[str] = []
        try:
            while not self.stop.wait(rng.uniform(0.2, 0.8)):
                op = rng.choice(["pause", "resume", "trigger", "update", "kill", "scratch"])
                try:
                    if time.monotonic() >= next_burst:
                        op = "burst"
                        next_burst = time.monotonic() + rng.uniform(8, 15)
                        at = client.now() + timedelta(seconds=2)
                        names = [f"burst-{burst}-{i:02d}" for i in range(20)]
                        burst += 1
                        client.add_jobs([
                            {"name": n, "schedule": f"@at {at.isoformat()}",
                             "callable": "tests.soak.bodies:work",
                             "kwargs": {"path": str(self.records)},
                             "misfire_grace_s": 30.0}
                            for n in names])
                        self.bursts.extend(names)
                    elif op == "pause":
                        client.pause_job(f"toggle-{rng.randrange(5)}")
                    elif op == "resume":
                        client.resume_job(f"toggle-{rng.randrange(5)}")
                    elif op == "trigger":
                        client.trigger_job(f"toggle-{rng.randrange(5)}")
                    elif op == "update":
                        client.update_job(f"toggle-{rng.randrange(5)}",
                                          {"description": f"touched {rng.random():.6f}"})
                    elif op == "kill":
                        client.kill_job(f"kill-{rng.randrange(2)}")
                    elif op == "scratch":
                        if scratch and rng.random() < 0.5:
                            client.delete_job(scratch.pop(0))
                        else:
                            name = f"scratch-{rng.randrange(10**9)}"
                            client.add_job({"name": name, "schedule": "* * * * * ?",
                                            "callable": "tests.soak.bodies:work",
                                            "kwargs": {"path": str(self.records)}})
                            scratch.append(name)
                    self.writer_stats[f"{op}_ok"] += 1
                except Exception as error:  # noqa: BLE001 - refused or db down: counted
                    self.writer_stats[f"{op}_{type(error).__name__}"] += 1
        finally:
            client.close()

    # -- observers ---------------------------------------------------------------------

    def watch_executions(self) -> None:
        """Append ``gone RUN_ID PID`` when an open execution's process has died."""
        offset = 0
        buffer = ""
        open_: dict[tuple[int, int], int] = {}
        while True:
            with self.records.open() as fh:
                fh.seek(offset)
                chunk = fh.read()
                offset = fh.tell()
            buffer += chunk
            lines, _, buffer = buffer.rpartition("\n")
            for line in lines.splitlines():
                parts = line.split()
                if parts and parts[0] == "start" and len(parts) == 8:
                    open_[(int(parts[4]), int(parts[5]))] = int(parts[5])
                elif parts and parts[0] == "end" and len(parts) == 8:
                    open_.pop((int(parts[4]), int(parts[5])), None)
                elif parts and parts[0] == "gone":
                    open_.pop((int(parts[1]), int(parts[2])), None)
            for (run_id, pid) in list(open_):
                if not pid_alive(pid):
                    append(str(self.records), f"gone {run_id} {pid} {uptime()}")
            if self.done.is_set() and not open_:
                return
            time.sleep(0.05)

    def watch_silence(self, db: Db) -> None:
        """A node that is alive, reachable, not frozen and not faulted for a long while
        must hold a live session; otherwise it is silent (hung without exiting)."""
        patience = 3 * SESSION_TIMEOUT + 15
        reported: set[int] = set()
        while not self.done.wait(0.2):
            if self.db_down:
                continue
            try:
                now = db_now(db)
                sessions = db.rows("SELECT id, pid, heartbeat_at FROM ql_sessions")
            except Exception:  # noqa: BLE001 - the database is going down
                continue
            for r in sessions:  # when a peer may expire each session (the checker's)
                beat = r.heartbeat_at.replace(tzinfo=UTC).timestamp() - self.wall_minus_uptime
                self.impairments.expiry[r.id] = max(
                    self.impairments.expiry.get(r.id, 0.0), beat + SESSION_TIMEOUT)
            cutoff = now - timedelta(seconds=SESSION_TIMEOUT)
            live = {r.pid for r in sessions if r.heartbeat_at.replace(tzinfo=UTC) >= cutoff}
            for slot in self.slots:
                node = slot.node
                if node is None or slot.frozen or node.proc.poll() is not None:
                    continue
                quiet_since = max(slot.faulted_at, self.db_faulted_at, node.started)
                if time.monotonic() - quiet_since < patience or node.pid in live:
                    continue
                if node.pid not in reported:
                    reported.add(node.pid)
                    self.silent.append(f"node {slot.index} pid {node.pid} has no live session "
                                       f"{time.monotonic() - quiet_since:.0f}s after any fault")

    # -- the run -----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        with private_database() as (server, url):
            self.server, self.url = server, url
            return self._run()

    def _run(self) -> dict[str, Any]:
        client = SchedulerClient(self.url)
        db = Db(self.url)
        result = checker.Result()
        self.add_jobs(client)
        for i in range(3):
            env = {}
            if i == 2:
                env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": SKEW,
                       "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
            state = self.dir / f"state{i}"
            state.mkdir(exist_ok=True)
            slot = Slot(i, TcpProxy("127.0.0.1", self.server.port),
                        ["--rejoin"] if i == 1 else [], env, state)
            self.slots.append(slot)
            self.start_node(slot)
        threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
                   for f in (self.supervise, self.watch_executions)]
        silence = threading.Thread(target=self.watch_silence, args=(db,), daemon=True)
        for t in [*threads, silence]:
            t.start()
        try:
            wait_for(lambda: not _behind(db, self.checked, None), 120,
                     "every job ran once before the chaos")
            chaos_from = db_now(db)
            self.note("chaos_begins")
            nemesis = threading.Thread(target=self.nemesis, daemon=True)
            writer = threading.Thread(target=self.writer, daemon=True)
            nemesis.start()
            writer.start()
            self.stop.wait(self.seconds)
            self.stop.set()
            nemesis.join()
            writer.join(60)
            for fault in self.pending_faults:
                fault.join(60)
            for slot in self.slots:  # heal what is left
                slot.proxy.forward()
                if slot.node is not None:
                    slot.node.signal(signal.SIGCONT)
            healed = db_now(db)
            self.note("healed")
            after = healed + timedelta(seconds=2 * SESSION_TIMEOUT)
            behind = wait_for(lambda: _behind(db, self.checked, after), 120,
                              "every job runs again after the faults", fail=False,
                              until_falsy=True)
            if behind:
                for name in behind:
                    result.add("stuck", f"{name} did not run again after the faults healed")
            wait_for(lambda: not _unsettled(db, self.bursts), 60, "bursts settled", fail=False)
            for line in _stuck(db):
                result.add("stuck", line)
            for slot in self.slots:  # stop the nodes the way an operator would
                if slot.node is not None:
                    slot.node.signal(signal.SIGTERM)
            self.done.set()
            for slot in self.slots:
                node = slot.node
                if node is not None:
                    try:
                        code = node.wait(90)
                    except Exception:  # noqa: BLE001
                        code = None
                    slot.exits.append((node.pid, code if code is not None else -999))
                    if code != 0:
                        result.add("stuck", f"node {slot.index} did not stop cleanly: {code}")
                    node.stop()
            for t in threads:
                t.join(30)
            # Leftovers: any run process or guard still alive shortly after.
            executions = checker.parse_records(self.records.read_text().splitlines())
            ours = {(e.job, str(e.run_id)) for e in executions}
            guards = set().union(*(s.guards for s in self.slots))
            leftover = wait_for(lambda: _leftovers(ours, guards) or None,
                                15, "", fail=False, until_falsy=True)
            for pid in leftover or []:
                result.add("leftovers", f"process {pid} outlived its run/node")
            # The checks.
            runs = _runs(db, self.wall_minus_uptime)
            checker.check_executions(result, executions, runs, self.impairments)
            checker.check_outcomes(result, runs, fail_below=self.fail_below,
                                   killable=self.killable)
            checker.check_accounted(result, runs, jobs=self.checked,
                                    start=chaos_from, end=healed)
            bursts_ran = {r.job for r in runs.values()
                          if r.job in set(self.bursts) and r.status != "running"}
            for name in self.bursts:
                if name not in bursts_ran:
                    result.add("unaccounted", f"burst job {name}: no final run row")
            for line in self.silent:
                result.add("silent", line)
            checker.check_logs(result, {
                str(path): path.read_text(errors="replace") for path in self.node_logs
                if path.exists()})
            result.info["burst_jobs"] = len(self.bursts)
            result.info["node_exits"] = sum(len(s.exits) for s in self.slots)
            result.info["runs"] = len(runs)
            statuses = Counter(r.status for r in runs.values())
            summary = {
                "seed": self.seed, "seconds": self.seconds, **result.as_dict(),
                "statuses": dict(statuses), "writes": dict(self.writer_stats),
                "faults": dict(Counter(e["fault"] for e in self.timeline)),
                "dir": str(self.dir),
            }
            (self.dir / "timeline.json").write_text(json.dumps(self.timeline, indent=1))
            (self.dir / "summary.json").write_text(json.dumps(summary, indent=1))
            summary["timeline"] = self.timeline
            return summary
        finally:
            self.stop.set()
            self.done.set()
            for slot in self.slots:
                if slot.node is not None:
                    slot.node.signal(signal.SIGCONT)
                    slot.node.stop()
                slot.proxy.close()
            client.close()
            db.close()


def _leftovers(runs: set[tuple[str, str]], guards: set[int]) -> list[int]:
    """Live processes of this soak's runs (a job's environment names its run: pids are
    reused over a long soak, so a pid alone proves nothing) and of its guards."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not pid_alive(int(entry)):
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        env = dict(item.decode(errors="replace").partition("=")[::2] for item in environ)
        if (env.get("QUARTZLITE_JOB"), env.get("QUARTZLITE_RUN_ID")) in runs or (
            int(entry) in guards and b"quartzlite.node.guard" in cmdline
        ):
            found.append(int(entry))
    return found


def guards_of(pid: int) -> list[int]:
    """The guard processes a node started (children running quartzlite.node.guard)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if b"quartzlite.node.guard" in cmdline:
            found.append(int(entry))
    return found


def wait_for(predicate: Any, timeout: float, message: str, *, fail: bool = True,
             until_falsy: bool = False) -> Any:
    """Poll until ``predicate()`` is falsy (``until_falsy``) or truthy; with ``fail``
    false, return the last value instead of raising at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception as error:  # noqa: BLE001 - the database may be restarting
            value = error if until_falsy else None
        if (not value) if until_falsy else bool(value):
            return value
        if time.monotonic() >= deadline:
            if fail:
                raise AssertionError(f"timed out after {timeout}s: {message}")
            return value
        time.sleep(0.25)


def _behind(db: Db, names: list[str], after: datetime | None) -> list[str]:
    """The jobs without a succeeded run (with a slot at or after ``after``)."""
    sql = "SELECT DISTINCT job_name FROM ql_runs WHERE status = 'succeeded'"
    params: dict[str, Any] = {}
    if after is not None:
        sql += " AND slot_at >= :t"
        params["t"] = after.replace(tzinfo=None)
    done = {r.job_name for r in db.rows(sql, **params)}
    return [n for n in names if n not in done]


def _unsettled(db: Db, names: list[str]) -> list[str]:
    if not names:
        return []
    rows = db.rows("SELECT DISTINCT job_name FROM ql_runs WHERE status <> 'running'")
    final = {r.job_name for r in rows}
    return [n for n in names if n not in final]


def _stuck(db: Db) -> list[str]:
    lines = []
    for r in db.rows(
        "SELECT j.name, j.state FROM ql_jobs j LEFT JOIN ql_sessions s "
        "ON s.id = j.owner_session WHERE j.state <> 'idle' AND s.id IS NULL AND j.deleted = 0"
    ):
        lines.append(f"job {r.name} {r.state} with no live owner")
    for r in db.rows(
        "SELECT r.id, r.job_name FROM ql_runs r LEFT JOIN ql_sessions s ON s.id = r.session_id "
        "WHERE r.status = 'running' AND s.id IS NULL"
    ):
        lines.append(f"run {r.id} ({r.job_name}) running with no live owner")
    return lines


def _runs(db: Db, wall_minus_uptime: float) -> dict[int, checker.RunRow]:
    rows = db.rows("SELECT id, job_name, slot_at, attempt, status, started_at, ended_at, "
                   "exit_code, error, session_id FROM ql_runs")
    return {
        r.id: checker.RunRow(
            r.id, r.job_name, checker.slot_key(r.slot_at), r.attempt, r.status,
            r.started_at is not None, r.exit_code, r.error,
            None if r.ended_at is None
            else r.ended_at.replace(tzinfo=UTC).timestamp() - wall_minus_uptime,
            r.session_id)
        for r in rows
    }
