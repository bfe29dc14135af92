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
    OverrunPolicy,
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


def finished(job: JobSpec, status: RunStatus, *, slot: datetime = T0, attempt: int = 1,
             ended_at: datetime | None = None) -> Finished:
    prepared = Prepared(job_id=1, name=job.name, fire_id="s:1:1", planned_at=slot, slot_at=slot,
                        attempt=attempt, spec=job)
    fired = Fired(prepared=prepared, run_id=7, fired_at=slot)
    return Finished(fired=fired, outcome=Outcome(status=status), ended_at=ended_at or slot,
                    started_at=slot)


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


def test_slots_passed_during_a_long_run_follow_the_misfire_policy_when_caught_up() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=10.5)
    catch_up = OverrunPolicy.CATCH_UP
    once = spec(misfire_grace_s=2.0, misfire_policy=MisfirePolicy.FIRE_ONCE, overrun_policy=catch_up)
    plan = planner.after_run(once, finished(once, RunStatus.SUCCEEDED), now)
    # Slots 1..8 are later than the grace: 8 runs now, 1..7 are missed; 9, 10 are late
    # but within the grace, and come next anyway.
    assert plan.planned_at == T0 + timedelta(seconds=8)
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 8))
    skip = spec(misfire_grace_s=2.0, misfire_policy=MisfirePolicy.SKIP, overrun_policy=catch_up)
    plan = planner.after_run(skip, finished(skip, RunStatus.SUCCEEDED), now)
    assert plan.planned_at == T0 + timedelta(seconds=9)
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 9))
    assert "misfire policy skip" in plan.missed_reason


EVERY_SECOND = "@every 1s"


def test_new_jobs_skip_the_slots_their_own_run_overran() -> None:
    assert JobSpec(name="j", schedule=EVERY_SECOND, command="true").overrun_policy is OverrunPolicy.SKIP


def test_an_overrun_under_skip_records_the_ticks_that_came_due_missed_and_goes_on_after_now() -> None:
    """An every-second run of slot T that ends at T+2.5 s: T+1 and T+2 came due while it
    ran; they are missed (the reason says overrun) and the job goes on at T+3, not at
    T+1, T+2, T+3 back to back."""
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=2.5)
    job = spec(schedule=EVERY_SECOND, overrun_policy=OverrunPolicy.SKIP)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    assert (plan.planned_at, plan.slot_at, plan.attempt) == (T0 + timedelta(seconds=3),) * 2 + (1,)
    assert plan.missed == (T0 + timedelta(seconds=1), T0 + timedelta(seconds=2))
    assert plan.missed_more == 0
    assert plan.missed_reason.startswith("overrun: ")
    assert "came due while the previous run ran" in plan.missed_reason
    assert "overrun policy skip" in plan.missed_reason


def test_an_overrun_ends_when_the_run_ended_not_when_its_result_is_recorded() -> None:
    """A run of slot T that ended at T+0.5 s, recorded at T+2.5 s (a database outage
    held its result): it overran nothing; T+1 and T+2 are late, not overrun, and the
    misfire policy has them (within the grace: run, late)."""
    planner = SchedulePlanner()
    job = spec(schedule=EVERY_SECOND, overrun_policy=OverrunPolicy.SKIP)
    ended = T0 + timedelta(seconds=0.5)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=ended),
                             T0 + timedelta(seconds=2.5))
    assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=1), ())
    # Ended at T+1.5: T+1 came due while it ran (missed, overrun); T+2 is next, late.
    ended = T0 + timedelta(seconds=1.5)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=ended),
                             T0 + timedelta(seconds=2.5))
    assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=2), (T0 + timedelta(seconds=1),))


