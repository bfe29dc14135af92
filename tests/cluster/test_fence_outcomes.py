"""Issue 10's runtime bugs, each shown with real node processes: a database outage past
fence_after must not rerun finished runs; a node whose guard dies, or that wakes up
after its guard killed its runs, fences; such kills are never recorded as failures;
no run row claims a start that did not happen."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quartzlite.client import SchedulerClient
from tests.cluster.harness import Db, NodeProcess, nodes, pid_alive, wait_until
from tests.cluster.invariants import FaultReport
from tests.cluster.mariadb import private_database
from tests.cluster.proxy import TcpProxy
from tests.cluster.spans import executions_per_slot, finished_then_rerun
from tests.cluster.test_faults import DEFAULTS, db_now, proxied, stop_all, target
from tests.soak.run import guards_of

pytestmark = pytest.mark.cluster


def guard_pid(node: NodeProcess) -> int:
    """The node's guard process (its child running quartzlite.node.guard)."""
    found = wait_until(lambda: guards_of(node.pid), timeout=30, message="the node's guard process")
    return found[0]


def sleeper(client: SchedulerClient, tmp_path: Path, tag: str, **extra: object) -> Path:
    child = tmp_path / "child"
    client.add_job({"name": "sleeper", "schedule": "0 0 1 1 *", "tags": [tag],
                    "command": f"sleep 300 & echo $! > {child}; wait", **extra})
    return child


def started_child(client: SchedulerClient, child: Path) -> int:
    client.trigger_job("sleeper")
    wait_until(lambda: child.exists() and child.read_text().strip(), timeout=30,
               message="the sleeper's child started")
    return int(child.read_text())


def no_false_history(db: Db) -> None:
    """No run row claims a start its node never made, nor a kill as a failure."""
    false_starts = db.rows(
        "SELECT id, job_name, status FROM ql_runs WHERE started_at IS NOT NULL "
        "AND (status IN ('missed', 'cancelled', 'quarantined') OR ended_at < started_at)"
    )
    assert not false_starts, false_starts
    kills = db.rows("SELECT id, job_name, exit_code, error FROM ql_runs "
                    "WHERE status = 'failed' AND exit_code < 0")
    assert not kills, f"kills recorded as failures: {kills}"


