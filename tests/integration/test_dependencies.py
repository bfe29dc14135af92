"""Dependencies in storage (real database, no node process): the write-time checks
(upstream jobs exist, no cycle, has_downstream kept, an upstream job not deleted under
its downstream jobs), the request written in the results transaction (and only there),
taken once by a scan, the conditions, and the ways a requested slot waits (a paused or
busy downstream job) without being lost (a trigger, a resume, a late scan)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, RunStatus
from quartzlite.errors import Conflict, ValidationError
from quartzlite.models import Finished, Fired, Outcome
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage import dependencies
from quartzlite.storage.jobs import JobStore
from quartzlite.storage.node import NodeStore
from quartzlite.storage.node import results as results_module
from tests.integration.dbtools import connect, registered_store, set_job

pytestmark = pytest.mark.db

SESSION = "e" * 32
NEVER = "0 0 1 1 *"


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


class Batches:
    """Numbers prepare batches, as a node's scanner does (fire ids session:batch:job)."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> str:
        self.next += 1
        return f"{SESSION}:{self.next}:"


BATCH = Batches()


def fire_due(store: NodeStore) -> list[Fired]:
    """Prepare (taking pending requests) and fire everything due within a minute."""
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=SESSION, fire_prefix=BATCH(), limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    return fired


def finish(store: NodeStore, client: SchedulerClient, *items: Fired,
           status: RunStatus = RunStatus.SUCCEEDED, started: bool = True) -> None:
    now = client.now()
    store.complete(session_id=SESSION, planner=SchedulePlanner(), finished=[Finished(
        fired=f, outcome=Outcome(status=status), ended_at=now, started_at=now if started else None)
        for f in items])


def requests_of(db_url: str) -> list[dict[str, Any]]:
    with connect(db_url) as conn:
        return [dict(r) for r in conn.execute(text(
            "SELECT j.name AS job, r.slot_at, r.planned_at, r.cause, r.upstream_run_id, "
            "r.taken_at FROM ql_requests r JOIN ql_jobs j ON j.id = r.job_id ORDER BY r.id"
        )).mappings()]


def has_downstream(db_url: str) -> dict[str, bool]:
    with connect(db_url) as conn:
        return {r[0]: bool(r[1]) for r in conn.execute(text(
            "SELECT name, has_downstream FROM ql_jobs WHERE deleted = 0"))}


def manual(name: str, *upstream: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "schedule": "@manual", "command": "true", "upstream": list(upstream),
            **fields}


def naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)


# -- write-time checks -------------------------------------------------------------------


def test_upstream_jobs_must_exist_and_not_be_deleted(client: SchedulerClient) -> None:
    client.add_job({"name": "a", "schedule": NEVER, "command": "true"})
    with pytest.raises(ValidationError) as raised:
        client.add_job(manual("b", "a", "ghost"))
    assert raised.value.field == "upstream"
    assert "'ghost'" in raised.value.reason
    assert [j.name for j in client.list_jobs().items] == ["a"], "nothing written"
    client.add_job({"name": "gone", "schedule": NEVER, "command": "true"})
    client.delete_job("gone")
    with pytest.raises(ValidationError, match="'gone'"):
        client.put_job(manual("b", "gone"))
    client.add_job(manual("b", "a"))
    with pytest.raises(ValidationError, match="'ghost'"):
        client.update_job("b", {"upstream": ["a", "ghost"]})
    with pytest.raises(ValidationError, match="its own upstream"):
        client.update_job("b", {"upstream": ["b"]})
    assert client.get_job("b").spec.upstream == ("a",)


def test_cycles_are_refused_naming_them(client: SchedulerClient) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    with pytest.raises(ValidationError) as raised:
        client.update_job("a", {"upstream": ["b"]})
    assert raised.value.field == "upstream"
    assert "a -> b -> a" in raised.value.reason
    client.add_job(manual("c", "b"))
    client.add_job(manual("x"))
    with pytest.raises(ValidationError, match=r"a -> b -> c -> a"):
        client.put_job(manual("a", "x", "c"))
    with pytest.raises(ValidationError, match=r"b -> c -> b"):
        client.update_job("b", {"upstream": ["a", "c"]})
    assert client.get_job("a").spec.upstream == ()
    assert client.get_job("b").spec.upstream == ("a",)
    # A diamond is no cycle.
    client.add_job(manual("d", "b", "c"))
    client.update_job("x", {"upstream": ["a"]})
    assert client.get_job("x").spec.upstream == ("a",)


