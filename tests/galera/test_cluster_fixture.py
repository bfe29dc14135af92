"""The Galera fixture itself, and what the fault helpers do to a real cluster: a write on
one member is visible on another (causal read), kill -9 of a member leaves the other two
Primary (and stalls writes meanwhile: measured), the killed member rejoins by IST, an
isolated member leaves the Primary Component and refuses queries (1047) until healed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from tests.cluster.galera import (
    ER_WSREP_NOT_READY,
    GaleraCluster,
    WriteProbe,
    rows,
    wsrep_error,
)
from tests.cluster.harness import wait_until

pytestmark = pytest.mark.cluster

SCRATCH = "ql_galera_t"


@pytest.fixture(scope="module")
def scratch(galera: GaleraCluster) -> str:
    """A table of this module's own (database ql_galera_t), on every member."""
    conn = galera.connect(0)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCRATCH}")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {SCRATCH}.notes ("
                        "id BIGINT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(64) NOT NULL, "
                        "member INT NOT NULL)")
    finally:
        conn.close()
    return f"{SCRATCH}.notes"


@pytest.fixture(autouse=True)
def whole_cluster(galera: GaleraCluster) -> Iterator[None]:
    """Every test starts and leaves with three Synced members (a failed test's kill or
    isolation is undone, so the next test still has its cluster)."""
    galera.wait_synced(120)
    yield
    for i in range(galera.size):
        if not galera.members[i].running():
            galera.start(i)
    for i in range(galera.size):
        try:
            if galera.status(i).get("wsrep_cluster_status") != "Primary":
                galera.heal(i)
        except pymysql.err.MySQLError:
            pass
    galera.wait_synced(120)