def test_a_run_that_started_late_claims_no_overrun() -> None:
    """The job was behind: its run of slot T started at T+1.5 s and ended at T+3.5 s.
    T+1 came due before it began: late, not overrun; the misfire policy has every slot
    (no missed row may say a slot came due while a run ran when it did not)."""
    planner = SchedulePlanner()
    job = spec(schedule=EVERY_SECOND, overrun_policy=OverrunPolicy.SKIP)
    prepared = finished(job, RunStatus.SUCCEEDED).fired.prepared
    late = Finished(fired=Fired(prepared=prepared, run_id=7, fired_at=T0),
                    outcome=Outcome(status=RunStatus.SUCCEEDED),
                    started_at=T0 + timedelta(seconds=1.5), ended_at=T0 + timedelta(seconds=3.5))
    plan = planner.after_run(job, late, T0 + timedelta(seconds=3.6))
    assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=1), ())


@pytest.mark.parametrize(
    ("schedule", "period"), [("* * * * * ?", 1), ("0 * * * * ?", 60), ("*/2 * * * *", 120)]
)
def test_an_overrun_of_a_cron_job_under_skip_goes_on_at_its_next_slot_after_now(
    schedule: str, period: int
) -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=2.5 * period)
    job = spec(schedule=schedule)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    assert plan.planned_at == T0 + timedelta(seconds=3 * period)
    assert plan.missed == (T0 + timedelta(seconds=period), T0 + timedelta(seconds=2 * period))


def test_an_overrun_under_catch_up_runs_the_next_tick_late() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=2.5)
    job = spec(schedule=EVERY_SECOND, overrun_policy=OverrunPolicy.CATCH_UP)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    assert (plan.planned_at, plan.slot_at, plan.attempt) == (T0 + timedelta(seconds=1),) * 2 + (1,)
    assert plan.missed == ()


@pytest.mark.parametrize("policy", list(OverrunPolicy))
def test_a_run_within_its_period_is_no_overrun(policy: OverrunPolicy) -> None:
    planner = SchedulePlanner()
    job = spec(schedule=EVERY_SECOND, overrun_policy=policy)
    now = T0 + timedelta(seconds=0.5)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=1), ())
    # A tick that came due exactly at now came due while the run ran: skipped.
    now = T0 + timedelta(seconds=1)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    if policy is OverrunPolicy.SKIP:
        assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=2), (now,))
    else:
        assert (plan.planned_at, plan.missed) == (now, ())


def test_an_overrun_under_skip_overrides_the_misfire_policy_and_grace() -> None:
    """Whatever the misfire policy, the ticks a run overran are all skipped, those
    beyond the grace included (the misfire policy would run the latest of them)."""
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=10.5)
    for misfire in MisfirePolicy:
        job = spec(schedule=EVERY_SECOND, misfire_policy=misfire, misfire_grace_s=2.0)
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.KILLED):
            plan = planner.after_run(job, finished(job, status, ended_at=now), now)
            assert plan.planned_at == T0 + timedelta(seconds=11), (misfire, status)
            assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 11))
            assert "overrun policy skip" in plan.missed_reason


def test_an_overrun_under_skip_lists_at_most_100_missed_ticks_and_counts_the_rest() -> None:
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=250.5)
    job = spec(schedule=EVERY_SECOND)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=now), now)
    assert plan.planned_at == T0 + timedelta(seconds=251)
    assert len(plan.missed) == 100
    assert plan.missed[0] == T0 + timedelta(seconds=1)
    assert plan.missed_more == 150


def test_retries_recovery_and_refused_duplicates_ignore_the_overrun_policy() -> None:
    """Only the next slot after a run follows the overrun policy: a retry stays on its
    slot, and a lost node or a refused duplicate leave the passed slots to the misfire
    policy (within the grace: caught up, nothing missed)."""
    planner = SchedulePlanner(random.Random(3))
    now = T0 + timedelta(seconds=2.5)
    job = spec(schedule=EVERY_SECOND, overrun_policy=OverrunPolicy.SKIP, max_attempts=2,
               recovery_policy=RecoveryPolicy.SKIP)
    retry = planner.after_run(job, finished(job, RunStatus.FAILED, ended_at=now), now)
    assert (retry.slot_at, retry.attempt, retry.missed) == (T0, 2, ())
    for plan in (planner.recover(job, T0, 1, now), planner.skip(job, T0, now)):
        assert (plan.planned_at, plan.missed) == (T0 + timedelta(seconds=1), ())
    lost = planner.after_run(job, finished(job, RunStatus.ABANDONED, ended_at=now), now)
    assert (lost.planned_at, lost.missed) == (T0 + timedelta(seconds=1), ())


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


