"""Issue 3's acceptance: real `quartzlite node` processes against the real MySQL.

Every test waits on conditions with deadlines; nothing sleeps and then asserts.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from quartzlite.client import SchedulerClient
from tests.cluster.harness import ROOT, Db, nodes, pid_alive, wait_until
from tests.cluster.invariants import executions, whole_seconds
from tests.cluster.proxy import TcpProxy

pytestmark = pytest.mark.cluster


def db_now(db: Db) -> datetime:
    return db.scalar("SELECT NOW(6)").replace(tzinfo=UTC)


def recorder(name: str, path: Path, schedule: str = "* * * * * ?", **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "schedule": schedule, "callable": "tests.cluster.jobs:record",
        "kwargs": {"path": str(path)}, **extra,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def run_to_the_end(db_url: str, db: Db, *, capacity: int, runs: int, log: Path
                   ) -> list[tuple[float, str, str]]:
    """Start one node of ``capacity``, wait until ``runs`` runs succeeded, stop it; the
    ``start|end <job> <epoch>`` lines its jobs wrote to ``log``, in time order."""
    with nodes(db_url) as start:
        node = start("n", options={"capacity": str(capacity)})
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status = 'succeeded'") == runs,
                   timeout=90, message=f"all {runs} runs recorded")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    return sorted((float(stamp), kind, name)
                  for kind, name, stamp in (line.split() for line in log.read_text().splitlines()))


def most_at_once(events: list[tuple[float, str, str]]) -> int:
    """The most runs between their "start" and "end" at once, from sorted events."""
    running, most = 0, 0
    for _stamp, kind, _name in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    return most


# (a) ---------------------------------------------------------------------------------


#: Seconds of every-second slots the three nodes are checked over (3,000 runs at 30 s
#: took half a minute of `make test`; 20 s still needs every node).
WINDOW_S = 20


def test_three_nodes_run_every_slot_exactly_once(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    client.add_jobs([recorder(f"tick-{i:03d}", log) for i in range(100)])
    db = Db(db_url)
    with nodes(db_url) as start:
        # A node holds as much due work ahead as its prefetch allows; 40 each means
        # the 100 jobs need all three nodes.
        started = [start(f"n{i}", options={"prefetch": "40"}) for i in range(3)]
        wait_until(lambda: db.live_sessions() == 3, timeout=60, message="3 sessions")
        t0 = db_now(db).replace(microsecond=0) + timedelta(seconds=3)
        t1 = t0 + timedelta(seconds=WINDOW_S)
        wait_until(
            lambda: db.scalar(
                "SELECT COUNT(DISTINCT job_id) FROM ql_runs WHERE planned_at >= :t AND status <> 'running'",
                t=t1.replace(tzinfo=None),
            ) == 100,
            timeout=120, interval=0.5, message=f"every job past the {WINDOW_S} s window",
        )
        for node in started:
            node.signal(signal.SIGTERM)
        for node in started:
            assert node.wait(60) == 0, node.log()[-3000:]
    rows = db.rows(
        "SELECT job_name, planned_at, status, started_at, node FROM ql_runs "
        "WHERE planned_at >= :a AND planned_at < :b",
        a=t0.replace(tzinfo=None), b=t1.replace(tzinfo=None),
    )
    per_job = Counter(r.job_name for r in rows)
    assert len(per_job) == 100
    assert set(per_job.values()) == {WINDOW_S}, per_job.most_common(3)
    assert {r.status for r in rows} == {"succeeded"}
    ran = executions(log)
    window = [(j, s) for j in per_job for s in whole_seconds(t0, t1)]
    assert all(ran[key] == 1 for key in window), [k for k in window if ran[k] != 1][:5]
    assert len({r.node for r in rows}) == 3, "all three nodes took part"
    lateness = [(r.started_at - r.planned_at).total_seconds() for r in rows]
    assert min(lateness) >= 0, "a run started before its planned instant"
    report = {
        "runs": len(rows), "p50_ms": percentile(lateness, 0.5) * 1000,
        "p99_ms": percentile(lateness, 0.99) * 1000, "max_ms": max(lateness) * 1000,
    }
    print(f"\n(a) 3 nodes x 100 every-second jobs x {WINDOW_S} s lateness: {json.dumps(report)}")
    db.close()


def test_capacity_bounds_the_runs_executing_at_once_the_rest_wait_their_turn(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    """capacity = runs executing at once: 12 shell jobs due at one instant on a node of
    capacity 2 never run more than 2 at a time, all run, highest priority first, and
    each run's started_at says when it really started (after waiting for a place)."""
    log = tmp_path / "events.log"
    db = Db(db_url)
    at = (db_now(db) + timedelta(seconds=6)).replace(microsecond=0)
    body = (f'echo "start $QUARTZLITE_JOB $EPOCHREALTIME" >> {log}; sleep 0.3; '
            f'echo "end $QUARTZLITE_JOB $EPOCHREALTIME" >> {log}')
    client.add_jobs([{"name": f"p{i:02d}", "schedule": f"@at {at.isoformat()}", "command": body,
                      "priority": i} for i in range(12)])
    events = run_to_the_end(db_url, db, capacity=2, runs=12, log=log)
    most = most_at_once(events)
    assert most == 2, f"at most capacity (2) at once, and both places used: {most}"
    # Highest priority first: handed to a worker in that order (two handed over together
    # may reach bash in either order, so the node's started_at says it).
    order = [f"p{i:02d}" for i in reversed(range(12))]
    rows = {r.job_name: r for r in db.rows("SELECT job_name, planned_at, started_at FROM ql_runs")}
    starts = [rows[job].started_at for job in order]
    assert starts == sorted(starts), "highest priority first"
    for rank, job in enumerate(order):
        waited = (rows[job].started_at - rows[job].planned_at).total_seconds()
        # Run k starts after k // 2 runs of at least 0.3 s each ended before it.
        assert waited >= 0.3 * (rank // 2) - 0.01, (job, rank, waited)
    db.close()


def test_waiting_python_runs_fill_every_place_and_a_computing_run_holds_none_back(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    """Short runs go one after the other on few workers; more workers start while the
    runs holding places wait (here: sleep). On a node of capacity 4, 8 sleeping Python
    runs due together still run 4 at once, and one that computes for 1.5 s holds back
    none of those behind it."""
    log = tmp_path / "events.log"
    db = Db(db_url)
    at = (db_now(db) + timedelta(seconds=6)).replace(microsecond=0)

    def job(name: str, priority: int, **kwargs: Any) -> dict[str, Any]:
        return {"name": name, "schedule": f"@at {at.isoformat()}", "priority": priority,
                "callable": "tests.cluster.jobs:span", "kwargs": {"path": str(log), **kwargs}}

    client.add_jobs([job("spin", 9, seconds=1.5, spin=True)]
                    + [job(f"nap{i}", 5 - i // 4, seconds=0.4) for i in range(8)])
    events = run_to_the_end(db_url, db, capacity=4, runs=9, log=log)
    most = most_at_once(events)
    assert most == 4, f"at most capacity (4) at once, and every place used: {most}"
    spin_end = next(stamp for stamp, kind, name in events if (kind, name) == ("end", "spin"))
    first = [name for stamp, kind, name in events if kind == "start" and name != "spin"][:3]
    assert all(stamp < spin_end for stamp, kind, name in events if kind == "start" and name in first), (
        "the three runs after the computing one started while it computed", events)
    db.close()


# (b) ---------------------------------------------------------------------------------


def test_sigkill_node_work_moves_to_survivors(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    specs = []
    for i in range(30):
        policy = "skip" if i % 2 else "fire_once"
        specs.append(recorder(f"k-{i:02d}", log, misfire_grace_s=1.0, misfire_policy=policy,
                              recovery_policy="skip"))
    client.add_jobs(specs)
    db = Db(db_url)
    with nodes(db_url) as start:
        victim = start("victim", options={"capacity": "100"})
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="victim session")
        # Let the victim own the work first, then add survivors.
        wait_until(
            lambda: db.scalar("SELECT COUNT(DISTINCT job_id) FROM ql_runs WHERE status='succeeded'") == 30,
            timeout=60, message="victim runs every job",
        )
        survivors = [start(f"s{i}", options={"capacity": "100"}) for i in range(2)]
        wait_until(lambda: db.live_sessions() == 3, timeout=60, message="3 sessions")
        t0 = db_now(db)

        def busiest() -> tuple[str, int, set[str]] | None:
            """The session owning the most jobs, its pid and their names (None at a
            moment when every job is between two runs: a loaded machine finds some)."""
            top = db.rows(
                "SELECT s.id, s.pid FROM ql_jobs j JOIN ql_sessions s ON s.id = j.owner_session "
                "GROUP BY s.id, s.pid ORDER BY COUNT(*) DESC LIMIT 1"
            )
            if not top:
                return None
            names = {r[0] for r in db.rows("SELECT name FROM ql_jobs WHERE owner_session=:s",
                                           s=top[0].id)}
            return (top[0].id, int(top[0].pid), names) if names else None

        victim_session, victim_pid, owned = wait_until(busiest, timeout=30,
                                                       message="a node owning jobs")
        # The busiest node may be one that joined later: it is the one killed, and the
        # other two are the survivors.
        target = next(n for n in (victim, *survivors) if n.pid == victim_pid)
        survivors = [n for n in (victim, *survivors) if n is not target]
        target.signal(signal.SIGKILL)
        killed_at = db_now(db)
        assert owned, "the victim owned jobs when it died"
        wait_until(lambda: victim_session not in db.session_ids(), timeout=30,
                   message="the dead session expired")
        # Every job the victim held runs again on a survivor.
        def recovered() -> bool:
            found = db.rows(
                "SELECT job_name, MIN(started_at) AS first FROM ql_runs WHERE started_at > :k "
                "AND session_id <> :s AND status = 'succeeded' GROUP BY job_name",
                k=killed_at.replace(tzinfo=None), s=victim_session,
            )
            return {r.job_name for r in found} >= owned and found
        first_runs = wait_until(recovered, timeout=60, message="orphaned jobs run again")
        recovery_gap = max(
            (utc(r.first) - killed_at).total_seconds() for r in first_runs if r.job_name in owned
        )
        settle = db_now(db) + timedelta(seconds=3)
        wait_until(
            lambda: db.scalar(
                "SELECT COUNT(DISTINCT job_id) FROM ql_runs WHERE planned_at >= :t AND status <> 'running'",
                t=settle.replace(tzinfo=None),
            ) == 30,
            timeout=60, message="cluster settled",
        )
        t1 = settle - timedelta(seconds=2)
        for node in survivors:
            node.signal(signal.SIGTERM)
        for node in survivors:
            assert node.wait(60) == 0, node.log()[-3000:]
    print(f"\n(b) recovery gap after SIGKILL: {recovery_gap:.2f}s")
    assert recovery_gap < 4 + 5, "recovered within session_timeout plus a few seconds"
    rows = db.rows(
        "SELECT job_name, planned_at, slot_at, status FROM ql_runs WHERE slot_at >= :a AND slot_at < :b",
        a=t0.replace(tzinfo=None), b=t1.replace(tzinfo=None),
    )
    by_slot = Counter((r.job_name, utc(r.slot_at)) for r in rows)
    expected = [(f"k-{i:02d}", s) for i in range(30) for s in whole_seconds(t0, t1)]
    missing = [k for k in expected if by_slot[k] == 0]
    assert not missing, f"slots neither run nor recorded: {missing[:5]}"
    assert max(by_slot.values()) == 1, "a slot has two rows"
    statuses = Counter(r.status for r in rows)
    assert statuses["succeeded"] > 0
    assert statuses["missed"] > 0, "slots passed while the job was stranded are recorded missed"
    ran = executions(log)
    assert max(ran.values()) == 1, [k for k, v in ran.items() if v > 1][:5]
    stuck = db.scalar(
        "SELECT COUNT(*) FROM ql_jobs j LEFT JOIN ql_sessions s ON s.id = j.owner_session "
        "WHERE j.state <> 'idle' AND s.id IS NULL"
    )
    assert stuck == 0
    db.close()


# (c) ---------------------------------------------------------------------------------


def test_sigterm_hands_prepared_jobs_to_peers_at_once(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    db = Db(db_url)
    at = (db_now(db) + timedelta(seconds=12)).isoformat()
    client.add_jobs([recorder(f"once-{i}", log, schedule=f"@at {at}") for i in range(5)])
    with nodes(db_url) as start:
        first = start("first", options={"look-ahead-s": "60"})
        wait_until(
            lambda: db.scalar("SELECT COUNT(*) FROM ql_jobs WHERE state='prepared'") == 5,
            timeout=30, message="first node prepared all five",
        )
        first_session = db.scalar("SELECT DISTINCT owner_session FROM ql_jobs")
        second = start("second")
        wait_until(lambda: db.live_sessions() == 2, timeout=30, message="second node joined")
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.log()[-3000:]
        assert "handed back 5 prepared job(s)" in first.log()
        assert first_session not in db.session_ids(), "a stopped node deletes its session"
        wait_until(
            lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status='succeeded'") == 5,
            timeout=60, message="all five ran",
        )
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
    second_session_runs = db.rows("SELECT session_id, started_at, planned_at FROM ql_runs")
    assert {r.session_id for r in second_session_runs} != {first_session}
    assert "expired" not in second.log(), "taken over without waiting for expiry"
    assert sum(executions(log).values()) == 5
    db.close()


# (d) ---------------------------------------------------------------------------------


def test_timeout_kills_the_whole_process_tree(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    command = (
        f"echo $$ >> {pids}; "
        f"( bash -c 'sleep 300 & echo $! >> {pids}; wait' & echo $! >> {pids}; wait ) & "
        f"sleep 300 & echo $! >> {pids}; wait"
    )
    client.add_job({"name": "tree", "schedule": "0 0 1 1 *", "command": command, "timeout_s": 1.5})
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("n")
        client.trigger_job("tree")
        wait_until(lambda: pids.exists() and len(pids.read_text().split()) >= 4, timeout=30,
                   message="the tree started")
        tree = [int(p) for p in pids.read_text().split()]
        wait_until(lambda: db.scalar("SELECT status FROM ql_runs WHERE job_name='tree'") == "timed_out",
                   timeout=30, message="run recorded as timed_out")
        wait_until(lambda: not any(pid_alive(p) for p in tree), timeout=10,
                   message="every process of the tree is gone")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    run = db.rows("SELECT error FROM ql_runs WHERE job_name='tree'")[0]
    assert "timed out after 1.5s" in run.error
    db.close()


# (e) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["library", "cli"])
def test_kill_a_running_job(db_url: str, client: SchedulerClient, tmp_path: Path, how: str) -> None:
    marker = tmp_path / "started"
    client.add_job({"name": "long", "schedule": "0 0 1 1 *",
                    "command": f"touch {marker}; sleep 300"})
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("n")
        client.trigger_job("long")
        wait_until(marker.exists, timeout=30, message="job started")
        wait_until(lambda: client.get_job("long").state.value == "executing", timeout=10)
        if how == "library":
            client.kill_job("long")
        else:
            done = subprocess.run(
                [sys.executable, "-m", "quartzlite", "--database-url", db_url, "job", "kill", "long"],
                capture_output=True, text=True, cwd=ROOT, timeout=60,
            )
            assert done.returncode == 0, done.stderr
            assert "kill requested" in done.stdout
        wait_until(lambda: db.scalar("SELECT status FROM ql_runs WHERE job_name='long'") == "killed",
                   timeout=15, message="run recorded as killed")
        assert client.get_job("long").state.value == "idle"
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    db.close()


# (f) ---------------------------------------------------------------------------------


def test_failed_runs_are_retried_with_backoff(db_url: str, client: SchedulerClient) -> None:
    client.add_job({"name": "flaky", "schedule": "0 0 1 1 *", "command": "echo boom; exit 3",
                    "max_attempts": 3, "retry_backoff_s": 1.0, "retry_max_backoff_s": 10})
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("n")
        client.trigger_job("flaky")
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE job_name='flaky' AND status='failed'") == 3,
                   timeout=60, message="three failed attempts")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    runs = db.rows("SELECT attempt, slot_at, planned_at, ended_at, exit_code, output FROM ql_runs "
                   "WHERE job_name='flaky' ORDER BY attempt")
    assert [r.attempt for r in runs] == [1, 2, 3]
    assert len({r.slot_at for r in runs}) == 1, "retries belong to the same slot"
    assert all(r.exit_code == 3 and "boom" in r.output for r in runs)
    # Equal jitter: attempt n+1 waits between half and all of backoff * 2**(n-1).
    gap1 = (runs[1].planned_at - runs[0].ended_at).total_seconds()
    gap2 = (runs[2].planned_at - runs[1].ended_at).total_seconds()
    assert 0.5 - 0.05 <= gap1 <= 1.0 + 0.2
    assert 1.0 - 0.05 <= gap2 <= 2.0 + 0.2
    job = client.get_job("flaky")
    assert job.next_attempt == 1
    assert job.next_fire_at is not None
    assert job.next_fire_at.year > 2026
    db.close()


# (g) ---------------------------------------------------------------------------------


def test_node_cut_off_from_mysql_fences_before_its_session_expires(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    url = make_url(db_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 3306)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    child = tmp_path / "child"
    client.add_job({"name": "cut", "schedule": "0 0 1 1 *", "command": f"sleep 300 & echo $! > {child}; wait",
                    "recovery_policy": "skip"})
    db = Db(db_url)
    try:
        with nodes(proxied) as start_cut, nodes(db_url) as start_peer:
            cut = start_cut("cut")
            wait_until(lambda: db.live_sessions() == 1, timeout=30)
            cut_session = db.session_ids()[0]
            client.trigger_job("cut")
            wait_until(lambda: child.exists() and child.read_text().strip(), timeout=30,
                       message="the job's child runs")
            pid = int(child.read_text())
            peer = start_peer("peer")
            wait_until(lambda: db.live_sessions() == 2, timeout=30)
            proxy.blackhole()
            # The child must be gone while the cut node's session is still unexpired.
            def child_gone_at() -> datetime | None:
                return None if pid_alive(pid) else db_now(db)
            gone = wait_until(child_gone_at, timeout=30, interval=0.05, message="child killed")
            heartbeat = db.scalar("SELECT heartbeat_at FROM ql_sessions WHERE id=:s", s=cut_session)
            assert heartbeat is not None, "the session expired before the node fenced"
            expires = utc(heartbeat) + timedelta(seconds=4)
            assert gone < expires, f"child died at {gone}, session expires at {expires}"
            assert cut.wait(30) == 3, cut.log()[-3000:]
            assert "FENCED" in cut.log()
            # The peer then expires the session and records the run abandoned.
            wait_until(lambda: db.scalar("SELECT status FROM ql_runs WHERE job_name='cut'") == "abandoned",
                       timeout=30, message="peer recovered the run")
            assert client.get_job("cut").state.value == "idle"
            peer.signal(signal.SIGTERM)
            assert peer.wait(30) == 0
    finally:
        proxy.close()
        db.close()


# (h) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["pause", "delete"])
def test_pause_and_delete_of_a_prepared_job_are_honoured(
    db_url: str, client: SchedulerClient, tmp_path: Path, action: str
) -> None:
    log = tmp_path / "exec.log"
    db = Db(db_url)
    at = db_now(db) + timedelta(seconds=8)
    client.add_job(recorder("target", log, schedule=f"@at {at.isoformat()}"))
    # A sentinel due just after: once it ran, the target's instant has passed too.
    client.add_job(recorder("sentinel", log, schedule=f"@at {(at + timedelta(seconds=1)).isoformat()}"))
    with nodes(db_url) as start:
        node = start("n", options={"look-ahead-s": "30"})
        wait_until(lambda: client.get_job("target").state.value == "prepared", timeout=30,
                   message="target prepared")
        if action == "pause":
            job = client.pause_job("target")
            assert job.state.value == "idle"
            assert job.owner_session is None
        else:
            client.delete_job("target")
        wait_until(lambda: any(k[0] == "sentinel" for k in executions(log)), timeout=60,
                   message="sentinel ran")
        assert not any(k[0] == "target" for k in executions(log))
        assert db.scalar("SELECT COUNT(*) FROM ql_runs WHERE job_name='target'") == 0
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    db.close()


def children_running(parent: int, text: str) -> list[int]:
    """Processes whose parent is ``parent`` and whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and text in cmdline:
            found.append(int(entry.name))
    return found


def test_runs_fired_ahead_start_at_their_instant_unless_stopped_while_waiting(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    marker = tmp_path / "shell-started"
    db = Db(db_url)
    at = db_now(db) + timedelta(seconds=15)
    for name in ("on-time", "killed-python", "paused", "deleted"):
        client.add_job(recorder(name, log, schedule=f"@at {at.isoformat()}"))
    client.add_job({"name": "killed-shell", "schedule": f"@at {at.isoformat()}",
                    "command": f"touch {marker}"})
    client.add_job(recorder("sentinel", log, schedule=f"@at {(at + timedelta(seconds=1)).isoformat()}"))
    planned = at.replace(tzinfo=None)
    with nodes(db_url) as start:
        node = start("n", options={"look-ahead-s": "30", "fire-ahead-s": "30"})
        wait_until(
            lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE planned_at = :at AND status = 'running'",
                              at=planned) == 5,
            timeout=30, message="the five runs fired ahead of their instant",
        )
        assert db_now(db) < at, "fired ahead: this check needs the instant still to come"
        assert not executions(log), "nothing starts before its instant"
        assert not marker.exists(), "nothing starts before its instant"
        # The shell run's bash is started ahead, waiting at its gate (running nothing).
        wait_until(lambda: children_running(node.pid, str(marker)), timeout=30,
                   message="a bash started ahead for the shell run")
        waiting = children_running(node.pid, str(marker))
        client.kill_job("killed-python")
        client.kill_job("killed-shell")
        client.pause_job("paused")
        client.delete_job("deleted")
        wait_until(lambda: any(k[0] == "sentinel" for k in executions(log)), timeout=60,
                   message="sentinel ran (the instant has passed)")
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status = 'running'") == 0,
                   timeout=30, message="every run recorded")
        runs = {r.job_name: r for r in db.rows(
            "SELECT job_name, status, planned_at, started_at, error FROM ql_runs")}
        assert runs["on-time"].status == "succeeded"
        assert runs["on-time"].started_at >= runs["on-time"].planned_at, "not before its instant"
        expected = {"killed-python": "killed", "killed-shell": "killed",
                    "paused": "cancelled", "deleted": "cancelled"}
        for name, status in expected.items():
            assert runs[name].status == status, runs[name]
            assert runs[name].started_at is None, f"{name} never started"
        assert "before it started" in runs["killed-shell"].error
        assert "paused" in runs["paused"].error
        assert "deleted" in runs["deleted"].error
        assert {k[0] for k in executions(log)} == {"on-time", "sentinel"}
        assert not marker.exists()
        assert not any(pid_alive(pid) for pid in waiting), "the unused bash was ended"
        assert client.get_job("paused").state.value == "idle"
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    db.close()


def test_a_bash_started_ahead_exits_unrun_when_its_node_is_killed(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    db = Db(db_url)
    at = db_now(db) + timedelta(seconds=20)
    client.add_job({"name": "ahead", "schedule": f"@at {at.isoformat()}",
                    "command": f"touch {marker}", "recovery_policy": "skip"})
    with nodes(db_url) as start:
        node = start("n", options={"look-ahead-s": "30", "fire-ahead-s": "30"})
        wait_until(lambda: children_running(node.pid, str(marker)), timeout=30,
                   message="a bash started ahead for the fired run")
        waiting = children_running(node.pid, str(marker))
        assert db_now(db) < at, "this check needs the instant still to come"
        node.signal(signal.SIGKILL)
        node.wait(30)
        # Its gate closed with the node: it exits (reparented, reaped by init) unrun.
        wait_until(lambda: not any(pid_alive(pid) for pid in waiting), timeout=30,
                   message="the waiting bash exited")
    assert not marker.exists()
    db.close()


def test_resume_runs_a_paused_job_again(db_url: str, client: SchedulerClient, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    client.add_job(recorder("every", log, paused=True))
    with nodes(db_url) as start:
        node = start("n")
        resumed = client.resume_job("every")
        assert not resumed.spec.paused
        wait_until(lambda: any(k[0] == "every" and k[1] >= resumed.next_fire_at for k in executions(log)),
                   timeout=30, message="runs after resume")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0


# time (12) ------------------------------------------------------------------------------


def test_node_with_a_skewed_clock_fires_at_the_database_instant(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    db = Db(db_url)
    at = db_now(db) + timedelta(seconds=6)
    client.add_job(recorder("skewed", log, schedule=f"@at {at.isoformat()}"))
    with nodes(db_url) as start:
        node = start("n", options={"clock-skew-s": "-300"})
        wait_until(lambda: db.scalar("SELECT status FROM ql_runs WHERE job_name='skewed'") == "succeeded",
                   timeout=30, message="skewed node ran the job")
        started, planned = db.rows("SELECT started_at, planned_at FROM ql_runs WHERE job_name='skewed'")[0]
        assert started >= planned, "never before its instant"
        assert (started - planned).total_seconds() < 5, "not five minutes late"
        offset = db.scalar("SELECT clock_offset_ms FROM ql_sessions")
        assert 290_000 < offset < 310_000, offset
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0
    db.close()


# stop (9) --------------------------------------------------------------------------------


def test_a_second_signal_stops_at_once_and_kills_running_jobs(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    child = tmp_path / "child"
    client.add_job({"name": "slow", "schedule": "0 0 1 1 *",
                    "command": f"sleep 300 & echo $! > {child}; wait"})
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("n", options={"shutdown-grace-s": "300"})
        wait_until(lambda: db.live_sessions() == 1, timeout=30)
        client.trigger_job("slow")
        wait_until(lambda: child.exists() and child.read_text().strip(), timeout=30)
        pid = int(child.read_text())
        node.signal(signal.SIGTERM)
        wait_until(lambda: "stopping" in node.log(), timeout=10, message="graceful stop began")
        assert pid_alive(pid), "the first signal lets running jobs finish"
        node.signal(signal.SIGTERM)
        assert node.wait(15) == 4, node.log()[-3000:]
        wait_until(lambda: not pid_alive(pid), timeout=10, message="the child was killed")
    db.close()
