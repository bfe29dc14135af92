"""Outcomes are facts (issue 10): what a fenced or crashed node knew is recorded, a
fenced node's other writes never commit, and a job that cannot be planned is
quarantined instead of stopping the node. Real database, no node processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, RunStatus
from quartzlite.errors import TransientStoreError
from quartzlite.models import Finished, Fired, Outcome
from quartzlite.node.journal import Journal, orphaned, read_entries
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.engine import Database, Tx
from quartzlite.storage.node import NodeStore
from tests.integration.dbtools import registered_store

pytestmark = pytest.mark.db

SESSION = "b" * 32


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


def fire_now(client: SchedulerClient, store: NodeStore, names: list[str], **extra: object) -> list[Fired]:
    at = client.now() + timedelta(seconds=30)
    client.add_jobs([{"name": n, "schedule": f"@at {at.isoformat()}", "command": "true", **extra}
                     for n in names])
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:1:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    assert len(fired) == len(names)
    return fired


def test_a_transaction_told_to_stop_while_it_ran_never_commits(db_url: str, client: SchedulerClient) -> None:
    """The fence comes while a scanner or firer is inside its transaction: it must not
    commit (before the fix it committed, and retried for up to 10 s past the fence)."""
    db = Database(db_url)
    stop = threading.Event()

    def tx(t: Tx) -> None:
        t.conn.execute(text("UPDATE ql_locks SET version = version + 100 WHERE name = 'job'"))
        stop.set()  # fenced mid-transaction

    try:
        with pytest.raises(TransientStoreError, match="stopped before its commit"):
            db.transaction(tx, stop=stop, name="test")
        with db.connect() as conn:
            version = conn.execute(text("SELECT version FROM ql_locks WHERE name='job'")).scalar()
        assert version == 0
    finally:
        db.dispose()


def test_journaled_outcomes_are_recorded_by_the_next_node(
    client: SchedulerClient, store: NodeStore, tmp_path: Path
) -> None:
    """A node fenced or killed after its runs ended, before its results transaction:
    the journal has the outcomes; the next node records them, so nobody reruns a
    finished run."""
    fired = fire_now(client, store, ["done", "failed", "unknown"])
    by_name = {f.prepared.name: f for f in fired}
    now = client.now()
    journal = Journal(tmp_path, SESSION)
    journal.outcome(Finished(fired=by_name["done"], outcome=Outcome(status=RunStatus.SUCCEEDED,
                             exit_code=0, output="hi\n"), ended_at=now, started_at=now))
    journal.outcome(Finished(fired=by_name["failed"], outcome=Outcome(status=RunStatus.FAILED,
                             exit_code=3, error="exit code 3"), ended_at=now, started_at=now))
    # A live node's journal is never taken.
    with orphaned(tmp_path) as found:
        assert found == []
    journal.close(delete=True)
    assert len(read_entries(tmp_path / f"{SESSION}.jsonl")) == 2, "kept: not recorded yet"

    with orphaned(tmp_path) as found:
        assert [len(entries) for _path, entries in found] == [2]
        for _path, entries in found:
            store.complete(session_id=SESSION, finished=store.journaled(entries),
                           planner=SchedulePlanner())
    assert list(tmp_path.glob("*.jsonl")) == [], "a replayed journal is deleted"
    runs = {r.job_name: r for r in client.list_runs().items}
    assert runs["done"].status is RunStatus.SUCCEEDED
    assert runs["done"].output == "hi\n"
    assert runs["failed"].status is RunStatus.FAILED
    assert runs["unknown"].status is RunStatus.RUNNING  # truly unknown: expiry decides
    jobs = {j.name: j for j in client.list_jobs().items}
    assert jobs["done"].state is JobState.IDLE
    assert jobs["unknown"].state is JobState.EXECUTING


def test_a_recorded_journal_is_emptied(client: SchedulerClient, store: NodeStore, tmp_path: Path) -> None:
    fired = fire_now(client, store, ["one"])
    now = client.now()
    journal = Journal(tmp_path, SESSION)
    journal.outcome(Finished(fired=fired[0], outcome=Outcome(status=RunStatus.SUCCEEDED),
                             ended_at=now, started_at=now))
    assert journal.pending == 1
    journal.recorded([fired[0].run_id])
    assert journal.pending == 0
    assert journal.path.stat().st_size == 0
    journal.close(delete=True)
    assert not journal.path.exists()


def test_an_abandoned_run_that_never_started_runs_its_slot_again(
    client: SchedulerClient, store: NodeStore
) -> None:
    """A fenced node gives back runs it fired ahead but never started: the same slot and
    attempt come due again at once, whatever the recovery policy (nothing ran)."""
    fired = fire_now(client, store, ["waiting"], recovery_policy="skip")
    now = client.now()
    store.complete(session_id=SESSION, planner=SchedulePlanner(), finished=[Finished(
        fired=fired[0], outcome=Outcome(status=RunStatus.ABANDONED, error="never started"),
        ended_at=now, started_at=None)])
    run = client.list_runs().items[0]
    assert run.status is RunStatus.ABANDONED
    assert run.started_at is None, "no start is claimed"
    job = client.get_job("waiting")
    assert job.state is JobState.IDLE
    assert job.next_slot_at == fired[0].prepared.slot_at
    assert job.next_attempt == fired[0].prepared.attempt
    assert job.next_fire_at is not None
    assert job.next_fire_at <= client.now()


def test_a_job_that_cannot_be_planned_is_quarantined_not_fatal(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    """A stored schedule the planner cannot handle (written before validation existed,
    or by hand) pauses that job with its reason; the transaction and the other jobs go
    on (before the fix the exception escaped and crashed the node's thread)."""
    fired = fire_now(client, store, ["poison", "fine"])
    db = Database(db_url)
    try:
        with db.connect() as conn:
            # By hand, as an operator must: with a new stamp (nodes keep a definition they
            # have read until updated_at changes).
            conn.execute(text("UPDATE ql_jobs SET schedule='@every banana', updated_at=NOW(6) "
                              "WHERE name='poison'"))
    finally:
        db.dispose()
    now = client.now()
    store.complete(session_id=SESSION, planner=SchedulePlanner(), finished=[
        Finished(fired=f, outcome=Outcome(status=RunStatus.SUCCEEDED), ended_at=now, started_at=now)
        for f in fired
    ])
    poison = client.get_job("poison")
    assert poison.spec.paused
    assert poison.state is JobState.IDLE
    assert poison.error is not None
    assert "quarantined" in poison.error
    statuses = sorted(r.status.value for r in client.list_runs(job="poison").items)
    assert statuses == ["quarantined", "succeeded"]
    assert client.get_job("fine").state is JobState.IDLE
    assert not client.get_job("fine").spec.paused
    # Fixing the job (a valid schedule) clears the quarantine.
    client.update_job("poison", {"schedule": "@every 1h", "paused": False})
    assert client.get_job("poison").error is None


def test_a_definition_changed_while_its_run_executes_is_what_the_result_plans_with(
    client: SchedulerClient, store: NodeStore
) -> None:
    """The node keeps the definitions it has read (a cache keyed by updated_at): an edit
    made while a run executes must still decide the job's next fire when it ends."""
    fired = fire_now(client, store, ["edited", "kept"])
    assert len(store.specs) == 2
    client.update_job("edited", {"schedule": "@every 1h"})
    now = client.now()
    store.complete(session_id=SESSION, planner=SchedulePlanner(), finished=[
        Finished(fired=f, outcome=Outcome(status=RunStatus.SUCCEEDED), ended_at=now, started_at=now)
        for f in fired
    ])
    edited = client.get_job("edited")
    assert edited.state is JobState.IDLE
    assert edited.next_fire_at is not None
    # @every 1h from the slot (planned 30 s from now), where the old @at had no next.
    assert timedelta(minutes=59) < edited.next_fire_at - now <= timedelta(hours=1, seconds=40)
    # The one-shot job that was not edited is done: nothing more to fire.
    assert client.get_job("kept").next_fire_at is None
    reads = store.specs.reads
    stamp = edited.updated_at.replace(tzinfo=None)  # as stored
    assert store.specs.get(edited.id, stamp) is not None, "the new definition is kept"
    assert reads == 3, "read once each at prepare, and the edited one again"