# -- bounds, max_runs and jitter ------------------------------------------------------------


def test_the_first_fire_is_the_first_slot_at_or_after_start_at() -> None:
    """Created (or resumed) at ``now``: a cron job fires at its first slot at or after
    start_at; an ``@every`` job at start_at itself, then on start_at + k * period, also
    when start_at has passed (not at now plus a period)."""
    from quartzlite.client import first_fire

    start = T0 + timedelta(hours=2, seconds=30)
    cron = first_fire(spec(schedule="0 * * * * ?", start_at=start), T0)
    assert (cron.planned_at, cron.slot_at) == (T0 + timedelta(hours=2, minutes=1),) * 2
    exact = first_fire(spec(schedule="0 * * * * ?", start_at=T0 + timedelta(hours=2)), T0)
    assert exact.slot_at == T0 + timedelta(hours=2), "a slot at start_at is the first"
    every = first_fire(spec(schedule="@every 90s", start_at=start), T0)
    assert every.slot_at == start
    passed = first_fire(spec(schedule="@every 90s", start_at=T0 - timedelta(seconds=100)), T0)
    assert passed.slot_at == T0 + timedelta(seconds=80), "on start_at + k * period, after now"
    unbounded = first_fire(spec(schedule="@every 90s"), T0)
    assert unbounded.slot_at == T0 + timedelta(seconds=90)


def test_the_first_fire_refuses_an_end_at_before_the_next_slot_and_stops_at_max_runs() -> None:
    from quartzlite.client import first_fire

    with pytest.raises(ValidationError) as caught:
        first_fire(spec(schedule="@every 1h", end_at=T0 + timedelta(minutes=30)), T0)
    assert caught.value.field == "end_at"
    assert "never fire" in caught.value.reason
    within = first_fire(spec(schedule="@every 1h", end_at=T0 + timedelta(hours=1)), T0)
    assert within.slot_at == T0 + timedelta(hours=1), "a slot at end_at fires"
    done = first_fire(spec(schedule="@every 1h", max_runs=3), T0, runs_done=3)
    assert (done.planned_at, done.slot_at) == (None, None), "finished: no next fire, no error"
    left = first_fire(spec(schedule="@every 1h", max_runs=3), T0, runs_done=2)
    assert left.slot_at == T0 + timedelta(hours=1)


def test_no_slot_after_end_at_the_job_has_no_next_fire() -> None:
    planner = SchedulePlanner()
    job = spec(schedule=EVERY_SECOND, end_at=T0 + timedelta(seconds=2))
    ended = T0 + timedelta(seconds=0.5)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, ended_at=ended), ended)
    assert plan.slot_at == T0 + timedelta(seconds=1)
    last = finished(job, RunStatus.SUCCEEDED, slot=T0 + timedelta(seconds=2),
                    ended_at=T0 + timedelta(seconds=2.5))
    plan = planner.after_run(job, last, T0 + timedelta(seconds=2.5))
    assert (plan.planned_at, plan.slot_at, plan.missed) == (None, None, ())


