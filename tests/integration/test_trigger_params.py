"""Trigger parameters and live output in storage (real database, no node process): the
trigger writes the slot's request, the fire transaction copies its params into every
attempt's run row and hands them to the node, invalid params write nothing, requests are
pruned with the history; live output is written only to running rows of the same fire
and kept when the run is abandoned."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from quartzlite.client import SchedulerClient
from quartzlite.enums import RunStatus
from quartzlite.errors import Conflict, ValidationError
from quartzlite.models import Finished, Fired, Outcome
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.jobs import JobStore
from quartzlite.storage.node import LiveTail, NodeStore
from tests.integration.dbtools import connect, job_lock_version, job_rows, registered_store

pytestmark = pytest.mark.db

SESSION = "c" * 32


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


def fire_due(store: NodeStore, batch: int = 1) -> list[Fired]:
    """Prepare and fire everything due within a minute, as a node would."""
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:{batch}:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    return fired


def finish(store: NodeStore, client: SchedulerClient, fired: Fired, status: RunStatus,
           output: str = "") -> None:
    now = client.now()
    store.complete(session_id=SESSION, planner=SchedulePlanner(), finished=[Finished(
        fired=fired, outcome=Outcome(status=status, exit_code=0 if status is RunStatus.SUCCEEDED
                                     else 1, output=output),
        ended_at=now, started_at=now)])


def requests_of(db_url: str) -> list[tuple[object, ...]]:
    with connect(db_url) as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT job_id, params, cause, upstream_run_id FROM ql_requests ORDER BY id"))]


def test_params_reach_the_fired_run_and_every_attempt_of_the_slot(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    job = client.add_job({"name": "flaky", "schedule": "0 0 1 1 *", "command": "true",
                          "max_attempts": 2, "retry_backoff_s": 0.1})
    params = {"who": "me", "n": 3, "ratio": 0.5, "dry_run": False, "nothing": None}
    triggered = client.trigger_job("flaky", params)
    assert triggered.next_slot_at == triggered.next_fire_at
    assert requests_of(db_url) == [
        (job.id, '{"dry_run":false,"n":3,"nothing":null,"ratio":0.5,"who":"me"}', "trigger", None)]

    first = fire_due(store)
    assert [f.params for f in first] == [params]
    finish(store, client, first[0], RunStatus.FAILED)

    retry = fire_due(store, batch=2)
    assert [(f.prepared.attempt, f.prepared.slot_at) for f in retry] == [
        (2, first[0].prepared.slot_at)]
    assert retry[0].params == params, "a retry of the slot keeps its params"
    finish(store, client, retry[0], RunStatus.SUCCEEDED)

    runs = client.list_runs(job="flaky").items
    assert [(r.attempt, r.status, r.params) for r in runs] == [
        (2, RunStatus.SUCCEEDED, params), (1, RunStatus.FAILED, params)]
    assert client.get_run(runs[0].id).params == params


def test_a_trigger_without_params_is_a_run_without_params(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "plain", "schedule": "0 0 1 1 *", "command": "true"})
    client.trigger_job("plain", {"who": "first"})
    client.trigger_job("plain")  # a fresh slot: the first request is left behind
    client.trigger_job("plain", {})
    fired = fire_due(store)
    assert [f.params for f in fired] == [None]
    assert len(requests_of(db_url)) == 1
    finish(store, client, fired[0], RunStatus.SUCCEEDED)
    assert client.list_runs(job="plain").items[0].params is None


def test_invalid_params_are_refused_naming_the_field_and_write_nothing(
    client: SchedulerClient, db_url: str
) -> None:
    client.add_job({"name": "nightly", "schedule": "0 0 1 1 *", "command": "true"})
    before, version = job_rows(db_url), job_lock_version(db_url)
    for params, field in [
        ({"ok": 1, "bad-name": 2}, "params"),
        ({"deep": {"x": 1}}, "params.deep"),
        ({"long": "x" * 5000}, "params.long"),
        ([1, 2], "params"),
    ]:
        with pytest.raises(ValidationError) as raised:
            client.trigger_job("nightly", params)  # type: ignore[arg-type]
        assert raised.value.field == field
    assert job_rows(db_url) == before
    assert job_lock_version(db_url) == version, "refused before the transaction"
    assert requests_of(db_url) == []


def test_a_refused_trigger_leaves_no_request(client: SchedulerClient, db_url: str) -> None:
    client.add_job({"name": "paused", "schedule": "0 0 1 1 *", "command": "true", "paused": True})
    with pytest.raises(Conflict):
        client.trigger_job("paused", {"who": "me"})
    assert requests_of(db_url) == []


def test_requests_are_pruned_once_old_and_their_slot_left(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "done", "schedule": "0 0 1 1 *", "command": "true"})
    client.add_job({"name": "waiting", "schedule": "0 0 1 1 *", "command": "true",
                    "paused": False})
    client.trigger_job("done", {"a": 1})
    finish(store, client, fire_due(store)[0], RunStatus.SUCCEEDED)
    client.trigger_job("waiting", {"b": 2})  # due, not fired yet: its request is in use
    with connect(db_url) as conn:
        conn.execute(text("UPDATE ql_requests SET created_at = created_at - INTERVAL 2 DAY"))
    pruned = JobStore(store.db).prune_history(86400)
    assert pruned.requests == 1
    assert [r[1] for r in requests_of(db_url)] == ['{"b":2}']
    fired = fire_due(store, batch=2)
    assert [f.params for f in fired] == [{"b": 2}]


# -- live output -----------------------------------------------------------------------


def test_live_output_goes_only_to_running_rows_of_the_same_fire(
    client: SchedulerClient, store: NodeStore
) -> None:
    client.add_job({"name": "a", "schedule": "0 0 1 1 *", "command": "true"})
    client.add_job({"name": "b", "schedule": "0 0 1 1 *", "command": "true"})
    client.trigger_job("a")
    client.trigger_job("b")
    fired = {f.prepared.name: f for f in fire_due(store)}
    a, b = fired["a"], fired["b"]

    store.write_output([LiveTail(run_id=a.run_id, fire_id=a.prepared.fire_id, output="a so far"),
                        LiveTail(run_id=b.run_id, fire_id="someone-else", output="stale")])
    assert client.get_run(a.run_id).output == "a so far"
    assert client.get_run(b.run_id).output == ""

    finish(store, client, a, RunStatus.SUCCEEDED, output="a final")
    store.write_output([LiveTail(run_id=a.run_id, fire_id=a.prepared.fire_id, output="late")])
    assert client.get_run(a.run_id).output == "a final", "a finished run's output is final"


def test_an_abandoned_run_keeps_the_output_written_while_it_ran(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "long", "schedule": "0 0 1 1 *", "command": "sleep 600",
                    "recovery_policy": "skip"})
    client.trigger_job("long")
    fired = fire_due(store)[0]
    store.write_output([LiveTail(run_id=fired.run_id, fire_id=fired.prepared.fire_id,
                                 output="line 1\nline 2\n")])
    # Its node dies: a peer expires its session.
    with connect(db_url) as conn:
        conn.execute(text("UPDATE ql_sessions SET heartbeat_at = heartbeat_at - INTERVAL 1 HOUR"))
    peer = NodeStore(store.db, node_name="peer:2")
    peer.register(session_id="d" * 32, host="peer", pid=2, capacity=1, tags=(), version="t")
    assert peer.expire_sessions(session_id="d" * 32, session_timeout_s=7,
                                planner=SchedulePlanner()) == [SESSION]
    run = client.get_run(fired.run_id)
    assert run.status is RunStatus.ABANDONED
    assert run.output == "line 1\nline 2\n"
    assert client.now() - run.ended_at < timedelta(minutes=1)  # type: ignore[operator]
