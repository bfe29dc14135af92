"""/api/v1/calendars: create, replace, show, list and delete exclusion calendars; jobs
naming them; the preview with calendars."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from quartzlite.client import SchedulerClient

from .support import Api, assert_error, job_body

pytestmark = pytest.mark.db

CHRISTMAS = {"rules": {"dates": ["2030-12-25"], "yearly": ["01-01"]}, "timezone": "Europe/Paris",
             "description": "closed"}


def test_calendars_crud(api: Api) -> None:
    created = api.post("/api/v1/calendars", json={"name": "holidays", **CHRISTMAS})
    assert created.status_code == 201, created.get_json()
    assert created.headers["Location"].endswith("/api/v1/calendars/holidays")
    body = created.get_json()
    assert body["rules"] == {"dates": ["2030-12-25"], "yearly": ["01-01"], "ranges": [],
                             "windows": []}
    assert (body["timezone"], body["description"]) == ("Europe/Paris", "closed")
    assert_error(api.post("/api/v1/calendars", json={"name": "holidays", **CHRISTMAS}), 409,
                 "conflict")

    assert api.get("/api/v1/calendars/holidays").get_json() == body
    again = api.put("/api/v1/calendars/holidays", json=CHRISTMAS)
    assert (again.status_code, again.get_json()["updated_at"]) == (200, body["updated_at"])
    replaced = api.put("/api/v1/calendars/holidays", json={
        "name": "holidays", "rules": {"ranges": [{"from": "2030-08-01", "to": "2030-08-15"}]}})
    assert replaced.status_code == 200
    assert replaced.get_json()["rules"]["ranges"] == [{"from": "2030-08-01", "to": "2030-08-15"}]
    assert replaced.get_json()["timezone"] == "UTC"
    new = api.put("/api/v1/calendars/nights", json={"rules": {"windows": ["* * 0-7 ? * *"]}})
    assert new.status_code == 201
    listed = api.get("/api/v1/calendars").get_json()
    assert [c["name"] for c in listed["items"]] == ["holidays", "nights"]

    assert api.delete("/api/v1/calendars/nights").status_code == 200
    assert_error(api.get("/api/v1/calendars/nights"), 404, "not_found")
    assert_error(api.delete("/api/v1/calendars/nights"), 404, "not_found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "c", "rules": {"dates": ["2030-12-25", "2030-02-30"]}}, "rules.dates[1]"),
        ({"name": "c", "rules": {"windows": ["* 99 * * *"]}}, "rules.windows[0]"),
        ({"name": "c", "rules": {"ranges": [{"from": "2030-01-02", "to": "2030-01-01"}]}},
         "rules.ranges[0]"),
        ({"name": "c", "rules": {}}, "rules"),
        ({"name": "c", "rules": {"dates": ["2030-12-25"]}, "timezone": "Nowhere/Land"}, "timezone"),
        ({"name": "c", "rules": {"dates": ["2030-12-25"]}, "extra": 1}, "extra"),
        ({"rules": {"dates": ["2030-12-25"]}}, "name"),
    ],
)
def test_a_bad_calendar_is_400_naming_the_field(api: Api, body: dict[str, object], field: str) -> None:
    assert_error(api.post("/api/v1/calendars", json=body), 400, "validation_error", field)
    assert api.get("/api/v1/calendars").get_json()["items"] == []


def test_put_with_another_name_in_the_body_is_400(api: Api) -> None:
    assert_error(api.put("/api/v1/calendars/a", json={"name": "b", **CHRISTMAS}), 400,
                 "validation_error", "name")


def test_viewers_read_calendars_but_cannot_write_them(api: Api, viewer: Api) -> None:
    assert api.post("/api/v1/calendars", json={"name": "holidays", **CHRISTMAS}).status_code == 201
    assert viewer.get("/api/v1/calendars/holidays").status_code == 200
    assert viewer.get("/api/v1/calendars").status_code == 200
    assert_error(viewer.post("/api/v1/calendars", json={"name": "x", **CHRISTMAS}), 403, "forbidden")
    assert_error(viewer.put("/api/v1/calendars/holidays", json=CHRISTMAS), 403, "forbidden")
    assert_error(viewer.delete("/api/v1/calendars/holidays"), 403, "forbidden")


def test_calendar_writes_are_audited(api: Api, client: SchedulerClient) -> None:
    api.put("/api/v1/calendars/holidays", json=CHRISTMAS)
    api.delete("/api/v1/calendars/holidays")
    entries = client.list_audit().items
    assert [(e.action, e.job_name, e.details["status"]) for e in entries] == [
        ("calendars.delete", None, 200), ("calendars.put", None, 201)]


def test_jobs_name_calendars_and_a_calendar_in_use_cannot_be_deleted(api: Api) -> None:
    assert_error(api.post("/api/v1/jobs", json=job_body("report", calendars=["holidays"])), 400,
                 "validation_error", "calendars")
    # (CHRISTMAS's 01-01 would exclude every slot of job_body's schedule: 400 too.)
    assert api.put("/api/v1/calendars/holidays", json=CHRISTMAS).status_code == 201
    error = assert_error(api.post("/api/v1/jobs", json=job_body("report", calendars=["holidays"])),
                         400, "validation_error", "calendars")
    assert "exclude every slot" in error["message"]
    api.put("/api/v1/calendars/holidays", json={"rules": {"dates": ["2030-12-25"]}})
    job = api.post("/api/v1/jobs", json=job_body("report", calendars=["holidays"]))
    assert job.status_code == 201
    assert job.get_json()["calendars"] == ["holidays"]

    error = assert_error(api.delete("/api/v1/calendars/holidays"), 409, "conflict")
    assert error["details"]["jobs"] == ["report"]
    assert "report" in error["message"]

    assert api.patch("/api/v1/jobs/report", json={"calendars": []}).get_json()["calendars"] == []
    assert api.delete("/api/v1/calendars/holidays").status_code == 200


def test_a_calendar_excluding_tomorrow_skips_tomorrows_slot_of_a_daily_job(
    api: Api, client: SchedulerClient
) -> None:
    """The issue's case: the job's upcoming slots and the preview both skip tomorrow."""
    now = client.now()
    today = now.date()
    tomorrow = today + timedelta(days=1)
    api.put("/api/v1/calendars/tomorrow", json={"rules": {"dates": [tomorrow.isoformat()]}})
    api.put("/api/v1/jobs/daily", json={"schedule": "30 23 * * *", "command": "true",
                                        "calendars": ["tomorrow"]})

    shown = api.get("/api/v1/jobs/daily").get_json()
    days = [datetime.fromisoformat(t).astimezone(UTC).date() for t in shown["upcoming"]]
    first = today if now.time() < time(23, 30) else tomorrow
    expected = [d for d in (first + timedelta(days=i) for i in range(8)) if d != tomorrow]
    assert days == expected[: len(days)]
    assert len(days) == 5

    query = {"schedule": "30 23 * * *", "count": "3", "from": now.isoformat()}
    plain = api.get("/api/v1/schedule/preview", query_string=query).get_json()
    skipped = api.get("/api/v1/schedule/preview",
                      query_string={**query, "calendars": "tomorrow"}).get_json()
    plain_days = [datetime.fromisoformat(t).date() for t in plain["times"]]
    skipped_days = [datetime.fromisoformat(t).date() for t in skipped["times"]]
    assert tomorrow in plain_days
    assert tomorrow not in skipped_days
    assert skipped_days == [d for d in plain_days if d != tomorrow] + [plain_days[-1] + timedelta(days=1)]
    assert skipped["calendars"] == ["tomorrow"]
    assert_error(api.get("/api/v1/schedule/preview", query_string={**query, "calendars": "nope"}),
                 400, "validation_error", "calendars")