def test_a_node_whose_guard_dies_fences_at_once(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    """Before: the node carried on unguarded (no log line, a zombie guard)."""
    child = sleeper(client, tmp_path, "g")
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("guarded", flags=["--tag", "g"])
        wait_until(lambda: db.live_sessions() == 1, timeout=60)
        pid = started_child(client, child)
        guard = guard_pid(node)
        signal_at = datetime.now(UTC)
        os.kill(guard, signal.SIGKILL)
        assert node.wait(30) == 3, node.log()[-3000:]
        assert "the guard process died" in node.log()
        assert (datetime.now(UTC) - signal_at).total_seconds() < 20
        wait_until(lambda: not pid_alive(pid), timeout=10, message="the job's child was killed")
        assert not pid_alive(guard), "the dead guard was reaped"
    run = db.rows("SELECT status, started_at, error FROM ql_runs WHERE job_name='sleeper'")
    assert [r.status for r in run] == ["abandoned"], run
    assert run[0].started_at is not None
    no_false_history(db)
    db.close()


def test_a_fenced_node_records_an_outcome_through_a_link_that_was_blackholed(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    """The node fences (its guard frozen) while a Python run executes; the run ends while
    the node's link to MySQL is blackholed for a moment. Its outcome must still be
    recorded before the session may expire: the results transaction stuck on the dead
    connection gives up within seconds and tries again on a new one. Before: it waited
    out the node's I/O timeout (5 s), the outcome was left in the journal, and a peer
    reran the finished run (found by the soak in a stress round)."""
    done = tmp_path / "done"
    client.add_job({"name": "napper", "schedule": "0 0 1 1 *", "tags": ["n"],
                    "callable": "tests.cluster.jobs:nap",
                    "kwargs": {"seconds": 4.0, "path": str(done)}})
    proxy = TcpProxy(*target(db_url))
    db = Db(db_url)
    try:
        with nodes(proxied(db_url, proxy)) as start:
            node = start("fenced", flags=["--tag", "n"], options={
                "heartbeat-interval-s": "0.5", "fence-after-s": "2.5", "session-timeout-s": "5",
                "poll-interval-s": "1"})
            wait_until(lambda: db.live_sessions() == 1, timeout=60)
            guard = guard_pid(node)
            client.trigger_job("napper")
            wait_until(lambda: Path(str(done) + ".started").exists(), timeout=30, interval=0.05,
                       message="the run started")
            os.kill(guard, signal.SIGSTOP)  # unanswered beats: the node fences
            wait_until(lambda: "FENCED" in node.log(), timeout=30, interval=0.05,
                       message="the node fenced")
            proxy.blackhole()
            wait_until(done.exists, timeout=30, interval=0.05, message="the run ended")
            time.sleep(1.0)  # the cut itself lasts a moment past the run's end, not a wait
            proxy.forward()
            assert node.wait(30) == 3, node.log()[-3000:]
        runs = db.rows("SELECT status, started_at FROM ql_runs WHERE job_name='napper'")
        assert [r.status for r in runs] == ["succeeded"], (runs, node.log()[-2000:])
        no_false_history(db)
    finally:
        proxy.close()
        db.close()


def test_a_node_frozen_past_fence_after_fences_on_waking_and_its_kill_is_no_failure(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    """SIGSTOP just past fence_after, below the session timeout: the guard kills the
    run; on SIGCONT the node must fence, record the run abandoned (not failed -9) and
    its slot runs again (recovery policy rerun). Before: recorded failed, not rerun."""
    child = sleeper(client, tmp_path, "f")
    db = Db(db_url)
    with nodes(db_url) as start:
        frozen = start("frozen", flags=["--tag", "f"],
                       options={"session-timeout-s": "6", "fence-after-s": "2.5"})
        wait_until(lambda: db.live_sessions() == 1, timeout=60)
        pid = started_child(client, child)
        child.unlink()
        frozen.signal(signal.SIGSTOP)
        wait_until(lambda: not pid_alive(pid), timeout=30, interval=0.05,
                   message="the guard killed the frozen node's child")
        frozen.signal(signal.SIGCONT)
        assert frozen.wait(30) == 3, frozen.log()[-3000:]
        assert "FENCED" in frozen.log()
        # Its attempt 2 (sleep 300) is still running when the peer is stopped: a short
        # grace kills it at once instead of after FAST's 10 s (recorded killed either way).
        peer = start("peer", flags=["--tag", "f"], options={"shutdown-grace-s": "1"})
        wait_until(lambda: child.exists() and child.read_text().strip(), timeout=60,
                   message="the slot ran again (attempt 2)")
        stop_all([peer])
    rows = db.rows("SELECT status, attempt, slot_at, exit_code FROM ql_runs "
                   "WHERE job_name='sleeper' ORDER BY attempt")
    assert rows[0].status == "abandoned", rows
    assert rows[1].attempt == 2
    assert rows[1].slot_at == rows[0].slot_at
    no_false_history(db)
    db.close()


@pytest.mark.parametrize("restart", ["rejoin", "supervisor"])
def test_outage_past_fence_after_never_reruns_a_finished_run(
    db_url: str, client: SchedulerClient, tmp_path: Path, restart: str
) -> None:
    """The database goes away 0.3 s after a burst's instant, for longer than
    fence_after (default settings): every node fences. Runs that finished meanwhile
    are facts: kept in the journal and recorded by the node that rejoins, or by the
    one its supervisor restarts, before it registers; never run again. Before: most
    of the burst ran twice."""
    log = tmp_path / "spans.log"
    db = Db(db_url)
    proxy = TcpProxy(*target(db_url))
    steady = [f"s-{i:02d}" for i in range(10)]
    client.add_jobs([{"name": n, "schedule": "* * * * * ?", "callable": "tests.cluster.spans:span",
                      "kwargs": {"path": str(log)}, "misfire_grace_s": 30.0} for n in steady])
    options = {**DEFAULTS, "capacity": "200", "state-dir": str(tmp_path / "state")}
    flags = ["--rejoin"] if restart == "rejoin" else []
    try:
        with nodes(proxied(db_url, proxy)) as start:
            started = [start(f"n{i}", options=options, flags=flags) for i in range(2)]
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            wait_until(lambda: len(executions_per_slot(log)) > 20, timeout=60)
            at = (db_now(db) + timedelta(seconds=4)).replace(microsecond=0)
            burst = [f"b-{i:03d}" for i in range(200)]
            client.add_jobs([{"name": n, "schedule": f"@at {at.isoformat()}",
                              "callable": "tests.cluster.spans:span",
                              "kwargs": {"path": str(log), "seconds": 1.0}, "misfire_grace_s": 60.0}
                             for n in burst])
            wait_until(lambda: db_now(db) >= at + timedelta(seconds=0.3), timeout=30, interval=0.02)
            proxy.reject()
            cut = db_now(db)
            if restart == "rejoin":
                wait_until(lambda: all("FENCED" in n.log() for n in started), timeout=60)
                wait_until(lambda: db_now(db) >= cut + timedelta(seconds=8), timeout=30)
            else:
                for node in started:
                    assert node.wait(60) == 3, node.log()[-3000:]
            proxy.forward()
            up = db_now(db)
            if restart == "supervisor":
                started = [start(f"again{i}", options=options) for i in range(2)]
            wait_until(
                lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE job_name LIKE 'b-%' "
                                  "AND status <> 'running'") >= len(burst)
                and db.scalar("SELECT COUNT(DISTINCT job_name) FROM ql_runs WHERE status='succeeded' "
                              "AND job_name LIKE 's-%' AND slot_at > :u", u=up.replace(tzinfo=None))
                == len(steady),
                timeout=120, message="the burst is accounted and the steady jobs run again")
            stop_all(started)
    finally:
        proxy.close()
    twice = finished_then_rerun(log)
    assert twice == [], f"{len(twice)} finished run(s) executed again: {twice[:10]}"
    counts = executions_per_slot(log)
    assert all(counts.get((n, at.isoformat()), 0) >= 1 for n in burst), "every burst job ran"
    stuck = db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status='running'")
    assert stuck == 0
    no_false_history(db)
    db.close()


def test_database_killed_mid_burst_never_reruns_a_finished_run(tmp_path: Path) -> None:
    """Issue 10's probe, on a private mariadbd: 50 every-second jobs and a burst of 1,000
    one-shot jobs on 2 nodes (default settings, --rejoin); the server is killed with
    kill -9 0.3 s after the burst's instant and comes back once both nodes fenced and a
    second more (past fence_after), then crashes twice more the same way. Before: 985 of
    the burst ran twice."""
    log = tmp_path / "spans.log"
    steady = [f"s-{i:02d}" for i in range(50)]
    burst = [f"b-{i:04d}" for i in range(1000)]
    with private_database() as (server, url):
        client = SchedulerClient(url)
        db = Db(url)
        client.add_jobs([{"name": n, "schedule": "* * * * * ?",
                          "callable": "tests.cluster.spans:span",
                          "kwargs": {"path": str(log)}, "misfire_grace_s": 30.0} for n in steady])
        options = {**DEFAULTS, "state-dir": str(tmp_path / "state")}
        with nodes(url) as start:
            started = [start(f"n{i}", options=options, flags=["--rejoin"]) for i in range(2)]
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            wait_until(lambda: len(executions_per_slot(log)) > 100, timeout=60)
            at = (db_now(db) + timedelta(seconds=5)).replace(microsecond=0)
            client.add_jobs([{"name": n, "schedule": f"@at {at.isoformat()}",
                              "callable": "tests.cluster.spans:span",
                              "kwargs": {"path": str(log)}, "misfire_grace_s": 120.0}
                             for n in burst])
            wait_until(lambda: db_now(db) >= at + timedelta(seconds=0.3), timeout=30,
                       interval=0.02)
            for crash in range(3):
                server.kill9()
                wait_until(lambda c=crash: all(n.log().count("FENCED") > c for n in started),
                           timeout=60, message="every node fenced")
                time.sleep(1)  # the fault itself: down for fence_after + 1 s in all
                server.start()
                up = db_now(db).replace(tzinfo=None)
                wait_until(
                    lambda u=up: db.scalar(
                        "SELECT COUNT(DISTINCT job_name) FROM ql_runs WHERE status='succeeded' "
                        "AND job_name LIKE 's-%' AND slot_at > :u", u=u) == len(steady),
                    timeout=120, message="the steady jobs run again")
                # Every node is back before the next crash (one still waiting to rejoin
                # when the server dies again would not fence again: nothing to fence).
                wait_until(lambda c=crash: all(n.log().count(" started: session ") > c + 1
                                               for n in started),
                           timeout=120, message="every node rejoined")
            wait_until(
                lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE job_name LIKE 'b-%' "
                                  "AND status <> 'running'") >= len(burst),
                timeout=120, message="the burst is accounted")
            assert all(n.proc.poll() is None for n in started), "the nodes rejoined"
            stop_all(started)
        twice = finished_then_rerun(log)
        counts = executions_per_slot(log)
        report = FaultReport(
            fault="database kill -9 0.3 s into a 1,000-job burst, 3 crashes past fence_after",
            slots_expected=len(burst),
            slots_ran=sum(1 for n in burst if counts.get((n, at.isoformat()))),
            duplicates=len(twice),
            notes="2 nodes (--rejoin), default settings, 50 every-second jobs; duplicates = "
                  "executions of a run that had finished")
        report.publish()
        assert twice == [], f"{len(twice)} finished run(s) executed again: {twice[:10]}"
        assert report.slots_ran == len(burst), "every burst job ran"
        no_false_history(db)
        db.close()
        client.close()


def test_a_fenced_node_never_ends_a_connection_that_is_not_its_own() -> None:
    """A fenced node ends its other connections on the server by thread id. After a
    server restart the ids start over: the id a node's old (dead) connection had may now
    be a peer's or an operator's session, which must be left alone."""
    import pymysql

    from quartzlite.storage.engine import Database

    with private_database() as (server, url):
        node_db, results_db = Database(url), Database(url)
        try:
            with node_db.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            (stale_id, _, _), = node_db.server_threads()
            # Uptime counts whole seconds: restart well after the connection opened.
            time.sleep(2.0)  # not a wait for a condition: the old connection must be old
            server.restart()
            others: list[pymysql.connections.Connection] = []
            try:
                while not others or others[-1].thread_id() < stale_id:
                    others.append(pymysql.connect(host="127.0.0.1", port=server.port, user="root"))
                # (ids start over: one of these has the stale id, unless the server's
                # own threads took it)
                assert [t for t, _, _ in node_db.server_threads()] == [stale_id]  # still "open"
                assert results_db.end_threads(node_db.server_threads()) == 0
                for other in others:
                    with other.cursor() as cursor:
                        cursor.execute("SELECT 1")  # alive: not killed
                # A connection opened since the restart (past the margin for Uptime's
                # whole seconds) is ended as asked.
                time.sleep(2.0)  # not a wait for a condition: the margin itself
                with node_db.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                fresh = [(t, o, w) for t, o, w in node_db.server_threads() if t != stale_id]
                # Thread ids are per server: the same one on another server is left alone.
                elsewhere = [(t, o, "127.0.0.1:1") for t, o, _ in fresh]
                assert results_db.end_threads(elsewhere) == 0
                assert results_db.end_threads(fresh) == 1
            finally:
                for c in others:
                    c.close()
        finally:
            node_db.dispose()
            results_db.dispose()