def test_has_downstream_follows_the_live_jobs_that_name_a_job(
    client: SchedulerClient, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("a2"))
    assert has_downstream(db_url) == {"a": False, "a2": False}
    client.add_job(manual("b", "a"))
    client.add_job(manual("c", "a", "a2"))
    assert has_downstream(db_url) == {"a": True, "a2": True, "b": False, "c": False}
    client.update_job("c", {"upstream": ["a"]})
    assert has_downstream(db_url)["a2"] is False
    client.update_job("b", {"upstream": []})
    assert has_downstream(db_url)["a"] is True, "c still names it"
    client.delete_job("c")
    assert has_downstream(db_url) == {"a": False, "a2": False, "b": False}
    client.put_job(manual("b", "a2"))
    assert has_downstream(db_url) == {"a": False, "a2": True, "b": False}


def test_an_upstream_job_is_not_deleted_under_its_downstream_jobs(client: SchedulerClient) -> None:
    client.add_job({"name": "a", "schedule": "@every 1h", "command": "true"})
    client.add_job(manual("b", "a"))
    client.add_job(manual("c", "a", upstream_on="failure"))
    with pytest.raises(Conflict) as raised:
        client.delete_job("a")
    assert raised.value.message == "job a is upstream of b, c: remove the dependency first"
    assert raised.value.details["downstream"] == ["b", "c"]
    client.update_job("b", {"upstream": []})
    client.delete_job("c")
    client.delete_job("a")
    assert [j.name for j in client.list_jobs().items] == ["b"]


def test_names_are_keys_a_job_cannot_be_renamed(client: SchedulerClient) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    with pytest.raises(ValidationError) as raised:
        client.update_job("a", {"name": "a-renamed"})
    assert raised.value.field == "name"


def test_a_bulk_add_links_jobs_of_its_own_batch_and_refuses_a_cycle_in_it(
    client: SchedulerClient, db_url: str
) -> None:
    client.add_jobs([manual("c", "b"), manual("b", "a"),
                     {"name": "a", "schedule": "@every 1h", "command": "true"}])
    assert has_downstream(db_url) == {"a": True, "b": True, "c": False}
    with pytest.raises(ValidationError) as raised:
        client.add_jobs([manual("y", "x"), manual("x", "y")])
    assert raised.value.field in ("jobs[0].upstream", "jobs[1].upstream")
    assert "->" in raised.value.reason
    assert sorted(j.name for j in client.list_jobs().items) == ["a", "b", "c"]


# -- the request: written by the end of a slot, taken once ------------------------------


