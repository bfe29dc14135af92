"""Real nodes on a three-member Galera cluster (the recommended settings, docs/ha.md), one
node per member first in its host list, every-second recorder jobs, under three more
faults than test_nodes_on_galera.py's kill -9:

1. a member cut off from the others (``gmcast.isolate``) with a node on it: that member
   goes non-Primary and answers 1047; its node moves to a survivor (the others serve)
   and every job keeps firing; then the member heals;
2. a member killed with -9 under load rejoins by IST; whether the node whose list starts
   with it goes back to it (pooled connections may stay on the survivor) is reported;
3. two minutes of multi-writer load with no fault: certification conflicts (1213) are
   retried, counted from the nodes' logs.

Each test checks the bodies' records keyed by slot (tests/cluster/invariants.py): no
slot run twice, none neither run nor recorded, and publishes a FAULT REPORT row."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from quartzlite.client import SchedulerClient
from quartzlite.storage import migrate
from tests.cluster.galera import GaleraCluster, rows
from tests.cluster.harness import Db, NodeProcess, wait_until
from tests.cluster.invariants import check
from tests.cluster.test_faults import all_ran_after, recorders

from .test_nodes_on_galera import NODE_DEFAULTS, RECOMMENDED

pytestmark = pytest.mark.cluster

#: How long test 2 gives a node to go back to the first member of its list once that
#: member is Synced again.
RETURN_BOUND_S = 30.0
#: Test 3's window of multi-writer load.
LOAD_S = 120.0
RETRY = re.compile(r"retrying (\S+) after MySQL error (\d+)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    with GaleraCluster(size=3, provider_options=RECOMMENDED) as found:
        yield found


# -- helpers -----------------------------------------------------------------------------


def _schema(cluster: GaleraCluster, database: str) -> None:
    """A database of its own for each test (no jobs, runs or journals carried over),
    upgraded on member 0 and replicated to every member."""
    migrate.upgrade(cluster.url(0, database))

    def locks(i: int) -> bool:
        conn = cluster.connect(i, database)
        try:
            return rows(conn, "SELECT COUNT(*) FROM ql_locks")[0][0] == 2
        finally:
            conn.close()

    for i in range(cluster.size):
        wait_until(lambda i=i: locks(i), timeout=60, message=f"the schema on member {i}")


def _listing(cluster: GaleraCluster, first: int, database: str) -> str:
    order = [(first + k) % cluster.size for k in range(cluster.size)]
    hosts = ",".join(f"127.0.0.1:{cluster.port(i)}" for i in order)
    return f"mysql+pymysql://root@{hosts}/{database}"


def _member(cluster: GaleraCluster, i: int) -> str:
    return f"127.0.0.1:{cluster.port(i)}"


def _reader(cluster: GaleraCluster, i: int, database: str) -> Db:
    """Direct reads on member ``i``, causal (``wsrep_sync_wait``): a read sees every
    commit any member had made when it began, as the nodes' own reads do."""
    db = Db(cluster.url(i, database))

    def causal(dbapi_connection: Any, record: Any) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")

    event.listen(db.engine, "connect", causal)
    return db


def _now(db: Db) -> datetime:
    return db.scalar("SELECT NOW(6)").replace(tzinfo=UTC)


def _members(db: Db) -> dict[int, str]:
    """Node pid -> the member its last heartbeat reached (``db_member``)."""
    return {int(r[0]): str(r[1]) for r in db.rows("SELECT pid, db_member FROM ql_sessions")}


def _lines(node: NodeProcess, *words: str) -> list[str]:
    return [line for line in node.log().splitlines() if any(w in line for w in words)]


