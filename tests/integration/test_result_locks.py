"""A node records results under row locks on its own running jobs, not under the job
lock, and every other writer of a running job's row reads it ``FOR UPDATE``.

Each test puts a real result transaction in flight and holds it there: another
connection locks the run row, so the result has locked its job's row and waits to
update the run. Then the competing writer starts, and the run row is let go."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, pool, select, text

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, RunStatus
from quartzlite.models import Finished, Fired, Outcome
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.engine import Database
from quartzlite.storage.node import NodeStore
from quartzlite.storage.tables import runs
from tests.cluster.harness import wait_until
from tests.integration.dbtools import connect, job_rows

pytestmark = pytest.mark.db

OURS, PEER = "a" * 32, "b" * 32


@pytest.fixture
def stores(db_url: str) -> Iterator[tuple[NodeStore, NodeStore]]:
    dbs = [Database(db_url, lock_wait_timeout_s=10) for _ in range(2)]
    found = tuple(NodeStore(db, node_name=f"test:{i}") for i, db in enumerate(dbs))
    for store, session in zip(found, (OURS, PEER), strict=True):
        store.register(session_id=session, host="test", pid=1, capacity=10, tags=(), version="t")
    yield found
    for db in dbs:
        db.dispose()


def _fired(client: SchedulerClient, store: NodeStore, **job: Any) -> Fired:
    """One job of ours, prepared and fired (running)."""
    at = client.now() + timedelta(seconds=20)
    client.add_job({"name": "j", "schedule": f"@at {at.isoformat()}", "command": "true", **job})
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=OURS, fire_prefix=f"{OURS}:1:", limit=10,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    fired, lost = store.fire(session_id=OURS, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    assert len(fired) == 1
    return fired[0]


def _finished(fired: Fired) -> Finished:
    now = datetime.now(UTC)
    return Finished(fired=fired, outcome=Outcome(status=RunStatus.SUCCEEDED, exit_code=0),
                    ended_at=now, started_at=now)


def _lock_waits(url: str) -> int:
    with connect(url) as conn:
        return int(conn.execute(text(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
        )).scalar_one())


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - the test reports it
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


@contextmanager
def _run_row_held(url: str, run_id: int) -> Iterator[None]:
    """Another transaction holds the run row's lock until the block ends."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(select(runs.c.id).where(runs.c.id == run_id).with_for_update())
            yield
            conn.rollback()
    finally:
        engine.dispose()


@contextmanager
def _result_in_flight(url: str, store: NodeStore, fired: Fired) -> Iterator[dict[str, Any]]:
    """A result of ``fired`` recorded by ``store``, held after it locked its job's row.
    The block runs while it is held; the result commits as the block ends."""
    with _run_row_held(url, fired.run_id):
        thread, box = _in_thread(lambda: store.complete(
            session_id=OURS, finished=[_finished(fired)], planner=SchedulePlanner()))
        wait_until(lambda: _lock_waits(url) >= 1, timeout=20, message="the result waits for the run row")
        yield box
    thread.join(20)
    assert "error" not in box, box.get("error")


def test_a_result_is_recorded_while_a_peer_holds_the_job_lock(
    client: SchedulerClient, stores: tuple[NodeStore, NodeStore], db_url: str
) -> None:
    ours, _ = stores
    fired = _fired(client, ours)
    engine = create_engine(db_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as holder:
            holder.execute(text("SELECT name FROM ql_locks WHERE name = 'job' FOR UPDATE"))
            thread, box = _in_thread(lambda: ours.complete(
                session_id=OURS, finished=[_finished(fired)], planner=SchedulePlanner()))
            thread.join(30)
            # Recorded while the job lock was still held by the other transaction.
            assert "value" in box, box.get("error", "the result waited for the job lock")
            holder.rollback()
    finally:
        engine.dispose()
    job = client.get_job("j")
    assert job.state is JobState.IDLE
    assert job.owner_session is None
    assert [r.status for r in client.list_runs().items] == [RunStatus.SUCCEEDED]


def test_expiry_waits_for_a_result_in_flight_and_claims_nothing_it_recorded(
    client: SchedulerClient, stores: tuple[NodeStore, NodeStore], db_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ours, peer = stores
    fired = _fired(client, ours, recovery_policy="skip")
    with connect(db_url) as conn:  # our node went silent: the peer may expire it
        conn.execute(text("UPDATE ql_sessions SET heartbeat_at = NOW(6) - INTERVAL 1 HOUR "
                          "WHERE id = :s"), {"s": OURS})
    caplog.set_level(logging.WARNING, logger="quartzlite.storage.node")
    with _result_in_flight(db_url, ours, fired):
        expiry, box = _in_thread(lambda: peer.expire_sessions(
            session_id=PEER, session_timeout_s=5, planner=SchedulePlanner()))
        # The peer has the session and job locks, and waits for the job's row.
        wait_until(lambda: _lock_waits(db_url) >= 2, timeout=20, message="expiry waits for the row")
    expiry.join(20)
    assert box.get("value") == [OURS], box
    runs_now = client.list_runs().items
    assert [r.status for r in runs_now] == [RunStatus.SUCCEEDED], "the recorded run was abandoned"
    (row,) = job_rows(db_url)
    assert row["state"] == JobState.IDLE.value
    assert row["fire_id"] is None
    expired = [r.getMessage() for r in caplog.records if "expired 1 session" in r.getMessage()]
    assert expired, "the peer did not expire our session"
    assert "0 run(s) abandoned" in expired[0], expired


def test_a_schedule_changed_while_a_result_is_in_flight_plans_the_next_fire(
    client: SchedulerClient, stores: tuple[NodeStore, NodeStore], db_url: str
) -> None:
    ours, _ = stores
    fired = _fired(client, ours)
    with _result_in_flight(db_url, ours, fired):
        update, box = _in_thread(lambda: client.update_job("j", {"schedule": "@every 1h"}))
        wait_until(lambda: _lock_waits(db_url) >= 2, timeout=20, message="the update waits for the row")
    update.join(20)
    assert "error" not in box, box.get("error")
    job = client.get_job("j")
    # The one-shot's result left no next fire; the update that followed it planned one.
    assert job.state is JobState.IDLE
    assert job.next_fire_at is not None, "the update planned nothing: it decided on a stale read"
