"""Dependencies without a database: the @manual schedule form, the upstream fields of a
job's definition and their validation, the conditions as data, and the planner's
decisions for a job that runs only when triggered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from quartzlite import codec
from quartzlite import schedule as schedules
from quartzlite.client import MAX_UPSTREAM, build_spec, first_fire, resumed_fire
from quartzlite.enums import (
    UPSTREAM_OUTCOMES,
    JobState,
    MisfirePolicy,
    RecoveryPolicy,
    RunStatus,
    UpstreamCondition,
)
from quartzlite.errors import ValidationError
from quartzlite.models import (
    MANUAL_SCHEDULE,
    Finished,
    Fired,
    Job,
    JobSpec,
    Outcome,
    Prepared,
)
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.dependencies import ends_slot

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def manual_spec(**fields: object) -> JobSpec:
    return build_spec({"name": "b", "schedule": "@manual", "command": "true", **fields})


def job_of(spec: JobSpec, **state: object) -> Job:
    values: dict[str, object] = {
        "id": 1, "spec": spec, "state": JobState.IDLE, "deleted": False, "next_fire_at": None,
        "next_slot_at": None, "next_attempt": 1, "owner_session": None, "fire_id": None,
        "kill_requested": False, "error": None, "prepared_at": None, "started_at": None,
        "last_ended_at": None, "created_at": T0, "updated_at": T0,
    }
    values.update(state)
    return Job(**values)  # type: ignore[arg-type]


def finished(spec: JobSpec, status: RunStatus, *, attempt: int = 1, started: bool = True) -> Finished:
    prepared = Prepared(job_id=1, name=spec.name, fire_id="f", planned_at=T0, slot_at=T0,
                        attempt=attempt, spec=spec)
    return Finished(fired=Fired(prepared=prepared, run_id=7, fired_at=T0),
                    outcome=Outcome(status=status), ended_at=T0 + timedelta(seconds=1),
                    started_at=T0 if started else None)


# -- the @manual form ------------------------------------------------------------------


def test_manual_has_no_slots_and_is_spelled_one_way() -> None:
    for text in ("@manual", " @MANUAL ", "@Manual"):
        parsed = schedules.parse_schedule(text, "Europe/Paris")
        assert parsed.expression == MANUAL_SCHEDULE == schedules.MANUAL
        assert (parsed.kind, parsed.manual, parsed.one_shot) == ("manual", True, False)
        assert parsed.next_after(T0) is None
    parsed = schedules.parse_schedule("@manual")
    assert schedules.preview(parsed, T0, 5) == []
    assert schedules.first_slot(parsed, T0) is None
    plan = schedules.plan_next(parsed, after=T0, now=T0 + timedelta(days=3),
                               policy=MisfirePolicy.FIRE_ONCE, grace_s=60)
    assert (plan.next_fire_at, plan.missed, plan.missed_more) == (None, [], 0)
    with pytest.raises(ValidationError, match="takes no argument"):
        schedules.parse_schedule("@manual 5s")
    with pytest.raises(ValidationError, match="@manual"):
        schedules.parse_schedule("@nope")  # listed among the allowed forms


def test_a_manual_job_has_no_first_fire_and_is_not_finished_while_idle() -> None:
    spec = manual_spec()
    assert spec.manual
    assert first_fire(spec, T0).planned_at is None  # not refused: it runs when triggered
    assert resumed_fire(spec, T0).planned_at is None
    assert not job_of(spec).finished
    assert not job_of(manual_spec(paused=True)).finished
    # ... unless it ran its max_runs slots, like any job.
    assert job_of(manual_spec(max_runs=2), runs_done=2).finished
    assert not job_of(manual_spec(max_runs=2), runs_done=1).finished
    cron = build_spec({"name": "c", "schedule": "@at 2020-01-01T00:00:00Z", "command": "true"})
    assert job_of(cron).finished


# -- the definition --------------------------------------------------------------------


def test_upstream_is_sorted_without_repeats_and_round_trips_as_json() -> None:
    spec = manual_spec(upstream=["z", "a", "z"], upstream_on="failure")
    assert spec.upstream == ("a", "z")
    assert spec.upstream_on is UpstreamCondition.FAILURE
    data = codec.spec_to_dict(spec)
    assert (data["upstream"], data["upstream_on"]) == (["a", "z"], "failure")
    assert build_spec(data) == spec
    plain = build_spec({"name": "p", "schedule": "@every 1m", "command": "true"})
    assert (plain.upstream, plain.upstream_on) == ((), UpstreamCondition.SUCCESS)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"upstream": ["b"]}, "upstream", "its own upstream"),
        ({"upstream": "a"}, "upstream", "list of job names"),
        ({"upstream": ["bad name"]}, "upstream", "not a job name"),
        ({"upstream": [3]}, "upstream", "not a job name"),
        ({"upstream": [f"j{i}" for i in range(MAX_UPSTREAM + 1)]}, "upstream",
         f"at most {MAX_UPSTREAM}"),
        ({"upstream": ["a"], "schedule": "@every 2s"}, "upstream", "schedule @manual"),
        ({"upstream_on": "always"}, "upstream_on", "success, failure, completion"),
    ],
)
def test_bad_upstream_fields_are_refused_naming_the_field(
    fields: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        manual_spec(**fields)
    assert raised.value.field == field
    assert words in raised.value.reason


def test_the_rule_for_upstream_jobs_says_why() -> None:
    with pytest.raises(ValidationError) as raised:
        build_spec({"name": "b", "schedule": "*/5 * * * *", "command": "true",
                    "upstream": ["a"]})
    assert raised.value.reason == (
        "a job with upstream jobs runs only when they end: give it the schedule @manual")


# -- the conditions --------------------------------------------------------------------


def test_every_condition_has_its_outcomes_and_only_final_ones() -> None:
    assert set(UPSTREAM_OUTCOMES) == set(UpstreamCondition)
    never = {RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.MISSED, RunStatus.QUARANTINED}
    for condition, outcomes in UPSTREAM_OUTCOMES.items():
        assert outcomes, condition
        assert not outcomes & never, condition
    table = {
        status: {c.value for c in UpstreamCondition if c.matches(status)} for status in RunStatus
    }
    assert table == {
        RunStatus.SUCCEEDED: {"success", "completion"},
        RunStatus.FAILED: {"failure", "completion"},
        RunStatus.TIMED_OUT: {"failure", "completion"},
        RunStatus.KILLED: {"failure", "completion"},
        RunStatus.ABANDONED: {"failure", "completion"},
        RunStatus.RUNNING: set(),
        RunStatus.CANCELLED: set(),
        RunStatus.MISSED: set(),
        RunStatus.QUARANTINED: set(),
    }


# -- the planner -----------------------------------------------------------------------


def test_a_manual_slot_found_late_fires_as_planned_whatever_the_grace() -> None:
    planner = SchedulePlanner()
    spec = manual_spec(misfire_grace_s=0, misfire_policy="skip")
    planned = T0 + timedelta(seconds=3)  # an upstream retry's instant, after its slot
    plan = planner.misfire(spec, T0, T0 + timedelta(hours=5), planned)
    assert (plan.planned_at, plan.slot_at, plan.attempt, plan.missed) == (planned, T0, 1, ())
    # A cron job still misfires.
    cron = build_spec({"name": "c", "schedule": "* * * * *", "command": "true",
                       "misfire_policy": "skip"})
    assert planner.misfire(cron, T0, T0 + timedelta(hours=1)).missed[0] == T0


def test_which_ends_of_a_slot_are_ends() -> None:
    """The results transaction triggers downstream jobs only when the job leaves the slot."""
    planner = SchedulePlanner()
    now = T0 + timedelta(seconds=2)

    def ends(spec: JobSpec, status: RunStatus, **kwargs: object) -> bool:
        plan = planner.after_run(spec, finished(spec, status, **kwargs), now)  # type: ignore[arg-type]
        return ends_slot(T0, plan.slot_at, plan.planned_at)

    retried = manual_spec(max_attempts=2)
    assert not ends(retried, RunStatus.FAILED)  # the retry is the slot's next attempt
    assert ends(retried, RunStatus.FAILED, attempt=2)
    assert ends(retried, RunStatus.SUCCEEDED)
    cron = build_spec({"name": "c", "schedule": "@every 1s", "command": "true"})
    assert ends(cron, RunStatus.SUCCEEDED)  # on to its next slot
    rerun = manual_spec(recovery_policy=RecoveryPolicy.RERUN)
    assert not ends(rerun, RunStatus.ABANDONED)  # rerun by its recovery policy
    assert not ends(rerun, RunStatus.ABANDONED, started=False)  # never started: run again
    assert ends(manual_spec(recovery_policy="skip"), RunStatus.ABANDONED)
    assert ends(manual_spec(), RunStatus.CANCELLED)  # an end, but no condition takes it
