"""Each edge's guard, on the real database: a statement for an edge moves a job only
from the state (and owner, fire id) it is guarded by; anything else stays put."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from quartzlite.client import SchedulerClient
from quartzlite.storage import transitions
from quartzlite.storage.engine import Database
from quartzlite.storage.tables import jobs

ME, PEER = "session-me", "session-peer"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def conn(db_url: str, client: SchedulerClient) -> Iterator[Connection]:
    client.add_job({"name": "j", "schedule": "@every 1h", "command": "true"})
    db = Database(db_url)
    with db.connect() as connection:
        yield connection
    db.dispose()


def job_id(conn: Connection) -> int:
    return int(conn.execute(select(jobs.c.id).where(jobs.c.name == "j")).scalar_one())


def put(conn: Connection, state: str, owner: str | None = None, fire_id: str | None = None,
        **values: object) -> int:
    """Force the job into a state (test setup only: this is what the edges guard against)."""
    jid = job_id(conn)
    conn.execute(update(jobs).where(jobs.c.id == jid).values(
        state=state, owner_session=owner, fire_id=fire_id, **values))
    return jid


def state(conn: Connection) -> tuple[str, str | None, str | None]:
    row = conn.execute(select(jobs.c.state, jobs.c.owner_session, jobs.c.fire_id)
                       .where(jobs.c.name == "j")).one()
    return row[0], row[1], row[2]


def test_prepare_takes_only_an_idle_job(conn: Connection) -> None:
    jid = put(conn, "prepared", PEER, "peer:1:1")
    assert transitions.prepare(conn, job_ids=[jid], session_id=ME, fire_prefix="me:1:") == 0
    assert state(conn) == ("prepared", PEER, "peer:1:1")
    put(conn, "idle")
    assert transitions.prepare(conn, job_ids=[jid], session_id=ME, fire_prefix="me:1:") == 1
    assert state(conn) == ("prepared", ME, f"me:1:{jid}")


@pytest.mark.parametrize("change", [
    {"owner": PEER}, {"fire_id": "me:9:9"}, {"paused": True}, {"deleted": True},
    {"state": "idle"}, {"state": "executing"},
])
def test_fire_needs_our_prepared_job_unchanged(conn: Connection, change: dict[str, object]) -> None:
    setup: dict[str, object] = {"state": "prepared", "owner": ME, "fire_id": "me:1:1"}
    setup.update(change)
    jid = put(conn, **setup)  # type: ignore[arg-type]
    assert transitions.fire(conn, job_ids=[jid], fire_ids=["me:1:1"], session_id=ME,
                            now=NOW) == 0
    assert state(conn)[0] == setup["state"]


def test_fire_moves_our_prepared_job(conn: Connection) -> None:
    jid = put(conn, "prepared", ME, "me:1:1")
    assert transitions.fire(conn, job_ids=[jid], fire_ids=["me:1:1"], session_id=ME, now=NOW) == 1
    assert state(conn) == ("executing", ME, "me:1:1")


def test_result_leaves_a_run_taken_over(conn: Connection) -> None:
    jid = put(conn, "executing", PEER, "peer:2:1")
    values = [{"id": jid, "fire_id": "me:1:1", "last_ended_at": NOW, "next_fire_at": NOW,
               "next_slot_at": NOW, "next_attempt": 1, "runs_done": 1, "last_outcome": "failed"}]
    transitions.result(conn, values)
    assert state(conn) == ("executing", PEER, "peer:2:1")
    assert conn.execute(select(jobs.c.runs_done).where(jobs.c.id == jid)).scalar_one() == 0
    put(conn, "executing", ME, "me:1:1")
    transitions.result(conn, values)
    assert state(conn) == ("idle", None, None)
    assert conn.execute(select(jobs.c.runs_done).where(jobs.c.id == jid)).scalar_one() == 1, (
        "the result counts the run in the same statement")
    assert conn.execute(select(jobs.c.last_outcome).where(jobs.c.id == jid)).scalar_one() == (
        "failed"), "and remembers its outcome (webhooks' run.recovered)"


def test_hand_back_never_touches_a_running_job(conn: Connection) -> None:
    jid = put(conn, "executing", ME, "me:1:1")
    assert transitions.hand_back(conn, jobs.c.id == jid) == 0
    assert state(conn) == ("executing", ME, "me:1:1")
    put(conn, "prepared", ME, "me:1:1")
    assert transitions.hand_back(conn, jobs.c.id == jid, paused=True) == 1
    assert state(conn) == ("idle", None, None)


def test_trigger_refuses_a_running_job(conn: Connection) -> None:
    jid = put(conn, "executing", ME, "me:1:1")
    assert transitions.trigger(conn, jid, NOW) == 0
    put(conn, "prepared", ME, "me:1:1")
    assert transitions.trigger(conn, jid, NOW) == 1
    assert state(conn) == ("idle", None, None)


@pytest.mark.parametrize("edge", [transitions.abandon, transitions.refuse_duplicate])
def test_abandon_and_refuse_need_the_same_fire(conn: Connection, edge: object) -> None:
    jid = put(conn, "executing", PEER, "peer:2:1")
    kwargs = {"job_id": jid, "fire_id": "me:1:1", "planned_at": NOW, "slot_at": NOW, "attempt": 1}
    assert edge(conn, **kwargs) == 0  # type: ignore[operator]
    put(conn, "prepared", ME, "me:1:1")
    assert edge(conn, **kwargs) == 0, "only from executing"  # type: ignore[operator]
    put(conn, "executing", ME, "me:1:1")
    assert edge(conn, **kwargs) == 1  # type: ignore[operator]
    assert state(conn) == ("idle", None, None)


def test_quarantine_pauses_with_the_reason(conn: Connection) -> None:
    jid = put(conn, "executing", ME, "me:1:1")
    assert transitions.quarantine(conn, job_id=jid, fire_id="other", reason="x", now=NOW) == 0
    assert transitions.quarantine(conn, job_id=jid, fire_id="me:1:1", reason="bad", now=NOW) == 1
    row = conn.execute(select(jobs.c.state, jobs.c.paused, jobs.c.error)
                       .where(jobs.c.id == jid)).one()
    assert (row[0], bool(row[1]), row[2]) == ("idle", True, "bad")