@contextmanager
def _three_nodes(cluster: GaleraCluster, db: Db, database: str, tmp_path: Path,
                 names: list[str], first: int | None = None,
                 options: dict[str, str] | None = None) -> Iterator[list[NodeProcess]]:
    """Node ``g{i}`` lists member ``i`` first; up, registered, each on its own member.
    One state directory for the three (one machine): their outcome journals.

    ``first``: that node starts alone and runs every job before the others start; a job
    mostly stays with the node that runs it, so the node on the member under test holds
    them (else it may hold none, and the fault would test nothing of it). ``options``:
    on top of quartzlite's defaults (NODE_DEFAULTS)."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    order = list(range(cluster.size))
    if first is not None:
        order.remove(first)
        order.insert(0, first)
    started: dict[int, NodeProcess] = {}

    def launch(i: int) -> None:
        started[i] = NodeProcess(_listing(cluster, i, database), f"g{i}",
                                 options={**NODE_DEFAULTS, **(options or {})}, env=env)

    try:
        if first is not None:
            launch(first)
            wait_until(lambda: db.live_sessions() == 1, timeout=90,
                       message=f"g{first}'s session" + started[first].log()[-1500:])
            at = _now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, at), timeout=60,
                       message=f"g{first} running every job")
        for i in order:
            if i not in started:
                launch(i)
        nodes = [started[i] for i in range(cluster.size)]
        wait_until(lambda: db.live_sessions() == cluster.size, timeout=90,
                   message="three live sessions (a node refused to start?)"
                   + "".join(n.log()[-1500:] for n in nodes))
        wait_until(lambda: all(_members(db).get(n.pid) == _member(cluster, i)
                               for i, n in enumerate(nodes)), timeout=10,
                   message=f"each node on the first member of its list: {_members(db)}")
        yield nodes
    finally:
        for node in started.values():
            node.stop()


def _ran_by(db: Db, started: list[NodeProcess], after: datetime, until: datetime) -> dict[str, int]:
    """Runs of slots in [after, until) by node name."""
    found = db.rows(
        "SELECT node, COUNT(*) FROM ql_runs WHERE slot_at >= :a AND slot_at < :b GROUP BY node",
        a=after.replace(tzinfo=None), b=until.replace(tzinfo=None))
    pids = {str(n.pid): n.name for n in started}
    return {pids.get(str(r[0]).rsplit(":", 1)[-1], str(r[0])): int(r[1]) for r in found}


def _stop(started: list[NodeProcess]) -> dict[str, int]:
    """SIGTERM the nodes still running; every exit code by name."""
    for node in started:
        node.signal(signal.SIGTERM)
    return {node.name: node.wait(60) for node in started}


def _retries(started: list[NodeProcess]) -> dict[str, Counter[str]]:
    """The nodes' logged retries: MySQL error -> Counter of "node:transaction"."""
    found: dict[str, Counter[str]] = {}
    for node in started:
        for match in RETRY.finditer(node.log()):
            found.setdefault(match[2], Counter())[f"{node.name}:{match[1]}"] += 1
    return found


def _lateness(db: Db, after: datetime, until: datetime) -> float:
    """The latest start of a slot in [after, until) behind its instant, in seconds."""
    found = db.rows(
        "SELECT MAX(TIMESTAMPDIFF(MICROSECOND, slot_at, started_at)) FROM ql_runs "
        "WHERE status = 'succeeded' AND slot_at >= :a AND slot_at < :b",
        a=after.replace(tzinfo=None), b=until.replace(tzinfo=None))
    late = found[0][0] if found else None
    return round(float(late or 0) / 1e6, 2)


# 1. A member partitioned off with a node on it -------------------------------------------