def causal(galera: GaleraCluster, i: int, sql: str,
           params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """A read on member ``i`` that first waits for every commit the cluster has made."""
    conn = galera.connect(i)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")
        return rows(conn, sql, params)
    finally:
        conn.close()


def insert(galera: GaleraCluster, i: int, table: str, tag: str) -> None:
    conn = galera.connect(i)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (tag, member) VALUES (%s, %s)", (tag, i))
    finally:
        conn.close()


def test_the_cluster_comes_up_with_three_synced_members_and_the_schema(
        galera: GaleraCluster) -> None:
    assert galera.size == 3
    for i in range(3):
        status = galera.status(i)
        assert status["wsrep_cluster_size"] == "3", (i, status)
        assert status["wsrep_local_state_comment"] == "Synced", (i, status)
        assert status["wsrep_ready"] == "ON", (i, status)
        assert status["wsrep_cluster_status"] == "Primary", (i, status)
        assert status["wsrep_connected"] == "ON", (i, status)
    # One cluster: the same state UUID everywhere.
    assert len({galera.status(i)["wsrep_cluster_state_uuid"] for i in range(3)}) == 1
    for i in range(3):
        found = causal(galera, i, "SELECT name FROM quartzlite.ql_locks")
        assert found, f"member {i} has no lock rows"
        version = causal(galera, i, "SELECT version_num FROM quartzlite.ql_alembic_version")
        assert len(version) == 1, version
    assert galera.url(1, "quartzlite") == f"mysql+pymysql://root@127.0.0.1:{galera.port(1)}/quartzlite"
    assert len(set(galera.urls)) == 3


def test_a_write_on_member_0_is_visible_on_member_2_with_sync_wait(
        galera: GaleraCluster, scratch: str) -> None:
    tag = uuid.uuid4().hex
    insert(galera, 0, scratch, tag)
    # wsrep_sync_wait=1: the read waits until member 2 applied every earlier commit.
    found = causal(galera, 2, f"SELECT member FROM {scratch} WHERE tag = %s", (tag,))
    assert found == [(0,)]


def test_kill9_of_a_member_leaves_the_others_primary_and_it_rejoins_by_ist(
        galera: GaleraCluster, scratch: str, capsys: pytest.CaptureFixture[str]) -> None:
    probe = WriteProbe(galera, 0).start()
    try:
        wait_until(lambda: len(probe.commits) >= 20, timeout=30, message="probe commits")
        killed_at = time.monotonic()
        galera.kill9(1)

        def two_primary() -> bool:
            try:
                return all(galera.status(i)["wsrep_cluster_size"] == "2"
                           and galera.status(i)["wsrep_cluster_status"] == "Primary"
                           for i in (0, 2))
            except pymysql.err.MySQLError:
                return False

        wait_until(two_primary, timeout=60, interval=0.1,
                   message="members 0 and 2 Primary in a cluster of 2")
        view_changed = time.monotonic() - killed_at
        resumed = len(probe.commits)
        wait_until(lambda: len(probe.commits) >= resumed + 20, timeout=30,
                   message="writes on member 0 after the view change")
    finally:
        probe.stop()
    stall = probe.longest_gap(after=killed_at)
    with capsys.disabled():
        print(f"\n[galera] kill -9 of member 1: members 0 and 2 Primary (size 2) after "
              f"{view_changed:.2f}s; longest gap between commits on member 0: {stall:.2f}s "
              f"(default evs.suspect_timeout=PT5S); probe errors: {probe.errors}")
    assert probe.commits_after(killed_at) > 0
    assert not probe.errors, probe.errors
    tag = uuid.uuid4().hex
    insert(galera, 2, scratch, tag)  # a write member 1 misses

    kind = galera.start(1)
    assert kind == "IST", f"member 1 rejoined by {kind}"
    for i in range(3):
        status = galera.status(i)
        assert status["wsrep_cluster_size"] == "3", (i, status)
        assert status["wsrep_local_state_comment"] == "Synced", (i, status)
    # What it missed while down is there: the probe's commits and the write on member 2.
    assert causal(galera, 1, f"SELECT member FROM {scratch} WHERE tag = %s", (tag,)) == [(2,)]
    on_0 = causal(galera, 0, "SELECT COUNT(*) FROM ql_probe.writes")
    assert causal(galera, 1, "SELECT COUNT(*) FROM ql_probe.writes") == on_0


def test_an_isolated_member_leaves_the_primary_and_refuses_queries_until_healed(
        galera: GaleraCluster, scratch: str) -> None:
    before = galera.connect(2)  # a client connected before the partition
    try:
        galera.isolate(2)
        status = galera.status(2)
        assert status["wsrep_cluster_status"] == "non-Primary", status
        assert status["wsrep_ready"] == "OFF", status
        for conn in (before, galera.connect(2)):  # clients still reach it, and may not use it
            with pytest.raises(pymysql.err.OperationalError) as refused:
                rows(conn, f"SELECT COUNT(*) FROM {scratch}")
            assert wsrep_error(refused.value) == ER_WSREP_NOT_READY
            assert "WSREP has not yet prepared node for application use" in str(refused.value)
            with pytest.raises(pymysql.err.OperationalError) as refused:
                rows(conn, f"INSERT INTO {scratch} (tag, member) VALUES ('x', 2)")
            assert wsrep_error(refused.value) == ER_WSREP_NOT_READY
    finally:
        before.close()
    # The majority goes on without it.
    wait_until(lambda: all(galera.status(i)["wsrep_cluster_size"] == "2" for i in (0, 1)),
               timeout=60, message="members 0 and 1 in a cluster of 2")
    assert galera.status(0)["wsrep_cluster_status"] == "Primary"
    tag = uuid.uuid4().hex
    insert(galera, 0, scratch, tag)

    galera.heal(2)
    for i in range(3):
        status = galera.status(i)
        assert status["wsrep_cluster_size"] == "3", (i, status)
        assert status["wsrep_local_state_comment"] == "Synced", (i, status)
        assert status["wsrep_ready"] == "ON", (i, status)
    assert causal(galera, 2, f"SELECT member FROM {scratch} WHERE tag = %s", (tag,)) == [(0,)]
