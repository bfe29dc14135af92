"""NodeStore's fire-ahead path against the real database, without node processes:
runs fired before their instant, and the start check that decides at the instant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, OverrunPolicy, RunStatus
from quartzlite.models import Finished, Outcome
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.node import NodeStore, SpecCache
from tests.integration.dbtools import job_rows, naive, registered_store, set_job

pytestmark = pytest.mark.db

SESSION = "a" * 32


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


def test_runs_are_fired_ahead_and_checked_at_their_instant(
    client: SchedulerClient, store: NodeStore
) -> None:
    at = client.now() + timedelta(seconds=30)
    names = ["on-time", "paused", "deleted", "killed", "late"]
    client.add_jobs([{"name": n, "schedule": f"@at {at.isoformat()}", "command": "true"}
                     for n in names])
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:1:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    assert len(scan.prepared) == len(names)

    # Not within the fire-ahead window yet: nothing fires, everything stays prepared.
    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=5)
    assert (fired, lost) == ([], [])

    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    assert sorted(f.prepared.name for f in fired) == sorted(names)
    assert all(f.fired_at < f.prepared.planned_at for f in fired), "fired before the instant"
    assert all(j.state is JobState.EXECUTING for j in client.list_jobs().items)
    # A run fired ahead has not started: its row claims no start until its result.
    assert all(r.started_at is None for r in client.list_runs().items)

    check = store.start_check(SESSION, [f.prepared for f in fired])
    assert check.stopped == {}
    assert check.db_now < at
    # With nothing to check (a node warms the statement up as it starts): the clock.
    empty = store.start_check(SESSION, [])
    assert empty.stopped == {}
    assert empty.db_now >= check.db_now

    by_name = {f.prepared.name: f.prepared for f in fired}
    client.pause_job("paused")
    client.delete_job("deleted")
    client.kill_job("killed")
    check = store.start_check(SESSION, list(by_name.values()))
    assert check.stopped == {
        by_name["paused"].job_id: "paused",
        by_name["deleted"].job_id: "deleted",
        by_name["killed"].job_id: "kill",
    }
    # A fire that is no longer ours (another fire id) is never started either.
    stale = replace(by_name["late"], fire_id=f"{SESSION}:0:{by_name['late'].job_id}")
    check = store.start_check(SESSION, [stale, by_name["on-time"]])
    assert check.stopped == {stale.job_id: "moved"}
    # A fire id that cannot be written into the statement as it is goes as a parameter.
    odd = replace(by_name["late"], fire_id="it's 100%\\ odd")
    check = store.start_check(SESSION, [odd, by_name["on-time"]])
    assert check.stopped == {odd.job_id: "moved"}


def test_the_overrun_policy_goes_from_the_job_row_to_the_result_of_a_run_that_overran(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    """Every-second jobs whose run of a slot 3.5 s ago is recorded now: by default (skip)
    the slots that came due meanwhile are recorded missed, saying overrun, and the job
    goes on at its next slot after now; with catch_up the next slot is the one after the
    run's (late, within the misfire grace), and nothing is missed."""
    client.add_jobs([
        {"name": "skips", "schedule": "@every 1s", "command": "true"},
        {"name": "catches-up", "schedule": "@every 1s", "command": "true",
         "overrun_policy": "catch_up"},
    ])
    stored = {row["name"]: row["overrun_policy"] for row in job_rows(db_url)}
    assert stored == {"skips": "skip", "catches-up": "catch_up"}
    slot = client.now() - timedelta(seconds=3.5)
    for name in stored:
        set_job(db_url, name, next_fire_at=naive(slot), next_slot_at=naive(slot))
    planner = SchedulePlanner()
    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:1:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    assert {p.name: p.spec.overrun_policy for p in scan.prepared} == {
        "skips": OverrunPolicy.SKIP, "catches-up": OverrunPolicy.CATCH_UP,
    }
    fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner, ahead_s=60)
    assert (len(fired), lost) == (2, [])
    store.specs = SpecCache()  # the result reads the definitions from the rows again
    before = client.now()
    store.complete(session_id=SESSION, planner=planner, finished=[
        Finished(fired=f, outcome=Outcome(status=RunStatus.SUCCEEDED), ended_at=before,
                 started_at=slot)
        for f in fired
    ])

    skips = client.get_job("skips")
    assert skips.state is JobState.IDLE
    assert skips.next_fire_at is not None
    assert skips.next_fire_at > before, "the next slot after the result, not a passed one"
    periods = round((skips.next_fire_at - slot).total_seconds())
    assert periods >= 4
    assert skips.next_fire_at == slot + timedelta(seconds=periods), "on the job's own slots"
    missed = sorted(client.list_runs(job="skips", status="missed").items, key=lambda r: r.slot_at)
    assert [r.slot_at for r in missed] == [slot + timedelta(seconds=i) for i in range(1, periods)]
    for run in missed:
        assert run.error is not None
        assert run.error.startswith("overrun: came due while the previous run ran")
        assert "overrun policy skip" in run.error

    catches_up = client.get_job("catches-up")
    assert catches_up.next_fire_at == slot + timedelta(seconds=1)
    assert client.list_runs(job="catches-up", status="missed").items == []