def test_a_partitioned_member_with_a_node_on_it(cluster: GaleraCluster, tmp_path: Path) -> None:
    database = "ql_partition"
    _schema(cluster, database)
    log = tmp_path / "exec.log"
    client = SchedulerClient(_listing(cluster, 0, database))
    db = _reader(cluster, 0, database)  # member 0 stays in the Primary Component
    isolated = _member(cluster, 2)
    healed = False
    try:
        names = recorders(client, log, 30, misfire_grace_s=10.0)
        # g2 lists member 2 first and holds every job when the member is cut off.
        with _three_nodes(cluster, db, database, tmp_path, names, first=2) as started:
            g2 = started[2]
            g2_session = db.scalar("SELECT id FROM ql_sessions WHERE pid = :p", p=g2.pid)
            t0 = _now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0 + timedelta(seconds=5)), timeout=60,
                       message="every job running on Galera")
            cut_at = _now(db)
            before = _ran_by(db, started, t0, cut_at)
            t_cut = time.monotonic()
            cluster.isolate(2)  # returns once member 2 is non-Primary (answers 1047)
            non_primary_s = time.monotonic() - t_cut
            # g2 either moves to a survivor (expected), or fences, or exits: wait for any.
            wait_until(lambda: "FENCED" in g2.log() or g2.proc.poll() is not None
                       or _members(db).get(g2.pid) not in (None, isolated), timeout=30,
                       message=f"g2 off member 2 or fenced: {_members(db)}\n{g2.log()[-3000:]}")
            moved_s = time.monotonic() - t_cut
            moved_to = _members(db).get(g2.pid)
            # Every job fires again: a slot at least 1 s after the cut, run and recorded.
            wait_until(lambda: all_ran_after(db, names, cut_at + timedelta(seconds=1)),
                       timeout=60, message="every job firing after the isolation")
            recovered_s = time.monotonic() - t_cut
            t_heal = time.monotonic()
            cluster.heal(2)
            healed = True
            heal_s = time.monotonic() - t_heal
            after_heal = _members(db).get(g2.pid)
            t1 = _now(db)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60,
                       message="every job firing after the heal")
            during = _ran_by(db, started, cut_at, t1)
            fenced = {n.name: _lines(n, "FENCED") for n in started if "FENCED" in n.log()}
            exited = {n.name: n.proc.returncode for n in started if n.proc.poll() is not None}
            g2_errors = _lines(g2, "WARNING", "ERROR", "Traceback", "Error")
            retries = {code: dict(c) for code, c in _retries(started).items()}
            codes = _stop(started)
        lost = "g2" in fenced or "g2" in exited
        print(f"\nisolate(2): member 2 ({isolated}) non-Primary after {non_primary_s:.1f}s; g2 "
              f"off it, fenced or exited after {moved_s:.1f}s, its session row then naming "
              f"{moved_to} (member 0 is {_member(cluster, 0)}, 1 is {_member(cluster, 1)}); "
              f"fenced {sorted(fenced)}; every job fired again "
              f"after {recovered_s:.1f}s; heal {heal_s:.1f}s; g2 on {after_heal} after the heal;"
              f" runs by node before the cut {before}, after {during}; exited during the test "
              f"{exited}; exit codes {codes}; retries {retries}")
        print("g2's warnings and errors:\n" + "\n".join(g2_errors))
        for name, lines in fenced.items():
            print(f"{name} FENCED:\n" + "\n".join(lines))
        report = check(db, "a Galera member partitioned off (gmcast.isolate) with a node on it",
                       jobs=names, start=t0, end=t1, log=log,
                       cut_off=(g2_session, g2.pid) if lost else None)
        report.recovery_s = round(recovered_s, 2)
        if "g2" in fenced:
            what = f"FENCED ({'; '.join(fenced['g2'])[:300]})"
        elif "g2" in exited:
            what = f"EXITED with {exited['g2']} ({' | '.join(g2_errors[-3:])[:400]})"
        else:
            what = f"moved to {moved_to} without fencing ({moved_s:.1f} s after the cut)"
        report.notes = (
            f"g2 (member 2 first) held the jobs (runs before the cut {before}); member 2 "
            f"non-Primary after {non_primary_s:.1f} s; g2 {what}; other nodes fenced: "
            f"{sorted(set(fenced) - {'g2'}) or 'none'}; every job fired again "
            f"{recovered_s:.1f} s after the cut (latest start "
            f"{_lateness(db, cut_at, t1)} s behind its slot); runs after the cut "
            f"{during}; heal {heal_s:.1f} s; retries {retries}"
        )
        report.publish()
        report.assert_ok()
        assert before.get("g2", 0) > 0, before
        assert not fenced, f"nodes fenced though a member served: {fenced}"
        assert not exited, f"nodes exited: {exited}\n{g2.log()[-4000:]}"
        assert moved_to is not None, "g2's session expired"
        assert moved_to != isolated, moved_to
        assert codes == {"g0": 0, "g1": 0, "g2": 0}, codes
    finally:
        db.close()
        client.close()
        if not healed:
            cluster.heal(2)


