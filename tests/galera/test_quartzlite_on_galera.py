"""quartzlite's storage on a real three-member Galera cluster: a host list moves to a
member that may serve, the node's lock rows order two members' holders (the later
commit fails certification and nothing of it lands), and the start-up checks refuse
Galera's default timing (a member's death would fence every node)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from quartzlite.errors import TransientStoreError
from quartzlite.storage.engine import Database, RetryPolicy, Tx
from quartzlite.storage.node import NodeStore
from quartzlite.storage.safety import Timing, UnsafeDatabase, check_database
from tests.cluster.galera import GaleraCluster

from .conftest import DATABASE

pytestmark = pytest.mark.cluster


def _host_list(galera: GaleraCluster, order: list[int]) -> str:
    hosts = ",".join(f"127.0.0.1:{galera.port(i)}" for i in order)
    return f"mysql+pymysql://root@{hosts}/{DATABASE}"


def test_a_galera_session_reads_causally_and_knows_it_is_on_galera(galera: GaleraCluster) -> None:
    db = Database(_host_list(galera, [0, 1, 2]))
    try:
        with db.connect() as conn:
            assert conn.exec_driver_sql("SELECT @@SESSION.wsrep_sync_wait").scalar() == 1
        assert db.galera
        assert db.member is not None
        assert db.member.port == galera.port(0)
    finally:
        db.dispose()


def test_the_start_up_check_refuses_galeras_default_timing(galera: GaleraCluster) -> None:
    db = Database(galera.url(0, DATABASE))
    try:
        with pytest.raises(UnsafeDatabase) as refused:
            check_database(db, Timing(heartbeat_interval_s=1, fence_after_s=5, session_timeout_s=7))
        assert "evs.suspect_timeout" in refused.value.message
        # With a node whose fence_after leaves room for the default view change, it passes.
        check_database(db, Timing(heartbeat_interval_s=1, fence_after_s=9, session_timeout_s=11))
    finally:
        db.dispose()


def test_two_members_lock_holders_are_ordered_by_certification(galera: GaleraCluster) -> None:
    """Both hold the 'job' lock at once (on two members, nothing blocks); the one that
    commits second fails with 1213 and its write is not applied anywhere."""
    dbs = [Database(galera.url(i, DATABASE)) for i in (0, 1)]
    stores = [NodeStore(db, node_name=f"t:{i}") for i, db in enumerate(dbs)]
    holding = threading.Barrier(2, timeout=30)
    outcomes: dict[int, str] = {}

    def hold(i: int) -> None:
        def tx(t: Tx) -> None:
            stores[i].lock(t.conn, "job")
            t.conn.execute(text("UPDATE ql_locks SET version = version + :n WHERE name = 'session'"),
                           {"n": 10 ** i})
            holding.wait()  # both hold it now
            if i == 1:
                holding.wait()  # member 0 commits first

        try:
            dbs[i].transaction(tx, retry=RetryPolicy(deadline_s=0), name=f"hold{i}")
            outcomes[i] = "committed"
        except TransientStoreError as error:
            outcomes[i] = f"error {error.details.get('mysql_error')}"
        if i == 0:
            holding.wait()

    try:
        for db in dbs:
            assert db.galera or _connect(db)
        threads = [threading.Thread(target=hold, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert outcomes == {0: "committed", 1: "error 1213"}, outcomes
        with dbs[1].connect() as conn:  # causal read: sees member 0's commit
            version = conn.exec_driver_sql("SELECT version FROM ql_locks WHERE name='session'").scalar()
        assert version is not None
        assert (version % 10, version // 10 % 10) == (1, 0), version  # member 0's +1 only
    finally:
        for db in dbs:
            db.dispose()


def _connect(db: Database) -> bool:
    with db.connect():
        pass
    return db.galera


def test_a_host_list_passes_over_an_isolated_member_and_a_dead_one(galera: GaleraCluster) -> None:
    db = Database(_host_list(galera, [2, 1, 0]), io_timeout_s=3)
    try:
        galera.isolate(2)
        try:
            with db.connect() as conn:
                assert conn.exec_driver_sql("SELECT COUNT(*) FROM ql_locks").scalar() == 2
            assert db.member is not None
            assert db.member.port == galera.port(1)
        finally:
            galera.heal(2)
        db.dispose()
        galera.kill9(1)
        try:
            # The survivors stall writes and reads until Galera installs the new view
            # (about evs.suspect_timeout): the retry loop rides through it.
            db.read(lambda conn: conn.exec_driver_sql("SELECT COUNT(*) FROM ql_locks").scalar(),
                    retry=RetryPolicy(deadline_s=60))
            assert db.member is not None
            assert db.member.port in (galera.port(2), galera.port(0))
        finally:
            galera.start(1)
            galera.wait_synced()
    finally:
        db.dispose()
