"""Pure rules of the node: settings, state tables, planning decisions. No database."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from quartzlite.config import NodeConfig
from quartzlite.enums import (
    JOB_TRANSITIONS,
    RUN_TRANSITIONS,
    JobState,
    MisfirePolicy,
    RecoveryPolicy,
    RunStatus,
)
from quartzlite.errors import ValidationError
from quartzlite.models import Finished, Fired, JobSpec, Outcome, Prepared
from quartzlite.node.node import tag_sets
from quartzlite.node.planning import RECOVERY_RERUNS, SchedulePlanner, backoff_s
from quartzlite.node.stats import Histogram

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def spec(**changes: object) -> JobSpec:
    values: dict[str, object] = {"name": "j", "schedule": "* * * * * ?", "command": "true"}
    values.update(changes)
    return JobSpec(**values)  # type: ignore[arg-type]


# -- settings -------------------------------------------------------------------------------


def test_defaults_are_valid_and_fence_before_expiry() -> None:
    config = NodeConfig(database_url="mysql+pymysql://x/y")
    assert config.fence_after_s + 2 * config.heartbeat_interval_s <= config.session_timeout_s


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"fence_after_s": 6.0, "session_timeout_s": 7.0}, "session_timeout_s"),
        ({"fence_after_s": 7.0, "session_timeout_s": 7.0}, "session_timeout_s"),
        ({"heartbeat_interval_s": 3.0}, "fence_after_s"),
        ({"poll_interval_s": 4.0}, "poll_interval_s"),
        ({"capacity": 0}, "capacity"),
        ({"heartbeat_interval_s": 0}, "heartbeat_interval_s"),
        ({"lock_wait_timeout_s": 0}, "lock_wait_timeout_s"),
        ({"look_ahead_s": -1}, "look_ahead_s"),
        ({"fire_ahead_s": -0.1}, "fire_ahead_s"),
        ({"fire_ahead_s": 61}, "fire_ahead_s"),
        ({"history_retention_s": 30}, "history_retention_s"),
        ({"history_retention_s": 1e20}, "history_retention_s"),
    ],
)
def test_settings_that_break_the_rules_are_refused(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        NodeConfig(database_url="mysql+pymysql://x/y", **changes)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_runs_are_fired_ahead_at_most_the_look_ahead() -> None:
    url = "mysql+pymysql://x/y"
    assert NodeConfig(database_url=url).effective_fire_ahead_s == 0.5
    assert NodeConfig(database_url=url, look_ahead_s=0.2).effective_fire_ahead_s == 0.2
    assert NodeConfig(database_url=url, fire_ahead_s=0).effective_fire_ahead_s == 0


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUARTZLITE_CAPACITY", "64")
    monkeypatch.setenv("QUARTZLITE_TAGS", "gpu, eu")
    monkeypatch.setenv("QUARTZLITE_REJOIN", "yes")
    config = NodeConfig.from_env(database_url="mysql+pymysql://x/y", look_ahead_s=None)
    assert (config.capacity, config.tags, config.rejoin) == (64, ("gpu", "eu"), True)
    monkeypatch.setenv("QUARTZLITE_CAPACITY", "lots")
    with pytest.raises(ValidationError) as caught:
        NodeConfig.from_env(database_url="mysql+pymysql://x/y")
    assert caught.value.field == "QUARTZLITE_CAPACITY"


# -- state tables ---------------------------------------------------------------------------


def test_transition_tables_cover_every_state() -> None:
    assert set(JOB_TRANSITIONS) == set(JobState)
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    # The go-crontab cycle: idle -> prepared -> executing -> idle.
    assert JobState.PREPARED in JOB_TRANSITIONS[JobState.IDLE]
    assert JobState.EXECUTING in JOB_TRANSITIONS[JobState.PREPARED]
    assert JOB_TRANSITIONS[JobState.EXECUTING] == {JobState.IDLE}
    # Only a running run changes; every other status is final.
    assert all(not targets for status, targets in RUN_TRANSITIONS.items() if status.is_final)
    # Missed and quarantined rows are written final: they never ran.
    never_ran = {RunStatus.MISSED, RunStatus.QUARANTINED}
    assert RUN_TRANSITIONS[RunStatus.RUNNING] == {s for s in RunStatus if s.is_final} - never_ran


def test_tag_sets_are_every_subset_joined_like_storage() -> None:
    assert tag_sets(()) == [""]
    assert sorted(tag_sets(("gpu", "eu"))) == ["", "eu", "eu,gpu", "gpu"]


def test_histogram_is_cumulative() -> None:
    histogram = Histogram((0.01, 0.1))
    for value in (0.001, 0.05, 0.05, 3.0):
        histogram.observe(value)
    cumulative, total = histogram.snapshot()
    assert [count for _, count in cumulative] == [1, 3, 4]
    assert total == pytest.approx(3.101)


# -- planning -------------------------------------------------------------------------------


def finished(job: JobSpec, status: RunStatus, *, slot: datetime = T0, attempt: int = 1) -> Finished:
    prepared = Prepared(job_id=1, name=job.name, fire_id="s:1:1", planned_at=slot, slot_at=slot,
                        attempt=attempt, spec=job)
    fired = Fired(prepared=prepared, run_id=7, fired_at=slot)
    return Finished(fired=fired, outcome=Outcome(status=status), ended_at=slot, started_at=slot)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    job = spec(retry_backoff_s=1.0, retry_max_backoff_s=5.0)
    rng = random.Random(1)
    for attempt, full in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)):
        for _ in range(50):
            assert full / 2 <= backoff_s(job, attempt, rng) <= full


def test_a_failed_attempt_is_retried_for_the_same_slot() -> None:
    planner = SchedulePlanner(random.Random(3))
    job = spec(max_attempts=3, retry_backoff_s=2.0)
    plan = planner.after_run(job, finished(job, RunStatus.FAILED), T0 + timedelta(seconds=1))
    assert plan.slot_at == T0
    assert plan.attempt == 2
    assert plan.planned_at is not None
    assert T0 + timedelta(seconds=2) <= plan.planned_at <= T0 + timedelta(seconds=3)


def test_the_last_attempt_or_a_kill_moves_on_to_the_next_slot() -> None:
    planner = SchedulePlanner()
    job = spec(max_attempts=2)
    for status, attempt in ((RunStatus.FAILED, 2), (RunStatus.KILLED, 1), (RunStatus.SUCCEEDED, 1)):
        plan = planner.after_run(job, finished(job, status, attempt=attempt), T0 + timedelta(seconds=0.5))
        assert (plan.planned_at, plan.attempt, plan.missed) == (T0 + timedelta(seconds=1), 1, ())


def test_slots_passed_during_a_long_run_follow_the_misfire_policy() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=10.5)
    once = spec(misfire_grace_s=2.0, misfire_policy=MisfirePolicy.FIRE_ONCE)
    plan = planner.after_run(once, finished(once, RunStatus.SUCCEEDED), now)
    # Slots 1..8 are later than the grace: 8 runs now, 1..7 are missed; 9, 10 are late
    # but within the grace, and come next anyway.
    assert plan.planned_at == T0 + timedelta(seconds=8)
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 8))
    skip = spec(misfire_grace_s=2.0, misfire_policy=MisfirePolicy.SKIP)
    plan = planner.after_run(skip, finished(skip, RunStatus.SUCCEEDED), now)
    assert plan.planned_at == T0 + timedelta(seconds=9)
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 9))
    assert "misfire policy skip" in plan.missed_reason


def test_a_misfired_slot_found_by_the_scanner() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=100)
    once = spec(misfire_grace_s=60.0)
    plan = planner.misfire(once, T0, now)
    assert plan.planned_at == T0 + timedelta(seconds=40)  # the latest misfired slot, now
    assert plan.missed[0] == T0
    assert len(plan.missed) == 40
    skip = spec(misfire_grace_s=60.0, misfire_policy=MisfirePolicy.SKIP)
    plan = planner.misfire(skip, T0, now)
    assert plan.planned_at == T0 + timedelta(seconds=41)
    assert len(plan.missed) == 41


def test_recovery_reruns_a_bounded_number_of_times_or_skips() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=5.5)
    rerun = spec(max_attempts=1, recovery_policy=RecoveryPolicy.RERUN)
    plan = planner.recover(rerun, T0, 1, now)
    assert (plan.planned_at, plan.slot_at, plan.attempt) == (now, T0, 2)
    exhausted = planner.recover(rerun, T0, 1 + RECOVERY_RERUNS, now)
    assert exhausted.attempt == 1
    assert exhausted.planned_at == T0 + timedelta(seconds=1)
    skip = spec(recovery_policy=RecoveryPolicy.SKIP)
    plan = planner.recover(skip, T0, 1, now)
    assert plan.attempt == 1
    assert plan.planned_at == T0 + timedelta(seconds=1)