# 2. A member killed under load rejoins by IST ----------------------------------------------


def test_a_member_rejoins_by_ist_under_load(cluster: GaleraCluster, tmp_path: Path) -> None:
    database = "ql_ist"
    _schema(cluster, database)
    log = tmp_path / "exec.log"
    client = SchedulerClient(_listing(cluster, 0, database))
    db = _reader(cluster, 0, database)  # member 0 stays up
    member1 = _member(cluster, 1)
    try:
        names = recorders(client, log, 30, misfire_grace_s=10.0)
        # g1 lists member 1 first (then 2, then 0) and holds every job when 1 dies.
        with _three_nodes(cluster, db, database, tmp_path, names, first=1) as started:
            g1 = started[1]
            t0 = _now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0 + timedelta(seconds=5)), timeout=60,
                       message="every job running on Galera")
            killed_at = _now(db)
            before = _ran_by(db, started, t0, killed_at)
            cluster.kill9(1)
            t_kill = time.monotonic()
            wait_until(lambda: all_ran_after(db, names, killed_at + timedelta(seconds=2)),
                       timeout=30, message="every job firing after the kill")
            recovered_s = time.monotonic() - t_kill
            wait_until(lambda: _members(db).get(g1.pid) not in (None, member1), timeout=30,
                       message=f"g1's heartbeat on a survivor: {_members(db)}")
            survivor = _members(db).get(g1.pid)
            t_start = time.monotonic()
            how = cluster.start(1)  # waits until Synced in a cluster of 3
            rejoin_s = time.monotonic() - t_start
            status = cluster.status(1)
            assert status.get("wsrep_local_state_comment") == "Synced", status
            assert status.get("wsrep_cluster_size") == "3", status
            synced_at = time.monotonic()
            try:
                wait_until(lambda: _members(db).get(g1.pid) == member1,
                           timeout=RETURN_BOUND_S)
                returned: str = f"back on member 1 {time.monotonic() - synced_at:.1f} s after it was Synced"
            except AssertionError:
                returned = (f"still on {_members(db).get(g1.pid)} {RETURN_BOUND_S:.0f} s after "
                            "member 1 was Synced (its pooled connections stay on the survivor)")
            t1 = _now(db)
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60,
                       message="every job firing after the rejoin")
            during = _ran_by(db, started, killed_at, t1)
            fenced = {n.name: _lines(n, "FENCED") for n in started if "FENCED" in n.log()}
            exited = {n.name: n.proc.returncode for n in started if n.proc.poll() is not None}
            g1_errors = _lines(g1, "WARNING", "ERROR", "Traceback", "Error")
            codes = _stop(started)
        print(f"\nkill9(1): every job fired again after {recovered_s:.1f}s; g1 moved to "
              f"{survivor}; member 1 rejoined by {how} in {rejoin_s:.1f}s; g1 {returned}; "
              f"runs by node before the kill {before}, after {during}; exited during the "
              f"test {exited}; exit codes {codes}\ng1's warnings and errors:\n"
              + "\n".join(g1_errors))
        report = check(db, "kill -9 of a Galera member under load, then its IST rejoin",
                       jobs=names, start=t0, end=t1, log=log)
        report.recovery_s = round(recovered_s, 2)
        report.notes = (
            f"member 1 killed; its node moved to {survivor}; every job fired again "
            f"{recovered_s:.1f} s after the kill; rejoin by {how} in {rejoin_s:.1f} s "
            f"(Synced, size 3); its node {returned}; runs by node before the kill {before}, "
            f"after {during}; fenced: {sorted(fenced) or 'none'}"
        )
        report.publish()
        report.assert_ok()
        assert before.get("g1", 0) > 0, before
        assert how == "IST", how
        assert not fenced, fenced
        assert not exited, exited
        assert codes == {"g0": 0, "g1": 0, "g2": 0}, codes
        assert recovered_s < 10, recovered_s
    finally:
        db.close()
        client.close()
        if 1 not in cluster.running():
            cluster.start(1)


