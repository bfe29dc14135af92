"""What ``SELECT ... FOR UPDATE`` means on Galera, where quartzlite takes its named locks
(ql_locks rows) that way: row locks are local to a member. A lock held on one member never
blocks a transaction on another; conflicts are found only when write sets are certified
at commit, and only for rows both transactions WROTE (a row read FOR UPDATE is not part of
the write set). The loser gets error 1213 (ER_LOCK_DEADLOCK)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from tests.cluster.galera import GaleraCluster, rows, wsrep_error

pytestmark = pytest.mark.cluster

DB = "ql_galera_lock"
DEADLOCK = 1213
DEADLOCK_TEXT = "Deadlock found when trying to get lock; try restarting transaction"


@pytest.fixture
def tables(galera: GaleraCluster) -> Iterator[None]:
    conn = galera.connect(0)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute(f"CREATE DATABASE {DB}")
            cur.execute(f"CREATE TABLE {DB}.locks (name VARCHAR(32) PRIMARY KEY, "
                        "version BIGINT NOT NULL)")
            cur.execute(f"CREATE TABLE {DB}.work (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                        "who VARCHAR(8) NOT NULL)")
            cur.execute(f"INSERT INTO {DB}.locks VALUES ('plan', 0)")
        yield
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
    finally:
        conn.close()


def session(galera: GaleraCluster, i: int) -> pymysql.connections.Connection[Any]:
    conn = galera.connect(i, DB, autocommit=False, read_timeout=30)
    with conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")  # reads see every earlier commit
        cur.execute("SET SESSION innodb_lock_wait_timeout = 5")
    return conn


def timed(conn: pymysql.connections.Connection[Any], sql: str) -> float:
    started = time.monotonic()
    rows(conn, sql)
    return time.monotonic() - started


LOCK = "SELECT version FROM locks WHERE name = 'plan' FOR UPDATE"
BUMP = "UPDATE locks SET version = version + 1 WHERE name = 'plan'"


def bump_and_commit(conn: pymysql.connections.Connection[Any]) -> None:
    rows(conn, BUMP)
    conn.commit()


def read(galera: GaleraCluster, sql: str) -> list[tuple[object, ...]]:
    conn = session(galera, 2)
    try:
        return rows(conn, sql)
    finally:
        conn.close()


@pytest.mark.usefixtures("tables")
def test_for_update_on_two_members_does_not_exclude_when_only_other_rows_are_written(
        galera: GaleraCluster) -> None:
    """Both hold "the lock" at once, and both commit: no mutual exclusion."""
    a, b = session(galera, 0), session(galera, 1)
    try:
        assert timed(a, LOCK) < 1
        assert timed(b, LOCK) < 1  # not blocked by a's lock on member 0
        rows(a, "INSERT INTO work (who) VALUES ('a')")
        rows(b, "INSERT INTO work (who) VALUES ('b')")
        a.commit()
        b.commit()
    finally:
        a.close()
        b.close()
    assert read(galera, "SELECT who FROM work ORDER BY id") == [("a",), ("b",)]


@pytest.mark.usefixtures("tables")
def test_when_both_write_the_lock_row_the_later_commit_fails_with_1213(
        galera: GaleraCluster) -> None:
    a, b = session(galera, 0), session(galera, 1)
    try:
        rows(a, LOCK)
        assert timed(b, LOCK) < 1
        rows(a, BUMP)
        rows(b, BUMP)  # no wait either: b's row lock is on member 1
        a.commit()
        with pytest.raises(pymysql.err.OperationalError) as lost:
            b.commit()  # certification fails: a's write set touched the same row first
        assert wsrep_error(lost.value) == DEADLOCK
        assert str(lost.value.args[1]) == DEADLOCK_TEXT
    finally:
        a.close()
        b.close()
    assert read(galera, "SELECT version FROM locks") == [(1,)]


@pytest.mark.usefixtures("tables")
def test_a_replicated_commit_aborts_the_local_holder_of_the_lock(
        galera: GaleraCluster) -> None:
    """a holds the row FOR UPDATE on member 0; b writes it on member 1 without waiting and
    commits; applying b's write set on member 0 brute-force aborts a, whose next
    statement (or its commit) fails with 1213."""
    a, b = session(galera, 0), session(galera, 1)
    try:
        rows(a, LOCK)
        assert timed(b, BUMP) < 1
        b.commit()
        # Member 0 applied b's commit (a causal read there waits for it).
        check = session(galera, 0)
        try:
            assert rows(check, "SELECT version FROM locks") == [(1,)]
        finally:
            check.close()
        with pytest.raises(pymysql.err.OperationalError) as lost:
            bump_and_commit(a)
        assert wsrep_error(lost.value) == DEADLOCK
        assert str(lost.value.args[1]) == DEADLOCK_TEXT
    finally:
        a.close()
        b.close()
    assert read(galera, "SELECT version FROM locks") == [(1,)]


@pytest.mark.usefixtures("tables")
def test_on_one_member_for_update_blocks_as_on_a_single_server(galera: GaleraCluster) -> None:
    a, b = session(galera, 0), session(galera, 0)
    try:
        with b.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        rows(a, LOCK)
        started = time.monotonic()
        with pytest.raises(pymysql.err.OperationalError) as waited:
            rows(b, LOCK)
        assert wsrep_error(waited.value) == 1205  # lock wait timeout
        assert time.monotonic() - started >= 0.9
    finally:
        a.close()
        b.close()
