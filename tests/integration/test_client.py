"""SchedulerClient against the real database: every validation error names its field and
reason and writes nothing; the management use cases do what they say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, OverrunPolicy, RunStatus, TargetKind
from quartzlite.errors import Conflict, NotFound, ValidationError
from quartzlite.models import JobSpec
from tests.integration.dbtools import (
    add_run,
    job_count,
    job_lock_version,
    job_rows,
    naive,
    set_job,
)

pytestmark = pytest.mark.db

BASE: dict[str, Any] = {"name": "nightly", "schedule": "@every 1h", "command": "echo hi"}
DAY = timedelta(days=1)


def job(**changes: Any) -> dict[str, Any]:
    """A valid job definition with ``changes`` applied (None removes a key)."""
    data = {**BASE, **changes}
    return {k: v for k, v in data.items() if v is not None}


# -- validation ------------------------------------------------------------------------

#: (id, definition, field, fragment of the reason)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("impossible-cron", job(schedule="0 0 0 30 2 ?"), "schedule", "never fires"),
    ("bad-cron-value", job(schedule="61 * * * *"), "schedule", "out of range"),
    ("bad-cron-fields", job(schedule="every day"), "schedule", "expected 5 (cron) or 6-7"),
    ("unknown-schedule-form", job(schedule="@sometimes"), "schedule", "unknown schedule form"),
    # issue 10's poison job: its next instant passed year 9999 and stopped the node.
    ("every-past-year-9999", job(schedule="@every 3000000d"), "schedule", "at most 36500d"),
    ("schedule-not-string", job(schedule=5), "schedule", "must be a string"),
    ("missing-schedule", job(schedule=None), "schedule", "is required"),
    ("unknown-timezone", job(timezone="Mars/Olympus_Mons"), "timezone", "unknown timezone"),
    ("empty-command", job(command=""), "command", "must not be empty"),
    ("blank-command", job(command="   "), "command", "must not be empty"),
    ("nul-in-command", job(command="echo \x00"), "command", "NUL"),
    ("command-and-callable", job(callable="pkg.mod:fn"), "command", "not both"),
    ("neither-command-nor-callable", job(command=None), "command", "give one of command"),
    ("callable-no-function", job(command=None, callable="pkg.mod"), "callable",
     "package.module:function"),
    ("callable-with-spaces", job(command=None, callable="pkg mod:fn"), "callable",
     "package.module:function"),
    ("callable-empty-function", job(command=None, callable="pkg.mod:"), "callable",
     "package.module:function"),
    ("name-bad-characters", job(name="nightly backup!"), "name", "may contain only letters"),
    ("name-leading-dot", job(name=".hidden"), "name", "must start with a letter or digit"),
    ("name-too-long", job(name="n" * 129), "name", "at most 128 characters"),
    ("name-empty", job(name=""), "name", "must not be empty"),
    ("missing-name", job(name=None), "name", "is required"),
    ("timeout-negative", job(timeout_s=-1), "timeout_s", "greater than 0"),
    ("timeout-zero", job(timeout_s=0), "timeout_s", "greater than 0"),
    ("timeout-absurd", job(timeout_s=7 * 24 * 3600 + 1), "timeout_s", "at most 604800"),
    ("timeout-nan", job(timeout_s=float("nan")), "timeout_s", "finite"),
    ("timeout-int-beyond-float", job(timeout_s=10**400), "timeout_s", "finite"),
    ("max-attempts-0", job(max_attempts=0), "max_attempts", "between 1 and 100"),
    ("max-attempts-101", job(max_attempts=101), "max_attempts", "between 1 and 100"),
    ("negative-backoff", job(retry_backoff_s=-0.5), "retry_backoff_s", "at least 0"),
    ("max-backoff-below-backoff", job(retry_backoff_s=60, retry_max_backoff_s=30),
     "retry_max_backoff_s", "at least retry_backoff_s"),
    ("unknown-field", job(retries=3), "retries", "unknown field"),
    ("priority-string", job(priority="high"), "priority", "must be an integer, not a string"),
    ("priority-bool", job(priority=True), "priority", "must be an integer, not a boolean"),
    ("priority-out-of-range", job(priority=5000), "priority", "between -1000 and 1000"),
    ("paused-int", job(paused=1), "paused", "must be a boolean, not an integer"),
    ("kwargs-list", job(command=None, callable="pkg.mod:fn", kwargs=[1, 2]), "kwargs",
     "must be an object, not a list"),
    ("kwargs-not-json", job(command=None, callable="pkg.mod:fn", kwargs={"x": {1, 2}}),
     "kwargs", "JSON-serialisable"),
    ("kwargs-with-command", job(kwargs={"x": 1}), "kwargs", "only a callable takes kwargs"),
    ("too-many-tags", job(tags=[f"t{i}" for i in range(9)]), "tags", "at most 8 tags"),
    ("bad-tag", job(tags=["gpu", "Big Box"]), "tags", "'Big Box'"),
    ("tags-not-list", job(tags=5), "tags", "must be a list of strings"),
    ("bad-misfire-policy", job(misfire_policy="sometimes"), "misfire_policy",
     "must be one of fire_once, skip"),
    ("bad-recovery-policy", job(recovery_policy="retry"), "recovery_policy",
     "must be one of rerun, skip"),
    ("bad-overrun-policy", job(overrun_policy="sometimes"), "overrun_policy",
     "must be one of skip, catch_up"),
    ("overrun-policy-not-string", job(overrun_policy=1), "overrun_policy",
     "must be one of skip, catch_up"),
    # the misfire policy's values are not the overrun policy's
    ("overrun-policy-fire-once", job(overrun_policy="fire_once"), "overrun_policy",
     "must be one of skip, catch_up"),
    ("description-too-long", job(description="d" * 1025), "description", "at most 1024"),
    ("at-in-the-past", job(schedule="@at 2001-01-01T00:00:00Z"), "schedule", "never fires"),
    ("start-at-not-an-instant", job(start_at="tomorrow"), "start_at", "not an ISO-8601 instant"),
    ("start-at-without-offset", job(start_at="2030-01-01T00:00:00"), "start_at",
     "must include a UTC offset"),
    ("start-at-number", job(start_at=1893456000), "start_at",
     "must be an ISO-8601 instant such as 2026-01-31T12:00:00Z, not an integer"),
    ("start-at-out-of-range", job(start_at="1960-01-01T00:00:00Z"), "start_at", "out of range"),
    ("end-at-not-an-instant", job(end_at="2030-02-30T00:00:00Z"), "end_at",
     "not an ISO-8601 instant"),
    ("end-at-before-start-at", job(start_at="2030-01-02T00:00:00Z", end_at="2030-01-01T00:00:00Z"),
     "end_at", "must be after start_at (2030-01-02T00:00:00+00:00)"),
    ("end-at-equal-to-start-at", job(start_at="2030-01-02T00:00:00Z",
                                     end_at="2030-01-02T02:00:00+02:00"),
     "end_at", "must be after start_at"),
    ("end-at-in-the-past", job(end_at="2020-01-01T00:00:00Z"), "end_at", "would never fire"),
    ("end-at-before-the-first-slot", job(schedule="0 0 * * * ?", end_at="2030-01-01T00:30:00Z",
                                         start_at="2030-01-01T00:00:01Z"), "end_at",
     "would never fire"),
    ("max-runs-0", job(max_runs=0), "max_runs", "between 1 and 2147483647, got 0"),
    ("max-runs-negative", job(max_runs=-3), "max_runs", "between 1 and"),
    ("max-runs-fraction", job(max_runs=2.5), "max_runs", "must be an integer, not a number"),
    ("max-runs-string", job(max_runs="3"), "max_runs", "must be an integer, not a string"),
    ("max-runs-bool", job(max_runs=True), "max_runs", "must be an integer, not a boolean"),
    ("max-runs-beyond-int", job(max_runs=2**31), "max_runs", "between 1 and 2147483647"),
    ("jitter-negative", job(jitter_s=-0.5), "jitter_s", "at least 0 and at most 3600"),
    ("jitter-beyond-an-hour", job(jitter_s=3600.5), "jitter_s", "at most 3600, got 3600.5"),
    ("jitter-nan", job(jitter_s=float("nan")), "jitter_s", "finite"),
    ("jitter-string", job(jitter_s="5s"), "jitter_s", "must be a number, not a string"),
]


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [pytest.param(d, f, r, id=i) for i, d, f, r in INVALID],
)
def test_add_job_rejects_invalid_input_and_writes_nothing(
    client: SchedulerClient, db_url: str, data: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        client.add_job(data)

    assert caught.value.field == field
    assert reason in caught.value.reason
    assert caught.value.message == f"{field}: {caught.value.reason}"
    assert job_count(db_url) == 0
    assert job_lock_version(db_url) == 0  # not even the lock was taken (or it rolled back)


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [pytest.param(d, f, r, id=i) for i, d, f, r in INVALID[::4]],
)
def test_put_job_rejects_invalid_input_and_writes_nothing(
    client: SchedulerClient, db_url: str, data: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        client.put_job(data)

    assert (caught.value.field, reason in caught.value.reason) == (field, True)
    assert job_count(db_url) == 0


def test_a_body_that_is_not_an_object_is_rejected(client: SchedulerClient, db_url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        client.add_job(["nightly"])  # type: ignore[arg-type]

    assert (caught.value.field, caught.value.reason) == ("body", "must be an object, not a list")
    assert job_count(db_url) == 0


def test_update_job_rejects_invalid_changes_and_leaves_the_job_alone(
    client: SchedulerClient, db_url: str
) -> None:
    before = client.add_job(job(timeout_s=30))
    version = job_lock_version(db_url)

    for changes, field, reason in [
        ({"timeout_s": 0}, "timeout_s", "greater than 0"),
        ({"schedule": "0 0 0 30 2 ?"}, "schedule", "never fires"),
        ({"name": "renamed"}, "name", "cannot be changed"),
        ({"kwargs": {"a": 1}}, "kwargs", "only a callable"),
        ({"bogus": True}, "bogus", "unknown field"),
        ({"end_at": "2020-01-01T00:00:00Z"}, "end_at", "would never fire"),
        ({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "end_at",
         "must be after start_at"),
        ({"max_runs": 0}, "max_runs", "between 1 and"),
        ({"jitter_s": 4000}, "jitter_s", "at most 3600"),
    ]:
        with pytest.raises(ValidationError) as caught:
            client.update_job("nightly", changes)
        assert (caught.value.field, reason in caught.value.reason) == (field, True), changes

    after = client.get_job("nightly")
    assert after == before
    assert job_lock_version(db_url) == version  # every attempt rolled back


def test_a_bad_name_in_a_lookup_is_a_validation_error(client: SchedulerClient) -> None:
    for call in (client.get_job, client.pause_job, client.delete_job, client.trigger_job):
        with pytest.raises(ValidationError) as caught:
            call("no such/name")
        assert caught.value.field == "name"


# -- add, put, update ------------------------------------------------------------------


def test_add_job_stores_the_definition_and_plans_the_first_fire(
    client: SchedulerClient, db_url: str
) -> None:
    before = client.now()
    created = client.add_job(
        job(
            timezone="Europe/Berlin",
            timeout_s=90,
            max_attempts=3,
            retry_backoff_s=2,
            retry_max_backoff_s=60,
            misfire_policy="skip",
            misfire_grace_s=5,
            overrun_policy="catch_up",
            recovery_policy="skip",
            priority=7,
            tags=["gpu", "eu", "gpu"],
            description="the nightly export",
        )
    )

    assert created.state is JobState.IDLE
    assert not created.deleted
    assert created.spec.tags == ("eu", "gpu")  # sorted, de-duplicated
    assert created.spec.timeout_s == 90.0
    assert created.spec.max_attempts == 3
    assert created.spec.target_kind is TargetKind.SHELL
    assert created.next_fire_at is not None
    assert before + timedelta(hours=1) <= created.next_fire_at <= client.now() + timedelta(hours=1)
    assert created.next_slot_at == created.next_fire_at
    assert created.next_attempt == 1
    assert client.get_job("nightly") == created
    (row,) = job_rows(db_url)
    assert (row["name"], row["active_name"], row["tags"]) == ("nightly", "nightly", "eu,gpu")
    assert created.spec.overrun_policy is OverrunPolicy.CATCH_UP
    assert row["overrun_policy"] == "catch_up"


def test_add_job_accepts_a_jobspec(client: SchedulerClient) -> None:
    spec = JobSpec(name="from-spec", schedule="*/5 * * * *", callable="pkg.mod:run",
                   kwargs={"n": 1})

    created = client.add_job(spec)

    assert created.spec == spec
    assert created.spec.target_kind is TargetKind.PYTHON


def test_add_existing_name_is_a_conflict(client: SchedulerClient, db_url: str) -> None:
    client.add_job(job())

    with pytest.raises(Conflict, match="a job named 'nightly' exists"):
        client.add_job(job(command="echo other"))

    assert job_count(db_url) == 1
    assert client.get_job("nightly").spec.command == "echo hi"


def test_put_job_twice_with_the_same_definition_changes_nothing(
    client: SchedulerClient, db_url: str
) -> None:
    first, changed = client.put_job(job(timeout_s=1.5, tags=["b", "a"], description="x"))
    assert changed is True
    rows = job_rows(db_url)

    again, changed_again = client.put_job(job(timeout_s=1.5, tags=["a", "b"], description="x"))

    assert changed_again is False
    assert again == first
    assert again.updated_at == first.updated_at
    assert job_rows(db_url) == rows  # not a column touched


def test_put_job_is_idempotent_for_kwargs_json_reshapes(client: SchedulerClient) -> None:
    """Tuples become lists and keys become strings in storage; the spec says so up front,
    so publishing the same definition again is no change (and mixed keys do not crash)."""
    data = job(command=None, callable="pkg.mod:fn", kwargs={"xs": (1, 2), 7: "seven"})

    first, changed = client.put_job(data)
    again, changed_again = client.put_job(data)

    assert changed is True
    assert first.spec.kwargs == {"7": "seven", "xs": [1, 2]}
    assert changed_again is False
    assert again.updated_at == first.updated_at


def test_put_job_with_a_change_replaces_it(client: SchedulerClient) -> None:
    first, _ = client.put_job(job())

    second, changed = client.put_job(job(command="echo changed", priority=3))

    assert changed is True
    assert second.id == first.id
    assert (second.spec.command, second.spec.priority) == ("echo changed", 3)
    assert second.updated_at >= first.updated_at
    assert second.created_at == first.created_at
    # the schedule did not change: the planned fire stays
    assert second.next_fire_at == first.next_fire_at


def test_put_job_with_a_new_schedule_replans(client: SchedulerClient) -> None:
    first, _ = client.put_job(job(schedule="@every 1h"))

    second, changed = client.put_job(job(schedule="@every 10h"))

    assert changed is True
    assert second.next_fire_at is not None
    assert first.next_fire_at is not None
    assert second.next_fire_at - first.next_fire_at > timedelta(hours=8)


def test_update_job_changes_only_what_it_is_given(client: SchedulerClient) -> None:
    created = client.add_job(
        job(description="keep me", tags=["eu"], priority=5, timeout_s=30, max_attempts=2)
    )

    updated = client.update_job("nightly", {"timeout_s": 45})

    assert updated.spec.timeout_s == 45.0
    for name in ("schedule", "command", "description", "tags", "priority", "max_attempts"):
        assert getattr(updated.spec, name) == getattr(created.spec, name), name
    assert updated.next_fire_at == created.next_fire_at


def test_the_overrun_policy_defaults_to_skip_for_new_jobs_and_round_trips(
    client: SchedulerClient, db_url: str
) -> None:
    created = client.add_job(job())
    assert created.spec.overrun_policy is OverrunPolicy.SKIP
    assert job_rows(db_url)[0]["overrun_policy"] == "skip"

    updated = client.update_job("nightly", {"overrun_policy": "catch_up"})

    assert updated.spec.overrun_policy is OverrunPolicy.CATCH_UP
    assert client.get_job("nightly").spec.overrun_policy is OverrunPolicy.CATCH_UP
    assert job_rows(db_url)[0]["overrun_policy"] == "catch_up"
    # A partial change keeps it; the same definition published again is no change.
    kept = client.update_job("nightly", {"description": "kept"})
    assert kept.spec.overrun_policy is OverrunPolicy.CATCH_UP
    _, changed = client.put_job(job(description="kept", overrun_policy="catch_up"))
    assert changed is False
    # A whole definition without it is the new default again.
    replaced, changed = client.put_job(job(description="kept"))
    assert changed is True
    assert replaced.spec.overrun_policy is OverrunPolicy.SKIP
    # A JobSpec carries it too.
    spec = JobSpec(name="typed", schedule="@every 1m", command="true",
                   overrun_policy=OverrunPolicy.CATCH_UP)
    assert client.add_job(spec).spec == spec


def test_bounds_and_jitter_are_stored_read_back_and_plan_the_first_fire(
    client: SchedulerClient, db_url: str
) -> None:
    """Instants in any offset are stored in UTC; an ``@every`` job with a start ahead
    first fires on start_at plus its jitter (its slot is start_at itself)."""
    from quartzlite.schedule import jittered

    start = (client.now() + DAY).replace(microsecond=0)
    end = start + 10 * DAY
    created = client.add_job(job(
        schedule="@every 1h", start_at=start.astimezone(ZoneInfo("Asia/Tokyo")).isoformat(),
        end_at=end.isoformat().replace("+00:00", "Z"), max_runs=4, jitter_s=120,
    ))

    assert (created.spec.start_at, created.spec.end_at) == (start, end)
    assert created.spec.start_at is not None
    assert created.spec.start_at.utcoffset() == timedelta(0)
    assert (created.spec.max_runs, created.spec.jitter_s) == (4, 120.0)
    assert (created.runs_done, created.finished) == (0, False)
    assert created.next_slot_at == start
    assert created.next_fire_at == jittered("nightly", start, 120)
    assert start <= created.next_fire_at <= start + timedelta(seconds=120)
    assert client.get_job("nightly") == created
    (row,) = job_rows(db_url)
    assert (row["start_at"], row["end_at"], row["max_runs"], row["jitter_s"], row["runs_done"]) == (
        naive(start), naive(end), 4, 120.0, 0)
    # The same definition again is no change; a JobSpec carries the fields too.
    _, changed = client.put_job(job(schedule="@every 1h", start_at=start, end_at=end, max_runs=4,
                                    jitter_s=120.0))
    assert changed is False
    spec = JobSpec(name="typed", schedule="@every 1m", command="true", start_at=start,
                   end_at=end, max_runs=1, jitter_s=0.25)
    assert client.add_job(spec).spec == spec


def test_changing_bounds_replans_and_keeps_the_run_count(client: SchedulerClient, db_url: str) -> None:
    """A job that ran max_runs slots is finished (no next fire); raising max_runs plans
    it again from now; lowering it to the count finishes it; runs_done is never reset,
    not even by a new schedule; resuming a finished job leaves it finished."""
    client.add_job(job(schedule="@every 1h", max_runs=5))
    set_job(db_url, "nightly", runs_done=2)

    changed = client.update_job("nightly", {"max_runs": 2})
    assert (changed.next_fire_at, changed.runs_done, changed.finished) == (None, 2, True)
    assert changed.state is JobState.IDLE, "finished is derived: the state stays idle"
    assert client.describe_job("nightly").upcoming == []

    paused = client.pause_job("nightly")
    assert paused.finished is False, "a paused job is paused, not finished"
    resumed = client.resume_job("nightly")
    assert (resumed.next_fire_at, resumed.finished) == (None, True)

    rescheduled = client.update_job("nightly", {"schedule": "@every 2h"})
    assert (rescheduled.next_fire_at, rescheduled.runs_done) == (None, 2)
    raised = client.update_job("nightly", {"max_runs": 4})
    now = client.now()
    assert raised.next_fire_at is not None
    assert now < raised.next_fire_at <= now + timedelta(hours=2, seconds=1)
    assert (raised.runs_done, raised.finished) == (2, False)
    view = client.describe_job("nightly", upcoming=5)
    assert len(view.upcoming) == 2, "two runs left: the next fire and one more slot"
    assert view.upcoming[1] - view.upcoming[0] == timedelta(hours=2)


def test_resuming_a_job_whose_end_has_passed_finishes_it(client: SchedulerClient, db_url: str) -> None:
    """Paused, then its end_at (or its one @at) passed: resuming is not refused (the
    operator changed nothing that could be wrong); the job shows finished."""
    client.add_job(job(schedule="@every 1h"))
    client.pause_job("nightly")
    set_job(db_url, "nightly", end_at=naive(client.now() - timedelta(seconds=1)))
    resumed = client.resume_job("nightly")
    assert (resumed.spec.paused, resumed.next_fire_at, resumed.finished) == (False, None, True)
    client.add_job(job(name="once", schedule=f"@at {(client.now() + timedelta(hours=1)).isoformat()}"))
    client.pause_job("once")
    set_job(db_url, "once", schedule="@at 2020-01-01T00:00:00Z")
    assert client.resume_job("once").finished is True


def test_describe_job_shows_the_jittered_instants_within_the_bounds(
    client: SchedulerClient,
) -> None:
    from quartzlite.schedule import jittered

    start = (client.now() + DAY).replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=2, minutes=30)
    client.add_job(job(schedule="0 0 * * * ?", start_at=start, end_at=end, jitter_s=600))

    view = client.describe_job("nightly", upcoming=5)

    slots = [start, start + timedelta(hours=1), start + timedelta(hours=2)]
    assert view.upcoming == [jittered("nightly", slot, 600) for slot in slots]
    assert view.upcoming != slots, "with 600 s of jitter not every offset is 0"
    assert view.job.next_slot_at == start


def test_update_job_switches_between_command_and_callable(client: SchedulerClient) -> None:
    client.add_job(job())

    to_python = client.update_job("nightly", {"callable": "pkg.tasks:export", "kwargs": {"n": 2}})

    assert (to_python.spec.command, to_python.spec.callable) == (None, "pkg.tasks:export")
    assert to_python.spec.kwargs == {"n": 2}
    assert to_python.spec.target_kind is TargetKind.PYTHON

    to_shell = client.update_job("nightly", {"command": "echo back"})

    assert (to_shell.spec.command, to_shell.spec.callable) == ("echo back", None)
    assert to_shell.spec.kwargs == {}
    assert to_shell.spec.target_kind is TargetKind.SHELL
    assert client.get_job("nightly") == to_shell


def test_update_of_a_missing_job_is_not_found(client: SchedulerClient) -> None:
    with pytest.raises(NotFound, match="no job named 'ghost'"):
        client.update_job("ghost", {"priority": 1})


# -- pause, resume, delete, trigger, kill ----------------------------------------------


def test_pause_and_resume(client: SchedulerClient, db_url: str) -> None:
    client.add_job(job(schedule="@every 1h"))

    paused = client.pause_job("nightly")
    assert paused.spec.paused is True
    assert client.pause_job("nightly").updated_at == paused.updated_at  # already paused

    # The job stays paused for a long time: its planned fire is now far in the past.
    set_job(db_url, "nightly", next_fire_at=naive(datetime(2020, 1, 1, tzinfo=UTC)))
    now = client.now()

    resumed = client.resume_job("nightly")

    assert resumed.spec.paused is False
    assert resumed.next_fire_at is not None
    assert resumed.next_fire_at > now
    assert resumed.next_fire_at <= client.now() + timedelta(hours=1)
    assert resumed.next_slot_at == resumed.next_fire_at
    assert resumed.next_attempt == 1


def test_pause_of_a_prepared_job_takes_it_back(client: SchedulerClient, db_url: str) -> None:
    client.add_job(job())
    set_job(db_url, "nightly", state="prepared", owner_session="s1", fire_id="f1",
            prepared_at=naive(client.now()))

    paused = client.pause_job("nightly")

    assert (paused.state, paused.owner_session, paused.fire_id) == (JobState.IDLE, None, None)


def test_delete_keeps_history_and_frees_the_name(client: SchedulerClient, db_url: str) -> None:
    old = client.add_job(job())
    run_id = add_run(db_url, job_id=old.id, job_name="nightly",
                     planned_at=datetime(2026, 1, 1, 3, tzinfo=UTC))

    deleted = client.delete_job("nightly")

    assert deleted.deleted is True
    with pytest.raises(NotFound):
        client.get_job("nightly")
    with pytest.raises(NotFound):
        client.delete_job("nightly")
    assert [j.name for j in client.list_jobs().items] == []
    history = client.list_runs(job="nightly").items
    assert [r.id for r in history] == [run_id]
    assert client.get_run(run_id).job_id == old.id

    again = client.add_job(job(command="echo again"))

    assert again.id != old.id
    rows = job_rows(db_url)
    assert [(r["name"], r["active_name"], bool(r["deleted"])) for r in rows] == [
        ("nightly", None, True),
        ("nightly", "nightly", False),
    ]
    assert client.get_run(run_id).job_id == old.id  # history still points at the old job


def test_trigger_makes_an_idle_job_due_now(client: SchedulerClient) -> None:
    client.add_job(job(schedule="@every 1d"))
    before = client.now()

    triggered = client.trigger_job("nightly")

    after = client.now()
    assert triggered.next_fire_at is not None
    assert before <= triggered.next_fire_at <= after
    assert triggered.next_slot_at == triggered.next_fire_at
    assert triggered.state is JobState.IDLE
    assert triggered.next_attempt == 1


def test_trigger_of_a_paused_job_is_a_conflict(client: SchedulerClient) -> None:
    created = client.add_job(job(paused=True))

    with pytest.raises(Conflict, match="paused"):
        client.trigger_job("nightly")

    assert client.get_job("nightly").next_fire_at == created.next_fire_at


def test_trigger_of_a_running_job_is_a_conflict(client: SchedulerClient, db_url: str) -> None:
    client.add_job(job())
    set_job(db_url, "nightly", state="executing", owner_session="s1", fire_id="f1")

    with pytest.raises(Conflict, match="is running"):
        client.trigger_job("nightly")


def test_kill_of_a_job_that_does_not_run_is_a_conflict(client: SchedulerClient) -> None:
    client.add_job(job())

    with pytest.raises(Conflict, match="is not running"):
        client.kill_job("nightly")

    assert client.get_job("nightly").kill_requested is False


def test_kill_of_a_running_job_asks_its_node(client: SchedulerClient, db_url: str) -> None:
    client.add_job(job())
    set_job(db_url, "nightly", state="executing", owner_session="s1", fire_id="f1")

    killed = client.kill_job("nightly")

    assert killed.kill_requested is True
    assert killed.state is JobState.EXECUTING


def test_missing_jobs_are_not_found(client: SchedulerClient) -> None:
    for call in (client.get_job, client.pause_job, client.resume_job, client.delete_job,
                 client.trigger_job, client.kill_job, client.describe_job):
        with pytest.raises(NotFound, match="no job named 'ghost'"):
            call("ghost")


# -- listing jobs ----------------------------------------------------------------------


def test_list_jobs_filters(client: SchedulerClient, db_url: str) -> None:
    client.add_jobs(
        [
            job(name="a_b1", tags=["gpu"]),
            job(name="axb2", tags=["gpu", "eu"]),
            job(name="a-c", paused=True),
            job(name="b.one", tags=["eu"]),
            job(name="B2"),
        ]
    )
    set_job(db_url, "b.one", state="prepared", owner_session="s1", fire_id="f1")

    def names(**filters: Any) -> list[str]:
        return [j.name for j in client.list_jobs(**filters).items]

    assert names() == ["B2", "a-c", "a_b1", "axb2", "b.one"]  # binary collation order
    assert names(state="prepared") == ["b.one"]
    assert names(state="idle") == ["B2", "a-c", "a_b1", "axb2"]
    assert names(paused=True) == ["a-c"]
    assert names(paused=False) == ["B2", "a_b1", "axb2", "b.one"]
    assert names(tag="gpu") == ["a_b1", "axb2"]
    assert names(tag="eu") == ["axb2", "b.one"]
    assert names(tag="none") == []
    assert names(name_prefix="a") == ["a-c", "a_b1", "axb2"]
    assert names(name_prefix="b") == ["b.one"]  # the binary collation is case-sensitive
    # LIKE wildcards in a prefix are matched literally
    assert names(name_prefix="a_") == ["a_b1"]
    assert names(name_prefix="%") == []
    assert names(name_prefix="a%b") == []
    assert names(name_prefix="_") == []
    assert names(name_prefix="a\\") == []
    assert names(tag="gpu", name_prefix="ax") == ["axb2"]
    assert names(paused=False, state="idle", tag="eu") == ["axb2"]


def test_list_jobs_pages_with_a_cursor(client: SchedulerClient) -> None:
    expected = sorted(f"job-{i:02d}" for i in range(23))
    assert client.add_jobs([job(name=n) for n in reversed(expected)]) == 23

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = client.list_jobs(limit=5, cursor=cursor)
        pages += 1
        assert len(page.items) == (5 if page.next_cursor else 3)
        seen.extend(j.name for j in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
        assert pages < 10, "the cursor never ends"

    assert pages == 5
    assert seen == expected  # no duplicates, no gaps, in order


def test_list_jobs_pages_exactly_full(client: SchedulerClient) -> None:
    client.add_jobs([job(name=f"j{i}") for i in range(4)])

    first = client.list_jobs(limit=2)
    second = client.list_jobs(limit=2, cursor=first.next_cursor)

    assert [j.name for j in first.items + second.items] == ["j0", "j1", "j2", "j3"]
    assert second.next_cursor is None


def test_list_jobs_rejects_bad_arguments(client: SchedulerClient) -> None:
    for kwargs, field, reason in [
        ({"state": "sleeping"}, "state", "must be one of idle, prepared, executing"),
        ({"limit": 0}, "limit", "between 1 and 1000"),
        ({"limit": 1001}, "limit", "between 1 and 1000"),
        ({"cursor": "!!not-a-cursor"}, "cursor", "is not a cursor"),
    ]:
        with pytest.raises(ValidationError) as caught:
            client.list_jobs(**kwargs)
        assert (caught.value.field, reason in caught.value.reason) == (field, True), kwargs


# -- runs ------------------------------------------------------------------------------


def plant_runs(client: SchedulerClient, db_url: str) -> dict[str, Any]:
    """Two jobs with runs on 1-6 Jan 2026 at 03:00 (ids ascending with planned_at)."""
    a = client.add_job(job(name="alpha"))
    b = client.add_job(job(name="beta"))
    day = datetime(2026, 1, 1, 3, tzinfo=UTC)
    ids: dict[str, list[int]] = {"alpha": [], "beta": []}
    statuses = ["succeeded", "failed", "succeeded", "timed_out", "succeeded", "missed"]
    for i, status in enumerate(statuses):
        ids["alpha"].append(add_run(db_url, job_id=a.id, job_name="alpha",
                                    planned_at=day + i * DAY, status=status, node="node-a"))
        ids["beta"].append(add_run(db_url, job_id=b.id, job_name="beta",
                                   planned_at=day + i * DAY, status="succeeded", node="node-b"))
    return {"day": day, "ids": ids, "alpha": a, "beta": b}


def test_list_runs_filters(client: SchedulerClient, db_url: str) -> None:
    planted = plant_runs(client, db_url)
    day: datetime = planted["day"]
    alpha: list[int] = planted["ids"]["alpha"]
    beta: list[int] = planted["ids"]["beta"]

    def ids(**filters: Any) -> list[int]:
        return [r.id for r in client.list_runs(**filters).items]

    assert ids() == sorted(alpha + beta, reverse=True)  # newest first
    assert ids(job="alpha") == alpha[::-1]
    assert ids(job="ghost") == []
    assert ids(status="failed") == [alpha[1]]
    assert ids(job="alpha", status="succeeded") == [alpha[4], alpha[2], alpha[0]]
    assert ids(job="beta", status="failed") == []
    assert ids(node="node-b") == beta[::-1]
    assert ids(node="s-node-a") == alpha[::-1]  # a session id works too
    # since is inclusive, until exclusive
    assert ids(job="alpha", since=day + 2 * DAY) == [alpha[5], alpha[4], alpha[3], alpha[2]]
    assert ids(job="alpha", until=day + 2 * DAY) == [alpha[1], alpha[0]]
    assert ids(job="beta", since=day + DAY, until=day + 3 * DAY) == [beta[2], beta[1]]
    # an offset other than UTC means the same instant
    berlin = (day + 2 * DAY).astimezone(ZoneInfo("Europe/Berlin"))
    assert ids(job="alpha", since=berlin) == ids(job="alpha", since=day + 2 * DAY)

    run = client.get_run(alpha[3])
    assert (run.job_name, run.status, run.planned_at) == ("alpha", RunStatus.TIMED_OUT,
                                                          day + 3 * DAY)


def test_list_runs_pages_with_a_cursor(client: SchedulerClient, db_url: str) -> None:
    planted = plant_runs(client, db_url)
    every = sorted(planted["ids"]["alpha"] + planted["ids"]["beta"], reverse=True)

    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = client.list_runs(limit=5, cursor=cursor)
        pages += 1
        seen.extend(r.id for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
        assert pages < 10, "the cursor never ends"

    assert pages == 3
    assert seen == every

    filtered: list[int] = []
    cursor = None
    while True:
        page = client.list_runs(job="alpha", status="succeeded", limit=2, cursor=cursor)
        filtered.extend(r.id for r in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    alpha = planted["ids"]["alpha"]
    assert filtered == [alpha[4], alpha[2], alpha[0]]


def test_list_runs_rejects_bad_arguments(client: SchedulerClient) -> None:
    for kwargs, field, reason in [
        ({"status": "exploded"}, "status", "must be one of running, succeeded"),
        ({"since": datetime(2026, 1, 1)}, "since", "must include a UTC offset"),  # noqa: DTZ001
        ({"until": datetime(2026, 1, 1)}, "until", "must include a UTC offset"),  # noqa: DTZ001
        ({"limit": 0}, "limit", "between 1 and 1000"),
        ({"cursor": "bm90LWEtbnVtYmVy"}, "cursor", "is not a cursor"),  # "not-a-number"
    ]:
        with pytest.raises(ValidationError) as caught:
            client.list_runs(**kwargs)
        assert (caught.value.field, reason in caught.value.reason) == (field, True), kwargs


def test_get_run_of_a_missing_run_is_not_found(client: SchedulerClient) -> None:
    with pytest.raises(NotFound, match="no run with id 987654"):
        client.get_run(987654)


# -- bulk ------------------------------------------------------------------------------


def test_add_jobs_adds_them_all(client: SchedulerClient) -> None:
    count = client.add_jobs([job(name="one"), job(name="two", command=None,
                                                  callable="pkg.mod:fn"), job(name="three")])

    assert count == 3
    assert [j.name for j in client.list_jobs().items] == ["one", "three", "two"]
    assert all(j.next_fire_at is not None for j in client.list_jobs().items)


def test_add_jobs_of_nothing_adds_nothing(client: SchedulerClient, db_url: str) -> None:
    assert client.add_jobs([]) == 0
    assert job_count(db_url) == 0


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        (job(name="two", timeout_s=-5), "jobs[1].timeout_s", "greater than 0"),
        (job(name="two", schedule="0 0 0 30 2 ?"), "jobs[1].schedule", "never fires"),
        (job(name="bad name"), "jobs[1].name", "may contain only"),
        (job(name="one"), "jobs[1].name", "'one' appears twice"),
        (job(name="two", schedule="@at 2001-01-01T00:00:00Z"), "jobs[1].schedule",
         "never fires"),
    ],
)
def test_add_jobs_is_all_or_nothing(
    client: SchedulerClient, db_url: str, bad: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        client.add_jobs([job(name="one"), bad, job(name="three")])

    assert caught.value.field == field
    assert reason in caught.value.reason
    assert job_count(db_url) == 0


def test_add_jobs_conflicting_with_an_existing_job_writes_nothing(
    client: SchedulerClient, db_url: str
) -> None:
    existing = client.add_job(job(name="two"))

    with pytest.raises(Conflict, match="'two'"):
        client.add_jobs([job(name="one"), job(name="two"), job(name="three")])

    assert [r["name"] for r in job_rows(db_url)] == ["two"]
    assert client.get_job("two") == existing


# -- describe, cluster, preview ----------------------------------------------------------


def test_describe_job_shows_upcoming_times_and_the_last_run(
    client: SchedulerClient, db_url: str
) -> None:
    created = client.add_job(job(schedule="0 0 12 * * ?", timezone="UTC"))

    view = client.describe_job("nightly", upcoming=4)

    assert view.job == created
    assert view.last_run is None
    assert len(view.upcoming) == 4
    assert view.upcoming[0] == created.next_fire_at
    for earlier, later in zip(view.upcoming, view.upcoming[1:], strict=False):
        assert later - earlier == DAY
    assert all(t.astimezone(UTC).hour == 12 and t.minute == 0 for t in view.upcoming)

    ran = add_run(db_url, job_id=created.id, job_name="nightly",
                  planned_at=datetime(2026, 1, 2, 12, tzinfo=UTC))
    add_run(db_url, job_id=created.id, job_name="nightly",
            planned_at=datetime(2026, 1, 3, 12, tzinfo=UTC), status="missed")

    assert client.describe_job("nightly").last_run is not None
    assert client.describe_job("nightly").last_run.id == ran  # type: ignore[union-attr]
    assert len(client.describe_job("nightly").upcoming) == 5


def test_describe_job_of_a_one_shot_job(client: SchedulerClient) -> None:
    at = (client.now() + timedelta(days=3)).replace(microsecond=0)
    client.add_job(job(schedule=f"@at {at.isoformat()}"))

    view = client.describe_job("nightly")

    assert view.upcoming == [at]


def test_cluster_is_empty_without_nodes(client: SchedulerClient) -> None:
    assert client.cluster() == []


def test_now_is_the_database_clock_in_utc(client: SchedulerClient) -> None:
    now = client.now()

    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
    assert abs(now - datetime.now(UTC)) < timedelta(hours=1)  # the same day, roughly


def test_preview(client: SchedulerClient) -> None:
    start = datetime(2026, 10, 24, tzinfo=UTC)

    times = client.preview("0 30 2 * * ?", "Europe/Berlin", start=start, count=3)

    assert [t.isoformat() for t in times] == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    with pytest.raises(ValidationError) as caught:
        client.preview("@every 1s", start=start, count=0)
    assert caught.value.field == "count"
