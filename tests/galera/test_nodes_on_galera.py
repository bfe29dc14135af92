"""Real nodes on a three-member Galera cluster with the recommended settings (docs/ha.md):
each node lists a different member first (multi-writer), every-second jobs run, then the
member one node uses is killed with -9. No node may fence, the node on the dead member
moves to a survivor, every job fires again within 10 s, and the bodies' records keyed by
slot show no slot run twice and none neither run nor recorded."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.storage import migrate
from tests.cluster.galera import GaleraCluster
from tests.cluster.harness import Db, NodeProcess, nodes, wait_until
from tests.cluster.invariants import check
from tests.cluster.test_faults import all_ran_after, recorders

pytestmark = pytest.mark.cluster

#: docs/ha.md's recommended Galera settings.
RECOMMENDED = ("evs.suspect_timeout=PT2S;evs.keepalive_period=PT0.5S;evs.inactive_timeout=PT3S;"
               "evs.install_timeout=PT3S;evs.inactive_check_period=PT0.5S")
#: quartzlite's defaults (not the test harness's fast ones): the contract is checked for them.
NODE_DEFAULTS = {"heartbeat-interval-s": "1", "fence-after-s": "5", "session-timeout-s": "7",
                 "poll-interval-s": "1", "capacity": "64"}
DATABASE = "quartzlite"


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    with GaleraCluster(size=3, provider_options=RECOMMENDED) as found:
        migrate.upgrade(found.url(0, DATABASE))
        yield found


def _listing(cluster: GaleraCluster, first: int) -> str:
    order = [(first + k) % cluster.size for k in range(cluster.size)]
    hosts = ",".join(f"127.0.0.1:{cluster.port(i)}" for i in order)
    return f"mysql+pymysql://root@{hosts}/{DATABASE}"


def _now(db: Db) -> datetime:
    return db.scalar("SELECT NOW(6)").replace(tzinfo=UTC)


def test_kill_9_of_a_member_fences_no_node_and_runs_every_slot_once(
    cluster: GaleraCluster, tmp_path: Path
) -> None:
    log = tmp_path / "exec.log"
    client = SchedulerClient(_listing(cluster, 1))
    db = Db(cluster.url(1, DATABASE))
    try:
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_locks") == 2, timeout=60,
                   message="the schema on member 1")
        names = recorders(client, log, 30, misfire_grace_s=10.0)
        with nodes(_listing(cluster, 0)) as start:
            started: list[NodeProcess] = [
                NodeProcess(_listing(cluster, i), f"g{i}", options=NODE_DEFAULTS) for i in range(3)
            ]
            try:
                wait_until(lambda: db.live_sessions() == 3, timeout=90,
                           message="three live sessions (a node refused to start?)"
                           + "".join(n.log()[-1500:] for n in started))
                # multi-writer: one node per member
                wait_until(lambda: len({r[0] for r in db.rows("SELECT db_member FROM ql_sessions")})
                           == 3, timeout=10, message="each node on its own member")
                t0 = _now(db) + timedelta(seconds=1)
                wait_until(lambda: all_ran_after(db, names, t0 + timedelta(seconds=5)), timeout=60,
                           message="every job running on Galera")
                killed_at = _now(db)
                cluster.kill9(0)
                t_kill = time.monotonic()
                # Every job fires again, within 10 s of the kill.
                wait_until(lambda: all_ran_after(db, names, killed_at + timedelta(seconds=2)),
                           timeout=30, message="every job firing after the kill")
                recovered_s = time.monotonic() - t_kill
                wait_until(lambda: f"127.0.0.1:{cluster.port(0)}" not in {
                    r[0] for r in db.rows("SELECT db_member FROM ql_sessions")}, timeout=30,
                    message="node g0's heartbeat on a survivor")
                t1 = _now(db)
                wait_until(lambda: all_ran_after(db, names, t1 + timedelta(seconds=3)), timeout=30)
                for node in started:
                    assert node.proc.poll() is None, f"{node.name} exited:\n{node.log()[-3000:]}"
                    assert "fenced" not in node.log(), f"{node.name} fenced:\n{node.log()[-3000:]}"
                assert db.live_sessions() == 3
                for node in started:
                    node.signal(signal.SIGTERM)
                for node in started:
                    assert node.wait(60) == 0, node.log()[-3000:]
            finally:
                for node in started:
                    node.stop()
            del start
        report = check(db, "kill -9 of a Galera member", jobs=names, start=t0, end=t1, log=log)
        report.recovery_s = round(recovered_s, 2)
        report.notes = "3 nodes, one per member first in its host list; recommended evs settings"
        report.publish()
        report.assert_ok()
        assert recovered_s < 10, recovered_s
    finally:
        db.close()
        client.close()
        if 0 not in cluster.running():
            cluster.start(0)
