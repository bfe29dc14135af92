"""Issue 5's fault suite: real node processes, injected faults, and invariants checked
from the database afterwards (see tests/cluster/invariants.py). Each test publishes a
report row; `make reliability-report` collects them into docs/reliability.md.

The quick cases run in `make test`; QUARTZLITE_FAULTS_LONG=1 (set by `make test-faults`)
makes the repeated ones run longer.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from quartzlite.client import SchedulerClient
from quartzlite.errors import Conflict, NotFound
from tests.cluster.harness import Db, NodeProcess, nodes, pid_alive, wait_until
from tests.cluster.invariants import check, executions
from tests.cluster.mariadb import private_database
from tests.cluster.proxy import TcpProxy

pytestmark = pytest.mark.cluster
LONG = os.environ.get("QUARTZLITE_FAULTS_LONG") == "1"


def db_now(db: Db) -> datetime:
    return db.scalar("SELECT NOW(6)").replace(tzinfo=UTC)


def recorders(client: SchedulerClient, log: Path, count: int, prefix: str = "j", **extra: Any) -> list[str]:
    names = [f"{prefix}-{i:02d}" for i in range(count)]
    client.add_jobs([
        {"name": n, "schedule": "* * * * * ?", "callable": "tests.cluster.jobs:record",
         "kwargs": {"path": str(log)}, **extra}
        for n in names
    ])
    return names


def all_ran_after(db: Db, names: list[str], after: datetime) -> bool:
    """Every job ran a slot at or after ``after``: its earlier slots are all run or
    recorded (a rerun of an earlier slot is planned later, but does not count)."""
    return db.scalar(
        "SELECT COUNT(DISTINCT job_name) FROM ql_runs WHERE status='succeeded' AND slot_at >= :t",
        t=after.replace(tzinfo=None),
    ) == len(names)


def proxied(db_url: str, proxy: TcpProxy) -> str:
    return make_url(db_url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


def target(db_url: str) -> tuple[str, int]:
    url = make_url(db_url)
    return url.host or "127.0.0.1", url.port or 3306


def stop_all(started: list[NodeProcess]) -> None:
    for node in started:
        node.signal(signal.SIGTERM)
    for node in started:
        if node.proc.poll() is None:
            assert node.wait(60) == 0, node.log()[-3000:]


# 1. SIGKILL at random moments, many times ----------------------------------------------


def test_repeated_sigkill_at_random_moments(db_url: str, client: SchedulerClient, tmp_path: Path) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=2.0)
    db = Db(db_url)
    rng = random.Random(5)
    kills = 12 if LONG else 4
    victims: list[int] = []
    with nodes(db_url) as start:
        live = [start(f"n{i}", options={"capacity": "50"}) for i in range(3)]
        wait_until(lambda: db.live_sessions() == 3, timeout=60)
        t0 = db_now(db) + timedelta(seconds=1)
        wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
        for k in range(kills):
            victim = rng.choice(live)
            time.sleep(rng.uniform(0.3, 2.5))  # a random moment: mid-run, mid-transaction
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            victims.append(victim.pid)
            live.remove(victim)
            live.append(start(f"r{k}", options={"capacity": "50"}))
        t1 = db_now(db)
        wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=6)), timeout=90,
                   message="all jobs run after the last kill")
        stop_all(live)
    # A kill between a body's end and its journaled outcome leaves the outcome unknown:
    # the slot may be rerun once (abandoned, recovery policy rerun), counted apart.
    report = check(db, "SIGKILL a node at random moments", jobs=names, start=t0, end=t1, log=log,
                   killed=victims)
    report.notes = f"{kills} kills of 3 nodes, each replaced at once; recovery policy rerun"
    gaps = db.rows(
        "SELECT job_name, planned_at, started_at FROM ql_runs WHERE status='succeeded' "
        "AND planned_at >= :a ORDER BY job_name, planned_at", a=t0.replace(tzinfo=None),
    )
    worst = 0.0
    for prev, cur in zip(gaps, gaps[1:], strict=False):
        if prev.job_name == cur.job_name:
            worst = max(worst, (cur.started_at - prev.started_at).total_seconds() - 1)
    report.recovery_s = round(worst, 2)
    report.publish()
    report.assert_ok()
    db.close()


# 2. SIGSTOP longer than the session timeout, then SIGCONT ---------------------------------


def test_frozen_node_is_fenced_and_its_children_die_before_expiry(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    child = tmp_path / "child"
    names = recorders(client, log, 10, misfire_grace_s=2.0)
    client.add_job({"name": "sleeper", "schedule": "0 0 1 1 *", "tags": ["frozen"],
                    "command": f"sleep 300 & echo $! > {child}; wait"})
    db = Db(db_url)
    with nodes(db_url) as start:
        frozen = start("frozen", flags=["--tag", "frozen"])
        wait_until(lambda: db.live_sessions() == 1, timeout=60)
        session = db.session_ids()[0]
        peer = start("peer")
        wait_until(lambda: db.live_sessions() == 2, timeout=60)
        # Make sure the frozen node holds the sleeper and some recorders.
        client.trigger_job("sleeper")
        wait_until(lambda: child.exists() and child.read_text().strip(), timeout=30)
        assert db.scalar("SELECT owner_session FROM ql_jobs WHERE name='sleeper'") == session
        pid = int(child.read_text())
        t0 = db_now(db)
        frozen.signal(signal.SIGSTOP)
        stopped_at = db_now(db)
        gone = wait_until(lambda: None if pid_alive(pid) else db_now(db), timeout=30, interval=0.05,
                          message="the guard killed the frozen node's child")
        heartbeat = db.scalar("SELECT heartbeat_at FROM ql_sessions WHERE id=:s", s=session)
        assert heartbeat is not None, "expired before the child died"
        assert gone < heartbeat.replace(tzinfo=UTC) + timedelta(seconds=4)
        wait_until(lambda: session not in db.session_ids(), timeout=30, message="peer expired it")
        expired_at = db_now(db)
        wait_until(lambda: all_ran_after(db, names, expired_at + timedelta(seconds=1)), timeout=60)
        frozen.signal(signal.SIGCONT)
        assert frozen.wait(30) == 3, frozen.log()[-3000:]
        assert "FENCED" in frozen.log()
        t1 = db_now(db)
        wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60)
        stop_all([peer])
    late = db.rows(
        "SELECT id, status FROM ql_runs WHERE session_id=:s AND (started_at > :t OR "
        "(ended_at > :t AND status NOT IN ('abandoned')))",
        s=session, t=stopped_at.replace(tzinfo=None),
    )
    assert not late, f"the frozen node ran or finished runs as if it still owned them: {late}"
    assert db.scalar("SELECT status FROM ql_runs WHERE job_name='sleeper'") == "abandoned"
    # A run the node had started when it froze, its outcome not yet recorded, is
    # abandoned and rerun by policy (on a loaded machine the freeze can land there).
    report = check(db, "SIGSTOP a node past the session timeout, then SIGCONT", jobs=names,
                   start=t0, end=t1, log=log, cut_off=(session, frozen.pid))
    report.recovery_s = round((expired_at - stopped_at).total_seconds(), 2)
    report.notes = "; ".join(filter(None, [
        "child killed by the guard before expiry; node fenced on SIGCONT", report.notes]))
    report.publish()
    report.assert_ok()
    db.close()


# 3. MySQL restart (rides through) and outage longer than fence_after (fences) -------------


def test_database_restart_shorter_than_fence_after_is_ridden_through(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=5.0)
    db = Db(db_url)
    proxy = TcpProxy(*target(db_url))
    try:
        with nodes(proxied(db_url, proxy)) as start:
            started = [start(f"n{i}", options={"fence-after-s": "4", "session-timeout-s": "6"})
                       for i in range(2)]
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            sessions = set(db.session_ids())
            t0 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
            proxy.reject()  # every connection drops, new ones are refused: a restart
            down = db_now(db)
            wait_until(lambda: db_now(db) > down + timedelta(seconds=2), timeout=10, interval=0.05)
            proxy.forward()
            up = db_now(db)
            t1 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60)
            assert set(db.session_ids()) == sessions, "nobody fenced, nobody was expired"
            assert all(n.proc.poll() is None for n in started)
            stop_all(started)
    finally:
        proxy.close()
    report = check(db, "MySQL restart of 2 s (nodes ride through)", jobs=names, start=t0, end=t1, log=log)
    first = db.scalar("SELECT MIN(started_at) FROM ql_runs WHERE started_at > :u", u=up.replace(tzinfo=None))
    report.recovery_s = round((first.replace(tzinfo=UTC) - up).total_seconds(), 2) if first else None
    report.publish()
    report.assert_ok()
    db.close()


DEFAULTS = {
    "heartbeat-interval-s": "1", "fence-after-s": "5", "session-timeout-s": "7",
    "poll-interval-s": "2", "look-ahead-s": "2",
}


@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill9"])
def test_a_real_mysql_restart_is_ridden_through_with_default_settings(
    tmp_path: Path, crash: bool
) -> None:
    """The server itself goes away and comes back (not a proxy): a PRIVATE mariadbd this
    test starts (own datadir, port, socket), shut down cleanly or killed with kill -9 and
    started again 2 s later. With the default settings nodes ride through it."""
    log = tmp_path / "exec.log"
    with private_database() as (server, url):
        client = SchedulerClient(url)
        names = recorders(client, log, 20, misfire_grace_s=10.0)
        db = Db(url)
        with nodes(url) as start:
            started = [start(f"n{i}", options={**DEFAULTS, "capacity": "50"}) for i in range(2)]
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            sessions = set(db.session_ids())
            t0 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
            began = time.monotonic()
            if crash:
                server.kill9()
            else:
                server.stop()
            time.sleep(2)  # the outage itself (shorter than fence_after), not a wait
            server.start()
            away = time.monotonic() - began
            up = db_now(db)
            t1 = up + timedelta(seconds=2)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=90,
                       message="jobs run again after the restart")
            assert set(db.session_ids()) == sessions, "nobody fenced, nobody was expired"
            assert all(n.proc.poll() is None for n in started), "every node rode through"
            stop_all(started)
        how = "kill -9" if crash else "clean restart"
        report = check(db, f"real MySQL {how} ({away:.1f} s, default settings)", jobs=names,
                       start=t0, end=t1, log=log)
        first = db.scalar("SELECT MIN(started_at) FROM ql_runs WHERE started_at > :u",
                          u=up.replace(tzinfo=None))
        report.recovery_s = round((first.replace(tzinfo=UTC) - up).total_seconds(), 2) if first else None
        report.notes = f"private mariadbd, {how}, back after 2 s; heartbeat 1 s, fence_after 5 s"
        report.publish()
        report.assert_ok()
        db.close()
        client.close()


@pytest.mark.parametrize("restart", ["rejoin", "supervisor"])
def test_outage_longer_than_fence_after_fences_then_carries_on(
    db_url: str, client: SchedulerClient, tmp_path: Path, restart: str
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=2.0)
    db = Db(db_url)
    proxy = TcpProxy(*target(db_url))
    flags = ["--rejoin"] if restart == "rejoin" else []
    try:
        with nodes(proxied(db_url, proxy)) as start:
            started = [start(f"n{i}", flags=flags) for i in range(2)]
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            t0 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
            proxy.reject()
            down = db_now(db)
            if restart == "supervisor":
                for node in started:
                    assert node.wait(30) == 3, node.log()[-3000:]
            else:
                wait_until(lambda: all("FENCED" in n.log() for n in started), timeout=30)
            proxy.forward()
            up = db_now(db)
            if restart == "supervisor":
                started = [start(f"again{i}") for i in range(2)]
            wait_until(lambda: all_ran_after(db, names, up + timedelta(seconds=2)), timeout=90,
                       message="the cluster carries on after the outage")
            t1 = db_now(db)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60)
            stop_all(started)
    finally:
        proxy.close()
    report = check(db, f"MySQL outage past fence_after ({restart})", jobs=names, start=t0, end=t1, log=log)
    first = db.scalar("SELECT MIN(started_at) FROM ql_runs WHERE started_at > :u", u=up.replace(tzinfo=None))
    report.recovery_s = round((first.replace(tzinfo=UTC) - up).total_seconds(), 2) if first else None
    report.notes = f"outage {round((up - down).total_seconds(), 1)} s; every node fenced"
    report.publish()
    report.assert_ok()
    db.close()


# 4. One node's connections dropped ----------------------------------------------------------


def test_one_node_losing_its_connections_fences_and_peers_take_over(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=2.0)
    db = Db(db_url)
    proxy = TcpProxy(*target(db_url))
    try:
        with nodes(proxied(db_url, proxy)) as start_cut, nodes(db_url) as start:
            cut = start_cut("cut", options={"capacity": "50"})
            wait_until(lambda: db.live_sessions() == 1, timeout=60)
            t0 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
            (cut_session,) = db.session_ids()
            peer = start("peer", options={"capacity": "50"})
            wait_until(lambda: db.live_sessions() == 2, timeout=60)
            proxy.reject()
            cut_at = db_now(db)
            assert cut.wait(30) == 3
            t1 = db_now(db)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=1)), timeout=60)
            stop_all([peer])
    finally:
        proxy.close()
    report = check(db, "one node's connections dropped", jobs=names, start=t0, end=t1, log=log,
                   cut_off=(cut_session, cut.pid))
    report.notes = report.notes or (
        "a run the cut node started but could never record would be abandoned and rerun once "
        "(outcome unknown; recovery policy rerun), counted apart: none this time"
    )
    first = db.rows(
        "SELECT job_name, MIN(started_at) AS s FROM ql_runs WHERE started_at > :c GROUP BY job_name",
        c=(cut_at + timedelta(seconds=1)).replace(tzinfo=None),
    )
    report.recovery_s = round(max((r.s.replace(tzinfo=UTC) - cut_at).total_seconds() for r in first), 2)
    report.publish()
    report.assert_ok()
    db.close()


# 6. Commits of unknown outcome ---------------------------------------------------------------


def test_commits_of_unknown_outcome_are_put_right(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=5.0)
    db = Db(db_url)
    proxy = TcpProxy(*target(db_url))
    try:
        with nodes(proxied(db_url, proxy)) as start:
            node = start("n", options={"capacity": "50", "compensate-interval-s": "1",
                                       "fence-after-s": "4", "session-timeout-s": "6"})
            wait_until(lambda: db.live_sessions() == 1, timeout=60)
            t0 = db_now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
            cuts = 20 if LONG else 8
            for _ in range(cuts):
                proxy.cut_next_commit()
                wait_until(lambda: proxy.cut_commits == 0, timeout=20, interval=0.02)
                time.sleep(0.3)  # spread the cuts over the job cycle
            t1 = db_now(db)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60)
            assert node.proc.poll() is None, node.log()[-3000:]
            stop_all([node])
    finally:
        proxy.close()
    report = check(db, "commits of unknown outcome", jobs=names, start=t0, end=t1, log=log)
    report.notes = f"{proxy.commits_cut} COMMITs cut after sending"
    report.publish()
    report.assert_ok()
    db.close()


# 7. Racing writes ------------------------------------------------------------------------------


def test_racing_writes_with_firing_on_three_nodes(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 15, misfire_grace_s=2.0)
    db = Db(db_url)
    rng = random.Random(7)
    writes = 600 if LONG else 200
    paused: dict[str, list[tuple[datetime, datetime | None]]] = {n: [] for n in names}
    deleted: dict[str, tuple[int, datetime]] = {}
    last_description: dict[str, str] = {}
    with nodes(db_url) as start:
        started = [start(f"n{i}", options={"capacity": "50"}) for i in range(3)]
        wait_until(lambda: db.live_sessions() == 3, timeout=60)
        warm = db_now(db)
        wait_until(lambda: all_ran_after(db, names, warm), timeout=60)
        for i in range(writes):
            name = rng.choice([n for n in names if n not in deleted])
            op = rng.choice(["pause", "resume", "update", "trigger", "trigger", "delete"]
                            if len(deleted) < 3 else ["pause", "resume", "update", "trigger"])
            try:
                if op == "pause":
                    client.pause_job(name)
                    if not paused[name] or paused[name][-1][1] is not None:
                        paused[name].append((client.now(), None))
                elif op == "resume":
                    before = client.now()
                    client.resume_job(name)
                    if paused[name] and paused[name][-1][1] is None:
                        paused[name][-1] = (paused[name][-1][0], before)
                elif op == "update":
                    client.update_job(name, {"description": f"write {i}"})
                    last_description[name] = f"write {i}"
                elif op == "trigger":
                    client.trigger_job(name)
                else:
                    job_id = client.get_job(name).id
                    client.delete_job(name)
                    deleted[name] = (job_id, client.now())
            except Conflict:
                pass  # trigger of a running or paused job
        stop_all(started)
    for name, windows in paused.items():
        for since, until in windows:
            bad = db.scalar(
                "SELECT COUNT(*) FROM ql_runs WHERE job_name=:n AND status <> 'missed' AND started_at > :a"
                + (" AND started_at < :b" if until else ""),
                n=name, a=since.replace(tzinfo=None), b=until.replace(tzinfo=None) if until else None,
            )
            assert bad == 0, f"{name} ran while paused ({since} .. {until})"
    for name, (job_id, at) in deleted.items():
        bad = db.scalar("SELECT COUNT(*) FROM ql_runs WHERE job_id=:j AND started_at > :a",
                        j=job_id, a=at.replace(tzinfo=None))
        assert bad == 0, f"{name} ran after it was deleted"
    for name, text_ in last_description.items():
        if name not in deleted:
            assert client.get_job(name).spec.description == text_, f"lost update on {name}"
    ran = executions(log)
    report = check(db, "racing writes on 3 nodes", jobs=[], start=db_now(db), end=db_now(db), log=log,
                   every_second=False)
    report.slots_ran = sum(ran.values())
    report.notes = f"{writes} writes: pause/resume/update/trigger/delete; none lost, none ignored"
    report.publish()
    report.assert_ok()
    db.close()


# 8. A lock holder stuck inside its transaction ------------------------------------------------


def test_stuck_lock_holder_delays_but_does_not_break_the_cluster(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    names = recorders(client, log, 20, misfire_grace_s=30.0)
    db = Db(db_url)
    with nodes(db_url) as start:
        started = [start(f"n{i}", options={"capacity": "50", "lock-wait-timeout-s": "2"})
                   for i in range(2)]
        wait_until(lambda: db.live_sessions() == 2, timeout=60)
        sessions = set(db.session_ids())
        t0 = db_now(db) + timedelta(seconds=1)
        wait_until(lambda: all_ran_after(db, names, t0), timeout=60)
        holder = create_engine(db_url)
        released = threading.Event()

        def hold() -> None:
            with holder.connect() as conn:
                conn.execute(text("SELECT name FROM ql_locks WHERE name='job' FOR UPDATE"))
                released.wait(8)
                conn.rollback()

        thread = threading.Thread(target=hold)
        thread.start()
        wait_until(lambda: any("1205" in n.log() for n in started), timeout=30,
                   message="nodes hit the lock wait timeout")
        released.set()
        thread.join()
        release_at = db_now(db)
        t1 = release_at + timedelta(seconds=1)
        wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60)
        assert set(db.session_ids()) == sessions, "a stuck lock must not fence or expire anyone"
        stop_all(started)
        holder.dispose()
    report = check(db, "lock holder stuck for 8 s", jobs=names, start=t0, end=t1, log=log)
    first = db.scalar("SELECT MIN(started_at) FROM ql_runs WHERE started_at > :r",
                      r=release_at.replace(tzinfo=None))
    report.recovery_s = round((first.replace(tzinfo=UTC) - release_at).total_seconds(), 2)
    report.notes = "innodb_lock_wait_timeout 2 s on the nodes; slots during the hold ran late"
    report.publish()
    report.assert_ok()
    db.close()


# 9. Long-running jobs on a node stopped gracefully ---------------------------------------------


def test_long_job_on_a_gracefully_stopped_node_is_recorded_once(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    seconds = 120 if LONG else 8
    client.add_job({"name": "long", "schedule": "0 0 1 1 *", "tags": ["a"],
                    "command": f"echo start >> {marker}; sleep {seconds}; echo done"})
    db = Db(db_url)
    with nodes(db_url) as start:
        # Either node may take the job: both give running jobs time to finish.
        grace = {"shutdown-grace-s": str(seconds * 3)}
        a = start("a", flags=["--tag", "a"], options=grace)
        b = start("b", flags=["--tag", "a"], options=grace)
        wait_until(lambda: db.live_sessions() == 2, timeout=60)
        a_pid = a.pid
        client.trigger_job("long")
        wait_until(marker.exists, timeout=30)
        runner = db.scalar("SELECT node FROM ql_runs WHERE job_name='long'")
        stopping, other = (a, b) if runner.endswith(f":{a_pid}") else (b, a)
        stopped_at = db_now(db)
        stopping.signal(signal.SIGTERM)
        assert stopping.wait(seconds * 4) == 0, stopping.log()[-3000:]
        other.signal(signal.SIGTERM)
        assert other.wait(60) == 0
    runs = db.rows("SELECT status, output, ended_at FROM ql_runs WHERE job_name='long'")
    assert len(runs) == 1
    assert runs[0].status == "succeeded"
    assert "done" in runs[0].output
    assert marker.read_text().count("start") == 1, "never run twice"
    assert db.live_sessions() == 0
    report = check(db, f"graceful stop with a {seconds} s job running", jobs=[], start=stopped_at,
                   end=stopped_at, log=tmp_path / "none", every_second=False)
    report.slots_expected = report.slots_ran = 1
    report.publish()
    report.assert_ok()
    db.close()


__all__ = ["NotFound"]