def test_slots_outside_the_bounds_are_never_recorded_missed() -> None:
    """Slots that passed while the job could not run them are missed only within its
    bounds: none after end_at (misfire, overrun, a lost node), none before start_at (a
    triggered run before it goes on at start_at)."""
    planner = SchedulePlanner()
    end = T0 + timedelta(seconds=5)
    now = T0 + timedelta(seconds=100)
    for policy in MisfirePolicy:
        job = spec(schedule=EVERY_SECOND, end_at=end, misfire_policy=policy, misfire_grace_s=1.0)
        plan = planner.misfire(job, T0, now)
        assert all(slot <= end for slot in plan.missed), policy
        assert plan.missed_more == 0
        assert plan.planned_at in (None, end), policy
    overran = spec(schedule=EVERY_SECOND, end_at=end)
    plan = planner.after_run(overran, finished(overran, RunStatus.SUCCEEDED, ended_at=now), now)
    assert plan.planned_at is None
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 6))
    lost = spec(schedule=EVERY_SECOND, end_at=end, recovery_policy=RecoveryPolicy.SKIP)
    plan = planner.recover(lost, T0, 1, now)
    assert plan.planned_at == end, "fire_once: the latest slot within the bounds, late"
    assert plan.missed == tuple(T0 + timedelta(seconds=i) for i in range(1, 5))
    assert plan.missed_more == 0

    start = T0 + timedelta(hours=1)
    later = spec(schedule="0 * * * * ?", start_at=start)
    triggered = finished(later, RunStatus.SUCCEEDED, slot=T0 + timedelta(seconds=7),
                         ended_at=T0 + timedelta(seconds=8))
    plan = planner.after_run(later, triggered, T0 + timedelta(seconds=8))
    assert (plan.slot_at, plan.missed) == (start, ())
    # A triggered run that overran start_at: the ~60 minutes before it were not due.
    long_run = start + timedelta(minutes=2, seconds=30)
    overran = finished(later, RunStatus.SUCCEEDED, slot=T0 + timedelta(seconds=7), ended_at=long_run)
    plan = planner.after_run(later, overran, long_run)
    assert plan.missed == (start, start + timedelta(minutes=1), start + timedelta(minutes=2))
    assert plan.slot_at == start + timedelta(minutes=3)


def test_max_runs_reached_the_job_has_no_next_fire() -> None:
    """The slot counts once the job moves on from it: its last attempt, whatever the
    outcome; a retry is the same run; the max_runs-th ends the job (nothing missed)."""
    planner = SchedulePlanner(random.Random(1))
    job = spec(schedule=EVERY_SECOND, max_runs=2, max_attempts=2)
    first = planner.after_run(job, finished(job, RunStatus.SUCCEEDED), T0, runs_done=0)
    assert (first.planned_at, first.counted) == (T0 + timedelta(seconds=1), True)
    retry = planner.after_run(job, finished(job, RunStatus.FAILED), T0, runs_done=1)
    assert (retry.slot_at, retry.attempt, retry.counted) == (T0, 2, False)
    late = T0 + timedelta(seconds=5.5)
    last = planner.after_run(job, finished(job, RunStatus.FAILED, attempt=2, ended_at=late), late,
                             runs_done=1)
    assert (last.planned_at, last.slot_at, last.missed, last.counted) == (None, None, (), True)
    for status in (RunStatus.SUCCEEDED, RunStatus.TIMED_OUT, RunStatus.KILLED):
        plan = planner.after_run(job, finished(job, status, attempt=2), T0, runs_done=1)
        assert (plan.planned_at, plan.counted) == (None, True), status
    cancelled = planner.after_run(job, finished(job, RunStatus.CANCELLED), T0, runs_done=1)
    assert (cancelled.planned_at, cancelled.counted) == (T0 + timedelta(seconds=1), False)
    skip = spec(schedule=EVERY_SECOND, max_runs=2, recovery_policy=RecoveryPolicy.SKIP)
    lost = planner.recover(skip, T0, 1, T0 + timedelta(seconds=0.5), runs_done=1)
    assert (lost.planned_at, lost.counted) == (None, True)
    rerun = planner.recover(job, T0, 1, T0 + timedelta(seconds=0.5), runs_done=1)
    assert (rerun.slot_at, rerun.counted) == (T0, False), "a rerun is the same run"
    unlimited = planner.after_run(spec(), finished(spec(), RunStatus.SUCCEEDED), T0, runs_done=10**6)
    assert unlimited.planned_at == T0 + timedelta(seconds=1)


