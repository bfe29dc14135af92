"""Exclusion calendars through the library against the real database: create, replace,
show, list and delete; the rules jobs and calendars keep between them (an unknown name,
a calendar in use); first fires and upcoming slots without excluded ones; and the node's
store, which reads calendars it lacks and skips a planned slot a calendar now excludes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.errors import Conflict, NotFound, ValidationError
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.node import NodeStore
from tests.integration.dbtools import job_lock_version, naive, registered_store, set_job

pytestmark = pytest.mark.db

SESSION = "c" * 32


def holidays(*dates: str, name: str = "holidays", **fields: object) -> dict[str, object]:
    return {"name": name, "rules": {"dates": list(dates)}, **fields}


def test_calendars_are_created_shown_listed_replaced_idempotently_and_deleted(
    client: SchedulerClient, db_url: str
) -> None:
    before = job_lock_version(db_url)
    added = client.add_calendar(holidays("2026-12-25", timezone="Europe/Paris",
                                         description="office closed"))
    assert (added.name, added.timezone, added.description) == ("holidays", "Europe/Paris",
                                                               "office closed")
    assert added.rules.dates == ("2026-12-25",)
    assert job_lock_version(db_url) == before + 1, "a calendar write takes the job lock"
    with pytest.raises(Conflict):
        client.add_calendar(holidays("2026-12-26"))

    same, changed = client.put_calendar(holidays("2026-12-25", timezone="Europe/Paris",
                                                 description="office closed"))
    assert (changed, same.updated_at) == (False, added.updated_at)
    replaced, changed = client.put_calendar(
        {"name": "holidays", "timezone": "Europe/Paris",
         "rules": {"yearly": ["12-25"], "windows": ["* * 0-7 ? * *"]}})
    assert changed
    assert (replaced.rules.dates, replaced.rules.yearly, replaced.rules.windows) == (
        (), ("12-25",), ("* * 0-7 ? * *",))
    assert client.get_calendar("holidays") == replaced
    created, changed = client.put_calendar(holidays("2026-01-01", name="new-year"))
    assert changed
    assert [c.name for c in client.list_calendars()] == ["holidays", "new-year"]

    assert client.delete_calendar("new-year").name == "new-year"
    with pytest.raises(NotFound):
        client.get_calendar("new-year")
    with pytest.raises(NotFound):
        client.delete_calendar("new-year")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (holidays("2026-12-25", "2026-12-32"), "rules.dates[1]"),
        (holidays("2026-12-25", timezone="Mars/Olympus"), "timezone"),
        ({"name": "c", "rules": {"windows": ["* * 0-7 ? * *", "@every 1h"]}}, "rules.windows[1]"),
        ({"name": "c"}, "rules"),
        ({"name": "bad name", "rules": {"dates": ["2026-12-25"]}}, "name"),
        ({**holidays("2026-12-25"), "color": "red"}, "color"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_field_and_nothing_is_written(
    client: SchedulerClient, data: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        client.add_calendar(data)
    assert caught.value.field == field
    with pytest.raises(ValidationError):
        client.put_calendar(data)
    assert client.list_calendars() == []


def test_jobs_name_existing_calendars_and_a_calendar_in_use_cannot_be_deleted(
    client: SchedulerClient,
) -> None:
    job = {"name": "report", "schedule": "0 12 * * *", "command": "true"}
    with pytest.raises(ValidationError) as caught:
        client.add_job({**job, "calendars": ["holidays"]})
    assert caught.value.field == "calendars"
    assert "unknown calendar 'holidays'" in caught.value.reason
    with pytest.raises(ValidationError) as caught:
        client.add_jobs([job | {"name": "a"}, job | {"name": "b", "calendars": ["nope"]}])
    assert caught.value.field == "jobs[1].calendars"
    with pytest.raises(ValidationError) as caught:
        client.add_job({**job, "calendars": "holidays"})
    assert caught.value.field == "calendars"
    assert client.list_jobs().items == []

    client.add_calendar(holidays("2030-12-25"))
    client.add_calendar(holidays("2030-12-26", name="other"))
    client.add_job({**job, "calendars": ["holidays", "other", "holidays"]})
    assert client.get_job("report").spec.calendars == ("holidays", "other")
    client.add_job({**job, "name": "second", "calendars": ["holidays"]})
    with pytest.raises(Conflict) as refused:
        client.delete_calendar("holidays")
    assert "report, second" in refused.value.message
    assert refused.value.details["jobs"] == ["report", "second"]

    client.update_job("report", {"calendars": ["other"]})
    client.delete_job("second")
    assert client.delete_calendar("holidays").name == "holidays"
    with pytest.raises(ValidationError) as caught:
        client.update_job("report", {"calendars": ["holidays"]})
    assert caught.value.field == "calendars"


def test_the_first_fire_and_the_upcoming_slots_skip_excluded_days(client: SchedulerClient) -> None:
    today = client.now().date()
    tomorrow = today + timedelta(days=1)
    client.add_calendar(holidays(today.isoformat(), tomorrow.isoformat()))
    job = client.add_job({"name": "daily", "schedule": "0 12 * * *", "command": "true",
                          "calendars": ["holidays"]})
    assert job.next_fire_at == datetime.combine(today + timedelta(days=2), datetime.min.time(),
                                                UTC) + timedelta(hours=12)
    upcoming = client.describe_job("daily", upcoming=3).upcoming
    assert [t.date() for t in upcoming] == [today + timedelta(days=d) for d in (2, 3, 4)]

    # Changing the job's calendars plans it anew from now.
    client.add_calendar(holidays("2000-01-01", name="none"))
    changed = client.update_job("daily", {"calendars": ["none"]})
    assert changed.next_fire_at is not None
    assert changed.next_fire_at.date() in (today, tomorrow)

    times = client.preview("0 12 * * *", start=client.now(), count=2, calendars="holidays")
    assert [t.date() for t in times] == [today + timedelta(days=2), today + timedelta(days=3)]
    with pytest.raises(ValidationError) as caught:
        client.preview("0 12 * * *", start=client.now(), calendars=["missing"])
    assert caught.value.field == "calendars"


def test_calendars_that_exclude_every_slot_are_refused(client: SchedulerClient) -> None:
    client.add_calendar({"name": "always", "rules": {"windows": ["0 * * ? * *"]}})
    with pytest.raises(ValidationError) as caught:
        client.add_job({"name": "j", "schedule": "0 * * ? * *", "command": "true",
                        "calendars": ["always"]})
    assert caught.value.field == "calendars"
    assert client.list_jobs().items == []


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


def test_a_planned_slot_a_replaced_calendar_excludes_is_skipped_not_run_nor_missed(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    """The node's planner has no calendar yet: the scan reads them (the job names one
    it lacks); the slot, planned before the calendar excluded its day, is moved on to
    the next day that is not excluded, with no run and no missed row."""
    client.add_calendar(holidays("2000-01-01"))
    client.add_job({"name": "daily", "schedule": "0 12 * * *", "command": "true",
                    "calendars": ["holidays"]})
    now = client.now()
    slot = now + timedelta(seconds=20)
    set_job(db_url, "daily", next_fire_at=naive(slot), next_slot_at=naive(slot))
    client.put_calendar(holidays(slot.date().isoformat()))
    planner = SchedulePlanner()

    scan = store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:1:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)

    assert scan.prepared == []
    assert planner.knows_calendars(["holidays"])
    job = client.get_job("daily")
    assert job.next_fire_at is not None
    assert job.next_fire_at.date() == slot.date() + timedelta(days=1)
    assert client.list_runs(job="daily").items == []