# 3. Multi-writer load, no fault ----------------------------------------------------------


def test_multi_writer_for_two_minutes(cluster: GaleraCluster, tmp_path: Path) -> None:
    database = "ql_load"
    _schema(cluster, database)
    log = tmp_path / "exec.log"
    client = SchedulerClient(_listing(cluster, 0, database))
    db = _reader(cluster, 0, database)
    try:
        names = recorders(client, log, 60, misfire_grace_s=10.0)
        # A node prepares every due job up to its prefetch (default 5000), and a job stays
        # with the node that runs it: one node may hold all 60 while the others write
        # nothing but heartbeats (seen: 7200 of 7200 runs on one node). 25 each make all
        # three schedule, so that their lock writes meet in certification.
        with _three_nodes(cluster, db, database, tmp_path, names,
                          options={"prefetch": "25"}) as started:
            t0 = _now(db) + timedelta(seconds=1)
            wait_until(lambda: all_ran_after(db, names, t0 + timedelta(seconds=3)), timeout=60,
                       message="every job running on Galera")
            t1 = t0 + timedelta(seconds=LOAD_S)
            wait_until(lambda: _now(db) >= t1, timeout=LOAD_S + 30, interval=1.0,
                       message="the load window")
            wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=60,
                       message="every job firing at the end of the window")
            fenced = {n.name: _lines(n, "FENCED") for n in started if "FENCED" in n.log()}
            under_load = _retries(started)  # start-up and the window, not the shutdown
            codes = _stop(started)
            retries = _retries(started)
        conflicts = sum(under_load.get("1213", Counter()).values())
        at_shutdown = sum(retries.get("1213", Counter()).values()) - conflicts
        share = _ran_by(db, started, t0, t1)
        print(f"\n1213 retries under load {conflicts}: {dict(under_load.get('1213', Counter()))};"
              f" at shutdown {at_shutdown}\nall retries by error (whole logs): "
              f"{ {code: dict(c) for code, c in retries.items()} }\nruns by node: {share}; "
              f"exit codes {codes}")
        report = check(db, f"multi-writer load on Galera for {LOAD_S:.0f} s", jobs=names,
                       start=t0, end=t1, log=log)
        report.notes = (
            f"3 nodes, one per member, prefetch 25 each, 60 every-second jobs, no fault; "
            f"certification conflicts (1213) retried under load: {conflicts} "
            f"({dict(under_load.get('1213', Counter()).most_common(6))}), {at_shutdown} more "
            f"at shutdown; other retries: "
            f"{ {code: sum(c.values()) for code, c in retries.items() if code != '1213'} }; "
            f"runs by node {share}; latest start {_lateness(db, t0, t1)} s behind its "
            f"slot; fenced: {sorted(fenced) or 'none'}"
        )
        report.publish()
        report.assert_ok()
        assert not fenced, fenced
        assert codes == {"g0": 0, "g1": 0, "g2": 0}, codes
    finally:
        db.close()
        client.close()