def test_the_chain_runs_each_link_once_for_the_upstream_slot(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    client.add_job(manual("c", "b"))
    client.trigger_job("a")
    (a,) = fire_due(store)
    assert fire_due(store) == []
    finish(store, client, a)
    (request,) = requests_of(db_url)
    assert (request["job"], request["cause"], request["upstream_run_id"]) == ("b", "upstream", a.run_id)
    assert request["slot_at"] == naive(a.prepared.slot_at)
    assert request["planned_at"] == naive(a.prepared.planned_at)
    assert request["taken_at"] is None

    (b,) = fire_due(store)
    assert (b.prepared.name, b.prepared.slot_at, b.prepared.planned_at, b.prepared.attempt) == (
        "b", a.prepared.slot_at, a.prepared.planned_at, 1)
    assert requests_of(db_url)[0]["taken_at"] is not None
    assert fire_due(store) == [], "taken once"
    finish(store, client, b)
    (c,) = fire_due(store)
    assert (c.prepared.name, c.prepared.slot_at, c.prepared.planned_at) == (
        "c", a.prepared.slot_at, a.prepared.planned_at)
    finish(store, client, c)
    assert fire_due(store) == []

    runs = {r.job_name: r for r in client.list_runs().items}
    assert runs["a"].upstream_run_id is None
    assert runs["b"].upstream_run_id == runs["a"].id
    assert runs["c"].upstream_run_id == runs["b"].id
    assert {(r.slot_at, r.planned_at, r.status) for r in runs.values()} == {
        (a.prepared.slot_at, a.prepared.planned_at, RunStatus.SUCCEEDED)}
    # The same end recorded again (a replay) or requested again writes no second request.
    finish(store, client, a)
    with connect(db_url) as conn:
        dependencies.request_downstream(conn, [dependencies.EndedSlot(
            job_name="a", run_id=a.run_id, slot_at=a.prepared.slot_at,
            planned_at=a.prepared.planned_at, status=RunStatus.SUCCEEDED)], client.now())
    assert len(requests_of(db_url)) == 2  # b's and c's
    assert fire_due(store) == []
    assert all(not j.finished and j.state is JobState.IDLE for j in client.list_jobs().items)


def test_the_request_commits_with_the_result_or_not_at_all(
    client: SchedulerClient, store: NodeStore, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    client.trigger_job("a")
    (a,) = fire_due(store)
    real = results_module.request_downstream

    def then_fail(*args: Any, **kwargs: Any) -> int:
        written = real(*args, **kwargs)
        assert written == 1
        raise RuntimeError("the transaction fails after the request")

    monkeypatch.setattr(results_module, "request_downstream", then_fail)
    with pytest.raises(RuntimeError):
        finish(store, client, a)
    assert requests_of(db_url) == []
    assert client.get_run(a.run_id).status is RunStatus.RUNNING
    assert client.get_job("a").state is JobState.EXECUTING

    monkeypatch.setattr(results_module, "request_downstream", real)
    finish(store, client, a)
    assert client.get_run(a.run_id).status is RunStatus.SUCCEEDED
    assert [r["job"] for r in requests_of(db_url)] == ["b"]


def test_a_batch_without_downstream_jobs_adds_no_statement(
    client: SchedulerClient, store: NodeStore
) -> None:
    client.add_job(manual("plain"))
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    client.update_job("b", {"upstream": []})  # a has no downstream job any more
    client.trigger_job("plain")
    client.trigger_job("a")
    fired = fire_due(store)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    for engine in (store.db.engine, store.db.auto):
        event.listen(engine, "before_cursor_execute", seen)
    try:
        finish(store, client, *fired)
        scanned = len(statements)
        assert fire_due(store) == []
    finally:
        for engine in (store.db.engine, store.db.auto):
            event.remove(engine, "before_cursor_execute", seen)
    results = statements[:scanned]
    assert not any("ql_requests" in s or "find_in_set" in s.lower() for s in results), results
    scan = statements[scanned:]
    assert sum("ql_requests" in s for s in scan) == 1, "one probe when nothing is pending"


@pytest.mark.parametrize(
    ("status", "attempts", "expected"),
    [
        (RunStatus.SUCCEEDED, 1, {"on-success", "on-completion"}),
        (RunStatus.FAILED, 1, {"on-failure", "on-completion"}),
        (RunStatus.TIMED_OUT, 1, {"on-failure", "on-completion"}),
        (RunStatus.KILLED, 1, {"on-failure", "on-completion"}),
        (RunStatus.CANCELLED, 1, set()),
        (RunStatus.FAILED, 2, set()),  # retried: the slot goes on
    ],
)
def test_the_conditions(
    client: SchedulerClient, store: NodeStore, db_url: str, status: RunStatus, attempts: int,
    expected: set[str],
) -> None:
    client.add_job(manual("a", max_attempts=attempts, retry_backoff_s=0))
    for condition in ("success", "failure", "completion"):
        client.add_job(manual(f"on-{condition}", "a", upstream_on=condition))
    client.trigger_job("a")
    (a,) = fire_due(store)
    finish(store, client, a, status=status)
    assert {r["job"] for r in requests_of(db_url)} == expected
    if attempts > 1:  # the last attempt fails: the slot ends, failed
        (retry,) = fire_due(store)
        assert (retry.prepared.name, retry.prepared.attempt) == ("a", 2)
        finish(store, client, retry, status=status)
        assert {r["job"] for r in requests_of(db_url)} == {"on-failure", "on-completion"}
        assert {r["upstream_run_id"] for r in requests_of(db_url)} == {retry.run_id}
        # The slot's planned instant: its first run's, not the retry's.
        assert {r["planned_at"] for r in requests_of(db_url)} == {naive(a.prepared.planned_at)}
        assert {r["slot_at"] for r in requests_of(db_url)} == {naive(a.prepared.slot_at)}


def test_an_abandoned_upstream_slot_is_a_failure_once_its_job_moves_on(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("rerun", recovery_policy="rerun"))
    client.add_job(manual("skip", recovery_policy="skip"))
    client.add_job(manual("never-started", recovery_policy="skip"))
    for name in ("rerun", "skip", "never-started"):
        client.add_job(manual(f"{name}-failed", name, upstream_on="failure"))
        client.add_job(manual(f"{name}-done", name, upstream_on="completion"))
        client.add_job(manual(f"{name}-ok", name))
        client.trigger_job(name)
    fired = {f.prepared.name: f for f in fire_due(store)}
    # The node gave one up before it started (fenced): it is simply run again.
    finish(store, client, fired["never-started"], status=RunStatus.ABANDONED, started=False)
    assert requests_of(db_url) == []
    # The node dies: a peer expires its session.
    with connect(db_url) as conn:
        conn.execute(text("UPDATE ql_sessions SET heartbeat_at = heartbeat_at - INTERVAL 1 HOUR"))
    peer = NodeStore(store.db, node_name="peer:2")
    peer.register(session_id="f" * 32, host="peer", pid=2, capacity=1, tags=(), version="t")
    assert peer.expire_sessions(session_id="f" * 32, session_timeout_s=7,
                                planner=SchedulePlanner()) == [SESSION]
    assert {(r["job"], r["upstream_run_id"]) for r in requests_of(db_url)} == {
        ("skip-failed", fired["skip"].run_id), ("skip-done", fired["skip"].run_id)}
    assert client.get_job("rerun").next_attempt == 2, "rerun: the slot goes on"


def test_a_paused_downstream_job_keeps_its_requests_until_resumed(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", paused=True))
    slots = []
    for _ in range(2):
        client.trigger_job("a")
        (a,) = fire_due(store)
        finish(store, client, a)
        slots.append(a.prepared.slot_at)
    assert fire_due(store) == []
    assert [r["taken_at"] for r in requests_of(db_url)] == [None, None]
    # Pruning keeps them while their job lives.
    with connect(db_url) as conn:
        conn.execute(text("UPDATE ql_requests SET created_at = created_at - INTERVAL 2 DAY"))
    assert JobStore(store.db).prune_history(86400).requests == 0
    client.resume_job("b")
    (first,) = fire_due(store)
    assert first.prepared.slot_at == slots[0]
    assert fire_due(store) == [], "b never overlaps itself: the next waits for its end"
    finish(store, client, first)
    (second,) = fire_due(store)
    assert second.prepared.slot_at == slots[1]
    finish(store, client, second)
    assert fire_due(store) == []


def test_a_deleted_downstream_job_drops_its_requests(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", paused=True))
    client.add_job(manual("c", "a", paused=True))
    client.trigger_job("a")
    finish(store, client, *fire_due(store))
    assert sorted(r["job"] for r in requests_of(db_url)) == ["b", "c"]
    client.delete_job("b")
    client.update_job("c", {"upstream": []})  # no upstream job left: nothing to wait for
    assert requests_of(db_url) == []


def test_a_triggered_slot_gives_its_parameters_down_the_chain(
    client: SchedulerClient, store: NodeStore
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a"))
    client.add_job(manual("c", "b", upstream_on="completion"))
    client.trigger_job("a", params={"day": "2026-11-01", "dry_run": True})
    (a,) = fire_due(store)
    finish(store, client, a)
    (b,) = fire_due(store)
    assert b.params == {"day": "2026-11-01", "dry_run": True}
    finish(store, client, b, status=RunStatus.FAILED)
    (c,) = fire_due(store)
    assert c.params == b.params
    finish(store, client, c)
    assert {r.job_name: r.params for r in client.list_runs().items} == {
        "a": b.params, "b": b.params, "c": b.params}


def test_a_slot_ended_by_a_retry_gives_its_first_planned_instant_downstream(
    client: SchedulerClient, store: NodeStore
) -> None:
    """The downstream run has the upstream slot's planned instant, not its retry's."""
    client.add_job(manual("a", max_attempts=2, retry_backoff_s=0.001))
    client.add_job(manual("b", "a"))
    client.trigger_job("a")
    (a,) = fire_due(store)
    finish(store, client, a, status=RunStatus.FAILED)
    (retry,) = fire_due(store)
    assert (retry.prepared.attempt, retry.prepared.slot_at) == (2, a.prepared.slot_at)
    assert retry.prepared.planned_at > a.prepared.planned_at
    finish(store, client, retry)
    (b,) = fire_due(store)
    assert (b.prepared.slot_at, b.prepared.planned_at) == (a.prepared.slot_at,
                                                           a.prepared.planned_at)


def test_a_request_found_late_fires_at_its_planned_instant(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", misfire_grace_s=0, misfire_policy="skip"))
    client.trigger_job("a")
    (a,) = fire_due(store)
    finish(store, client, a)
    with connect(db_url) as conn:  # found hours later (say, its nodes were all down)
        conn.execute(text("UPDATE ql_requests SET slot_at = slot_at - INTERVAL 3 HOUR, "
                          "planned_at = planned_at - INTERVAL 3 HOUR"))
    (b,) = fire_due(store)
    assert b.prepared.slot_at == a.prepared.slot_at - timedelta(hours=3)
    assert b.prepared.planned_at == a.prepared.planned_at - timedelta(hours=3)
    finish(store, client, b)
    assert [r.status for r in client.list_runs(job="b").items] == [RunStatus.SUCCEEDED]


def test_a_trigger_or_a_resume_does_not_lose_a_taken_slot(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", tags=["elsewhere"]))  # no node here may run it
    client.trigger_job("a")
    (a,) = fire_due(store)
    finish(store, client, a)
    # Taken by a node that may run it, which then has not prepared it yet:
    with connect(db_url) as conn:
        assert dependencies.take_requests(conn, ["elsewhere"], 10) == 1
    assert client.get_job("b").next_slot_at == a.prepared.slot_at
    client.update_job("b", {"tags": []})
    client.trigger_job("b")  # replaces its next fire: the taken slot waits again
    (triggered,) = fire_due(store)
    assert triggered.prepared.slot_at != a.prepared.slot_at
    finish(store, client, triggered)
    (upstream_slot,) = fire_due(store)
    assert upstream_slot.prepared.slot_at == a.prepared.slot_at
    assert client.get_run(upstream_slot.run_id).upstream_run_id == a.run_id
    finish(store, client, upstream_slot)

    client.trigger_job("a")
    (a2,) = fire_due(store)
    finish(store, client, a2)
    client.pause_job("b")
    set_job(db_url, "b", paused=False)  # taken just before the pause
    with connect(db_url) as conn:
        assert dependencies.take_requests(conn, [""], 10) == 1
    set_job(db_url, "b", paused=True)
    client.resume_job("b")  # plans it anew: the taken slot waits again
    (resumed,) = fire_due(store)
    assert resumed.prepared.slot_at == a2.prepared.slot_at


def test_the_watch_wakes_the_scanner_for_a_request_it_may_take(
    client: SchedulerClient, store: NodeStore
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", tags=["gpu"]))
    client.trigger_job("a")
    (a,) = fire_due(store)
    assert store.watch(SESSION, [""]).earliest_due is None
    finish(store, client, a)
    assert store.watch(SESSION, [""]).earliest_due is None, "not a job this node may run"
    assert store.watch(SESSION, ["", "gpu"]).earliest_due == a.prepared.planned_at


def test_a_downstream_job_that_ran_its_max_runs_takes_no_more_requests(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job(manual("a"))
    client.add_job(manual("b", "a", max_runs=1, paused=True))
    for _ in range(2):
        client.trigger_job("a")
        finish(store, client, *fire_due(store))
    client.resume_job("b")
    (b,) = fire_due(store)
    finish(store, client, b)
    assert client.get_job("b").finished
    assert fire_due(store) == [], "the second request is dropped, not run"
    assert all(r["taken_at"] is not None for r in requests_of(db_url))
    assert [r.status for r in client.list_runs(job="b").items] == [RunStatus.SUCCEEDED]
