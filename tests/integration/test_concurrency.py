"""Concurrent and broadcast jobs in the node's SQL, against the real database without node
processes: a job's slots go to its lanes under the job lock, each slot once (once per
shard), a job waits while its lanes are busy, and the client's writes reach the lanes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.enums import RunStatus
from quartzlite.errors import Conflict
from quartzlite.models import Finished, Fired, Outcome, Prepared, Shard
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.node import NodeStore
from tests.integration.dbtools import connect, job_rows, naive, registered_store, set_job

pytestmark = pytest.mark.db

A, B, C = "a" * 32, "b" * 32, "c" * 32


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, A)


def scan(store: NodeStore, session: str = A, planner: SchedulePlanner | None = None
         ) -> list[Prepared]:
    return store.prepare_due(session_id=session, fire_prefix=f"{session}:1:", limit=100,
                             tag_sets=[""], look_ahead_s=60,
                             planner=planner or SchedulePlanner()).prepared


def fire(store: NodeStore, items: Sequence[Prepared], session: str = A) -> list[Fired]:
    fired, lost = store.fire(session_id=session, items=items, planner=SchedulePlanner(),
                             ahead_s=120)
    assert lost == []
    return fired


def finish(store: NodeStore, fired: Sequence[Fired], session: str = A,
           status: RunStatus = RunStatus.SUCCEEDED) -> None:
    for f in fired:
        store.complete(session_id=session, planner=SchedulePlanner(), finished=[
            Finished(fired=f, outcome=Outcome(status=status), ended_at=f.fired_at,
                     started_at=f.fired_at)
        ])


def lanes(url: str, name: str) -> list[dict[str, object]]:
    parent = next(r for r in job_rows(url) if r["active_name"] == name)
    return [r for r in job_rows(url) if r["parent_id"] == parent["id"]]


def due_now(client: SchedulerClient, url: str, name: str) -> None:
    at = client.now() - timedelta(milliseconds=500)
    set_job(url, name, next_fire_at=naive(at), next_slot_at=naive(at))


def wide_job_due(client: SchedulerClient, url: str) -> None:
    """Job ``wide``: every second, 2 runs at once, its first slot due."""
    client.add_job({"name": "wide", "schedule": "@every 1s", "command": "true",
                    "max_concurrency": 2})
    due_now(client, url, "wide")


def test_a_concurrent_job_runs_up_to_max_concurrency_slots_at_once_each_once(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    wide_job_due(client, db_url)

    first = scan(store)
    assert [(p.name, p.parent_id is not None, p.shard) for p in first] == [("wide", True, None)]
    fired_first = fire(store, first)
    # The job moved on to its next slot, which goes to a second lane while the first runs.
    second = scan(store)
    assert len(second) == 1
    assert second[0].job_id != first[0].job_id
    assert second[0].slot_at > first[0].slot_at
    fired_second = fire(store, second)
    # Both lanes busy: the job waits (saturated), its next slot stays.
    assert scan(store) == []
    parent = client.get_job("wide")
    assert parent.next_fire_at is not None
    assert [j.name for j in client.list_jobs().items] == ["wide"], "lanes are not listed"

    runs = client.list_runs(job="wide").items
    assert {r.job_id for r in runs} == {parent.id}, "a lane's runs are its job's"
    assert len({r.planned_at for r in runs}) == 2
    assert all(r.shard is None for r in runs)

    # A lane frees: the waiting slot goes to it.
    finish(store, fired_first)
    third = scan(store)
    assert len(third) == 1
    assert third[0].job_id == first[0].job_id
    assert third[0].slot_at > second[0].slot_at
    finish(store, fired_second)
    finish(store, fire(store, third))
    runs = client.list_runs(job="wide").items
    assert len(runs) == 3
    assert len({r.slot_at for r in runs}) == 3
    assert all(r.status is RunStatus.SUCCEEDED for r in runs)
    assert len(lanes(db_url, "wide")) == 2


def test_a_lane_keeps_its_slot_through_retries(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "retrying", "schedule": "@every 1h", "command": "false",
                    "max_concurrency": 3, "max_attempts": 2, "retry_backoff_s": 0.001})
    due_now(client, db_url, "retrying")
    first = scan(store)
    finish(store, fire(store, first), status=RunStatus.FAILED)
    (lane,) = lanes(db_url, "retrying")
    assert lane["next_attempt"] == 2
    assert lane["next_slot_at"] == naive(first[0].slot_at)
    retry = scan(store)
    assert [(p.job_id, p.attempt, p.slot_at) for p in retry] == [
        (first[0].job_id, 2, first[0].slot_at)]
    finish(store, fire(store, retry), status=RunStatus.FAILED)
    (lane,) = lanes(db_url, "retrying")
    assert (lane["state"], lane["next_fire_at"]) == ("idle", None), "free once the slot ends"
    assert [r.attempt for r in client.list_runs(job="retrying").items] == [2, 1]


def test_broadcast_gives_each_live_node_one_shard_and_forgets_a_node_that_left(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    for session in (B, C):
        store.register(session_id=session, host="test", pid=2, capacity=10, tags=(),
                       version="t")
    client.add_job({"name": "everywhere", "schedule": "@every 1h", "command": "true",
                    "broadcast": True})
    due_now(client, db_url, "everywhere")

    mine = scan(store, A)
    assert len(mine) == 1
    assert mine[0].shard is not None
    assert mine[0].shard.total == 3
    theirs = scan(store, B)
    assert len(theirs) == 1
    assert theirs[0].shard is not None
    fired_a, fired_b = fire(store, mine, A), fire(store, theirs, B)
    runs = client.list_runs(job="everywhere").items
    assert sorted((r.shard.index, r.shard.total) for r in runs if r.shard) == sorted(
        [(mine[0].shard.index, 3), (theirs[0].shard.index, 3)])
    assert len({r.planned_at for r in runs}) == 1, "the shards of one slot"
    # Until every shard of the slot is done (C has not even prepared its own), the next
    # slot waits.
    due_now(client, db_url, "everywhere")
    finish(store, fired_a, A)
    finish(store, fired_b, B)
    assert scan(store, A) == []

    # C leaves (its session expires): its shard is recorded missed, its lane goes, and
    # the next slot goes to the two nodes left.
    with connect(db_url) as conn:
        conn.exec_driver_sql(
            "UPDATE ql_sessions SET heartbeat_at = NOW(6) - INTERVAL 1 HOUR WHERE id = %s", (C,))
    assert store.expire_sessions(session_id=A, session_timeout_s=60,
                                 planner=SchedulePlanner()) == [C]
    missed = [r for r in client.list_runs(job="everywhere").items if r.status is RunStatus.MISSED]
    assert len(missed) == 1
    assert missed[0].shard is not None
    assert {lane["pinned_session"] for lane in lanes(db_url, "everywhere")} == {A, B}

    due_now(client, db_url, "everywhere")
    mine = scan(store, A)
    theirs = scan(store, B)
    assert {p.shard for p in mine + theirs} == {Shard(index=0, total=2), Shard(index=1, total=2)}
    fire(store, mine, A)
    fire(store, theirs, B)


def test_pause_delete_and_kill_reach_the_lanes(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    wide_job_due(client, db_url)
    fired = fire(store, scan(store)) + fire(store, scan(store))
    prepared = [f.prepared for f in fired]
    assert store.start_check(A, prepared).stopped == {}

    client.kill_job("wide")
    assert set(store.start_check(A, prepared).stopped.values()) == {"kill"}
    client.pause_job("wide")
    assert all(lane["paused"] for lane in lanes(db_url, "wide"))
    client.resume_job("wide")
    assert not any(lane["paused"] for lane in lanes(db_url, "wide"))

    # One run at a time again: not while runs are in flight; once they ended, the lanes
    # go and the job runs on its own row.
    with pytest.raises(Conflict, match="max_concurrency"):
        client.update_job("wide", {"max_concurrency": 1})
    finish(store, fired)
    client.update_job("wide", {"max_concurrency": 1})
    assert lanes(db_url, "wide") == []
    due_now(client, db_url, "wide")
    (own,) = scan(store)
    assert own.parent_id is None
    client.delete_job("wide")
    assert client.list_jobs().items == []


def test_a_dead_nodes_lane_is_rerun_by_a_peer_and_its_job_goes_on(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    store.register(session_id=B, host="test", pid=2, capacity=10, tags=(), version="t")
    client.add_job({"name": "wide", "schedule": "@every 1h", "command": "true",
                    "max_concurrency": 2})
    due_now(client, db_url, "wide")
    (theirs,) = fire(store, scan(store, B), B)
    # B dies while its run executes: a peer abandons the run and reruns the slot (the
    # recovery policy) on the same lane; the job's next slot is unaffected.
    with connect(db_url) as conn:
        conn.exec_driver_sql(
            "UPDATE ql_sessions SET heartbeat_at = NOW(6) - INTERVAL 1 HOUR WHERE id = %s", (B,))
    assert store.expire_sessions(session_id=A, session_timeout_s=60,
                                 planner=SchedulePlanner()) == [B]
    (rerun,) = scan(store, A)
    assert (rerun.job_id, rerun.slot_at, rerun.attempt) == (
        theirs.prepared.job_id, theirs.prepared.slot_at, 2)
    finish(store, fire(store, [rerun], A), A)
    statuses = sorted((r.attempt, r.status.value) for r in client.list_runs(job="wide").items)
    assert statuses == [(1, "abandoned"), (2, "succeeded")]
    (lane,) = lanes(db_url, "wide")
    assert (lane["state"], lane["next_fire_at"], lane["owner_session"]) == ("idle", None, None)
    assert client.get_job("wide").next_fire_at is not None


def test_every_shard_of_a_triggered_broadcast_slot_gets_its_parameters(
    client: SchedulerClient, store: NodeStore
) -> None:
    store.register(session_id=B, host="test", pid=2, capacity=10, tags=(), version="t")
    client.add_job({"name": "fan", "schedule": "@manual", "command": "true", "broadcast": True})
    client.trigger_job("fan", params={"day": "2026-11-01"})
    fired = fire(store, scan(store, A), A) + fire(store, scan(store, B), B)
    assert sorted(f.prepared.shard.index for f in fired if f.prepared.shard) == [0, 1]
    assert [f.params for f in fired] == [{"day": "2026-11-01"}] * 2
    runs = client.list_runs(job="fan").items
    assert [r.params for r in runs] == [{"day": "2026-11-01"}] * 2
