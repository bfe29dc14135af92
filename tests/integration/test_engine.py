"""The database layer against the real server: retries, lock waits, idle holders."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from quartzlite.errors import TransientStoreError
from quartzlite.storage.engine import Database, RetryPolicy, Tx

LOCK = text("SELECT name FROM ql_locks WHERE name = 'job' FOR UPDATE")


def test_a_silent_holder_of_a_lock_loses_it_and_waiters_get_through(db_url: str) -> None:
    """A node frozen inside a locked transaction must not stall the cluster for hours:
    its connections carry a short wait_timeout, so the server rolls it back."""
    frozen = Database(db_url, idle_timeout_s=2, lock_wait_timeout_s=1)
    waiter = Database(db_url, lock_wait_timeout_s=1)
    holder = frozen.engine.connect()
    try:
        holder.execute(LOCK)  # ...and then says nothing more
        got = waiter.transaction(
            lambda t: t.conn.execute(LOCK).scalar(), retry=RetryPolicy(deadline_s=20),
            name="waiter",
        )
        assert got == "job"
        with pytest.raises(OperationalError):
            holder.execute(text("SELECT 1"))  # the server closed the silent holder
    finally:
        holder.invalidate()
        frozen.dispose()
        waiter.dispose()


def test_lock_wait_timeouts_are_retried_then_reported(db_url: str) -> None:
    holder_db = Database(db_url)
    waiter = Database(db_url, lock_wait_timeout_s=1)
    attempts: list[int] = []

    def take(t: Tx) -> object:
        attempts.append(len(attempts) + 1)
        return t.conn.execute(LOCK).scalar()

    try:
        with holder_db.engine.connect() as holder:
            holder.execute(LOCK)
            with pytest.raises(TransientStoreError) as caught:
                waiter.transaction(take, retry=RetryPolicy(deadline_s=2.5), name="waiter")
            holder.rollback()
        assert caught.value.details["mysql_error"] == 1205
        assert len(attempts) >= 2, "retried after the first lock wait timeout"
        assert waiter.checked_out() == 0
    finally:
        holder_db.dispose()
        waiter.dispose()


def test_reads_use_autocommit_and_leave_nothing_open(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert db.read(lambda conn: conn.execute(text("SELECT @@autocommit")).scalar()) == 1
        with db.connect() as conn:
            assert conn.execute(text("SELECT @@time_zone")).scalar() == "+00:00"
        assert db.checked_out() == 0
    finally:
        db.dispose()


def test_a_snapshot_reads_one_moment_while_others_commit(db_url: str) -> None:
    """A job view reads the job and its last run in one snapshot: a commit between the
    two reads (the results transaction ending a run) must not show the job executing
    beside a run already ended. Each read on its own sees the latest commit."""
    db = Database(db_url)
    other = Database(db_url)
    query = text("SELECT name FROM ql_locks WHERE name = 'job'")
    try:
        with db.snapshot() as conn:
            assert conn.execute(query).scalar() == "job"
            other.transaction(lambda t: t.conn.execute(
                text("UPDATE ql_locks SET name = 'job-renamed' WHERE name = 'job'")))
            assert conn.execute(query).scalar() == "job", "the snapshot moved"
        with db.connect() as conn:
            assert conn.execute(query).scalar() is None  # the commit is there
        assert db.checked_out() == 0
    finally:
        other.transaction(lambda t: t.conn.execute(
            text("UPDATE ql_locks SET name = 'job' WHERE name = 'job-renamed'")))
        db.dispose()
        other.dispose()