def test_jitter_is_a_stable_offset_within_jitter_s_per_job_and_slot() -> None:
    """planned_at = slot + an offset in [0, jitter_s] at millisecond resolution, the same
    from any planner (every node computes the same instant), different between slots
    and between jobs; slot_at stays the schedule's slot."""
    jitter_s = 30.0
    job = spec(schedule="@every 1m", jitter_s=jitter_s)
    now = T0 + timedelta(seconds=0.5)
    offsets: dict[tuple[str, datetime], timedelta] = {}
    for name in ("a", "b"):
        named = spec(name=name, schedule="@every 1m", jitter_s=jitter_s)
        for k in range(50):
            slot = T0 + timedelta(minutes=k)
            plans = [
                planner.after_run(named, finished(named, RunStatus.SUCCEEDED, slot=slot), now)
                for planner in (SchedulePlanner(random.Random(1)), SchedulePlanner(random.Random(2)))
            ]
            assert plans[0] == plans[1], "the same instant from every planner"
            plan = plans[0]
            assert plan.slot_at == slot + timedelta(minutes=1)
            assert plan.planned_at is not None
            assert plan.slot_at is not None
            offset = plan.planned_at - plan.slot_at
            assert timedelta(0) <= offset <= timedelta(seconds=jitter_s)
            assert offset % timedelta(milliseconds=1) == timedelta(0)
            offsets[name, plan.slot_at] = offset
    assert len(set(offsets.values())) > 90, "offsets differ between slots and jobs"
    slots = sorted({slot for _, slot in offsets})
    assert [offsets["a", s] for s in slots] != [offsets["b", s] for s in slots]
    # The first fire, the next slot after a run and a misfire fired once: one instant
    # per slot, whichever path planned it.
    from quartzlite.client import first_fire

    start = T0 + timedelta(minutes=1)
    first = first_fire(spec(schedule="@every 1m", jitter_s=jitter_s, start_at=start), T0)
    after_run = SchedulePlanner().after_run(job, finished(job, RunStatus.SUCCEEDED), now)
    misfired = SchedulePlanner().misfire(job, start, start + timedelta(seconds=61))
    assert first.slot_at == after_run.slot_at == misfired.slot_at == start
    assert first.planned_at == after_run.planned_at == misfired.planned_at
    assert first.planned_at is not None
    assert first.planned_at > start, "this slot's offset is not 0"


def test_no_jitter_leaves_planned_at_on_the_slot() -> None:
    planner = SchedulePlanner()
    job = spec(schedule="@every 1m")
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED), T0)
    assert plan.planned_at == plan.slot_at == T0 + timedelta(minutes=1)


def test_retries_and_reruns_get_no_jitter() -> None:
    planner = SchedulePlanner(random.Random(5))
    job = spec(schedule="@every 1m", jitter_s=3600.0, max_attempts=3, retry_backoff_s=2.0)
    now = T0 + timedelta(seconds=1)
    retry = planner.after_run(job, finished(job, RunStatus.FAILED), now)
    assert retry.slot_at == T0
    assert retry.planned_at is not None
    delay = (retry.planned_at - now).total_seconds()
    assert 1.0 <= delay <= 2.0, "the backoff only"
    rerun = planner.recover(job, T0, 1, now)
    assert (rerun.planned_at, rerun.slot_at) == (now, T0)
    never_started = planner.after_run(
        job, Finished(fired=finished(job, RunStatus.ABANDONED).fired,
                      outcome=Outcome(status=RunStatus.ABANDONED), ended_at=now, started_at=None),
        now)
    assert (never_started.planned_at, never_started.slot_at) == (now, T0)


# -- exclusion calendars ----------------------------------------------------------------------


def calendar_planner(**rules: object) -> SchedulePlanner:
    """A planner that knows one calendar, ``gap``, in UTC."""
    from quartzlite.models import Calendar
    from quartzlite.schedule import parse_rules

    planner = SchedulePlanner()
    planner.use_calendars([Calendar(name="gap", rules=parse_rules(rules))])
    return planner