def test_max_runs_counts_each_slot_in_the_results_and_the_job_ends_finished(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    """prepare -> fire -> complete, twice, for an every-second job with max_runs 2 and
    jitter: each result counts its slot (runs_done, in the results' one statement), the
    runs are planned at their slot plus its jitter, and after the second the job has no
    next fire and shows finished; nothing is recorded missed. A job whose run its node
    lost, recovery policy skip, counts that slot too."""
    from quartzlite.schedule import jittered

    client.add_jobs([
        {"name": "twice", "schedule": "@every 1s", "command": "true", "max_runs": 2,
         "jitter_s": 0.4},
        {"name": "lost", "schedule": "@every 1s", "command": "true", "max_runs": 1,
         "recovery_policy": "skip"},
    ])
    planner = SchedulePlanner()
    slots = []
    for done in (1, 2):
        scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:{done}:", limit=100,
                                 tag_sets=[""], look_ahead_s=60, planner=planner)
        twice = [p for p in scan.prepared if p.name == "twice"]
        assert len(twice) == 1
        (prepared,) = twice
        assert prepared.planned_at == jittered("twice", prepared.slot_at, 0.4)
        slots.append(prepared.slot_at)
        fired, lost = store.fire(session_id=SESSION, items=scan.prepared, planner=planner,
                                 ahead_s=60)
        assert lost == []
        ours = [f for f in fired if f.prepared.name == "twice"]
        store.complete(session_id=SESSION, planner=planner, finished=[
            Finished(fired=f, outcome=Outcome(status=RunStatus.SUCCEEDED),
                     started_at=f.prepared.planned_at,
                     ended_at=f.prepared.planned_at + timedelta(milliseconds=100))
            for f in ours
        ])
        job = client.get_job("twice")
        assert job.runs_done == done
        if done == 1:
            assert job.next_slot_at == slots[0] + timedelta(seconds=1)
            assert job.next_fire_at == jittered("twice", slots[0] + timedelta(seconds=1), 0.4)
            assert not job.finished
            # The job that was fired with it: its node forgets it (a commit of unknown
            # outcome); compensation abandons the run and the recovery policy skips it.
            assert store.compensate(session_id=SESSION, in_memory={
                (f.prepared.job_id, f.prepared.fire_id) for f in ours
            }, planner=planner)[1] == 1
            lost_job = client.get_job("lost")
            assert (lost_job.runs_done, lost_job.next_fire_at, lost_job.finished) == (1, None, True)

    job = client.get_job("twice")
    assert (job.state, job.next_fire_at, job.next_slot_at, job.finished) == (
        JobState.IDLE, None, None, True)
    assert {r["name"]: r["runs_done"] for r in job_rows(db_url)} == {"twice": 2, "lost": 1}
    runs = sorted(client.list_runs(job="twice").items, key=lambda r: r.slot_at)
    assert [(r.slot_at, r.status) for r in runs] == [(s, RunStatus.SUCCEEDED) for s in slots]
    assert [r.planned_at for r in runs] == [jittered("twice", s, 0.4) for s in slots]
    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:9:", limit=100,
                             tag_sets=[""], look_ahead_s=3600, planner=planner)
    assert scan.prepared == [], "a finished job is never due"
    assert client.list_runs(status="missed").items == []