def test_excluded_slots_are_neither_fired_nor_missed_after_a_misfire() -> None:
    """A daily job down from the 1st to the 4th, the 2nd excluded: fire_once runs the
    4th's slot late and records the 1st and the 3rd missed; skip records those two."""
    planner = calendar_planner(dates=["2026-05-02"])
    noon = datetime(2026, 5, 1, 12, tzinfo=UTC)
    now = noon + timedelta(days=3, hours=1)
    once = spec(schedule="0 0 12 * * ?", calendars=("gap",))
    plan = planner.misfire(once, noon, now)
    assert plan.slot_at == noon + timedelta(days=3)
    assert plan.missed == (noon, noon + timedelta(days=2))
    skip = spec(schedule="0 0 12 * * ?", calendars=("gap",), misfire_policy=MisfirePolicy.SKIP)
    plan = planner.misfire(skip, noon, now)
    assert plan.slot_at == noon + timedelta(days=4)
    assert plan.missed == (noon, noon + timedelta(days=2), noon + timedelta(days=3))
    # Without the calendar the 2nd is missed too.
    assert noon + timedelta(days=1) in SchedulePlanner().misfire(
        spec(schedule="0 0 12 * * ?", misfire_policy=MisfirePolicy.SKIP), noon, now).missed


def test_excluded_slots_are_not_recorded_missed_by_an_overrun() -> None:
    planner = calendar_planner(windows=["2-3 0 12 ? * *"])  # 12:00:02-12:00:03
    job = spec(schedule="@every 1s", calendars=("gap",))
    t = datetime(2026, 5, 1, 12, tzinfo=UTC)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, slot=t,
                                           ended_at=t + timedelta(seconds=5.5)),
                             t + timedelta(seconds=5.6))
    assert plan.missed == (t + timedelta(seconds=1), t + timedelta(seconds=4), t + timedelta(seconds=5))
    assert plan.slot_at == t + timedelta(seconds=6)


def test_a_run_whose_next_slot_is_excluded_goes_on_after_the_excluded_time() -> None:
    planner = calendar_planner(windows=["* * 0-7 ? * *"])
    job = spec(schedule="0 0 * ? * *", calendars=("gap",))  # hourly
    t = datetime(2026, 5, 1, 23, tzinfo=UTC)
    plan = planner.after_run(job, finished(job, RunStatus.SUCCEEDED, slot=t), t + timedelta(seconds=1))
    assert (plan.slot_at, plan.missed) == (datetime(2026, 5, 2, 8, tzinfo=UTC), ())


def test_recovery_moves_on_past_excluded_slots_without_recording_them() -> None:
    planner = calendar_planner(dates=["2026-05-02"])
    job = spec(schedule="0 0 12 * * ?", calendars=("gap",), recovery_policy=RecoveryPolicy.SKIP)
    noon = datetime(2026, 5, 1, 12, tzinfo=UTC)
    plan = planner.recover(job, noon, 1, noon + timedelta(days=1, hours=1))
    assert (plan.slot_at, plan.missed) == (noon + timedelta(days=2), ())


def test_a_slot_planned_before_its_calendar_excluded_it_is_skipped_when_due() -> None:
    noon = datetime(2026, 5, 2, 12, tzinfo=UTC)
    job = spec(schedule="0 0 12 * * ?", calendars=("gap",))
    assert calendar_planner(dates=["2026-05-03"]).excluded(job, noon, noon) is None
    plan = calendar_planner(dates=["2026-05-02"]).excluded(job, noon, noon - timedelta(seconds=1))
    assert plan is not None
    assert (plan.slot_at, plan.missed) == (noon + timedelta(days=1), ())


def test_a_job_naming_a_calendar_the_planner_lacks_cannot_be_planned() -> None:
    from quartzlite.schedule import ExclusionError

    planner = calendar_planner(dates=["2026-05-02"])
    job = spec(calendars=("gone",))
    assert planner.knows_calendars(["gap"])
    assert not planner.knows_calendars(["gap", "gone"])
    with pytest.raises(ExclusionError, match="'gone' does not exist"):
        planner.skip(job, T0, T0)
