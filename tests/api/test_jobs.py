"""/api/v1/jobs: create, replace, change, list, show, delete and control."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .support import Api, Rows, assert_error, job_body

pytestmark = pytest.mark.db


def test_post_creates_201_with_location_and_409_when_the_name_exists(api: Api) -> None:
    response = api.post("/api/v1/jobs", json=job_body("report", tags=["ssd"], timezone="Europe/Paris"))

    assert response.status_code == 201
    assert response.headers["Location"].endswith("/api/v1/jobs/report")
    job = response.get_json()
    assert job["name"] == "report"
    assert job["state"] == "idle"
    assert job["tags"] == ["ssd"]
    assert job["timezone"] == "Europe/Paris"
    assert job["next_fire_at"] is not None

    error = assert_error(api.post("/api/v1/jobs", json=job_body("report")), 409, "conflict")
    assert error["details"] == {"job": "report"}


def test_put_creates_201_then_is_idempotent_200_and_replaces_200(api: Api) -> None:
    body = {"schedule": "0 0 1 1 *", "command": "echo one"}

    first = api.put("/api/v1/jobs/nightly", json=body)
    again = api.put("/api/v1/jobs/nightly", json={**body, "name": "nightly"})
    replaced = api.put("/api/v1/jobs/nightly", json={"schedule": "0 0 2 1 *", "command": "echo two"})

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.get_json()["updated_at"] == first.get_json()["updated_at"]
    assert replaced.status_code == 200
    assert replaced.get_json()["command"] == "echo two"
    assert replaced.get_json()["id"] == first.get_json()["id"]


def test_put_with_another_name_in_the_body_is_400(api: Api) -> None:
    response = api.put("/api/v1/jobs/a", json={"name": "b", "schedule": "@every 1m", "command": "x"})

    assert_error(response, 400, "validation_error", "name")
    assert_error(api.get("/api/v1/jobs/a"), 404, "not_found")


def test_patch_changes_some_fields_and_keeps_the_rest(api: Api) -> None:
    api.post("/api/v1/jobs", json=job_body("p", description="old", priority=3))

    response = api.patch("/api/v1/jobs/p", json={"description": "new", "max_attempts": 4})

    assert response.status_code == 200
    job = response.get_json()
    assert (job["description"], job["max_attempts"], job["priority"]) == ("new", 4, 3)
    assert_error(api.patch("/api/v1/jobs/p", json={}), 400, "validation_error", "body")
    assert_error(api.patch("/api/v1/jobs/p", json={"name": "q"}), 400, "validation_error", "name")
    assert_error(api.patch("/api/v1/jobs/p", json={"bogus": 1}), 400, "validation_error", "bogus")
    assert_error(api.patch("/api/v1/jobs/nope", json={"description": "x"}), 404, "not_found")


def test_overrun_policy_is_created_read_back_changed_and_validated(api: Api) -> None:
    created = api.post("/api/v1/jobs", json=job_body("ov", overrun_policy="catch_up"))
    default = api.post("/api/v1/jobs", json=job_body("ov-default"))

    assert created.status_code == 201
    assert created.get_json()["overrun_policy"] == "catch_up"
    assert api.get("/api/v1/jobs/ov").get_json()["overrun_policy"] == "catch_up"
    assert default.get_json()["overrun_policy"] == "skip", "new jobs skip by default"
    listed = {j["name"]: j["overrun_policy"] for j in api.get("/api/v1/jobs").get_json()["items"]}
    assert listed == {"ov": "catch_up", "ov-default": "skip"}
    patched = api.patch("/api/v1/jobs/ov", json={"overrun_policy": "skip"})
    assert patched.status_code == 200
    assert api.get("/api/v1/jobs/ov").get_json()["overrun_policy"] == "skip"

    for bad in ("sometimes", "fire_once", 1, None):
        error = assert_error(
            api.post("/api/v1/jobs", json=job_body("ov-bad", overrun_policy=bad)),
            400, "validation_error", "overrun_policy",
        )
        assert "skip, catch_up" in error["details"]["reason"]
        assert_error(api.patch("/api/v1/jobs/ov", json={"overrun_policy": bad}),
                     400, "validation_error", "overrun_policy")
    assert_error(api.get("/api/v1/jobs/ov-bad"), 404, "not_found")
    assert api.get("/api/v1/jobs/ov").get_json()["overrun_policy"] == "skip"


def test_the_openapi_document_describes_the_overrun_policy(api: Api) -> None:
    schemas = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]

    field = schemas["JobInput"]["properties"]["overrun_policy"]
    assert (field["enum"], field["default"]) == (["skip", "catch_up"], "skip")
    assert schemas["Job"]["properties"]["overrun_policy"]["enum"] == ["skip", "catch_up"]
    assert "overrun_policy" in schemas["Job"]["required"]


def test_bounds_max_runs_and_jitter_are_created_read_back_and_validated(api: Api) -> None:
    body = job_body("bounded", schedule="@every 1h", start_at="2030-01-01T09:00:00+02:00",
                    end_at="2030-02-01T00:00:00Z", max_runs=3, jitter_s=90)
    created = api.post("/api/v1/jobs", json=body)

    assert created.status_code == 201, created.get_json()
    job = created.get_json()
    assert (job["start_at"], job["end_at"]) == ("2030-01-01T07:00:00+00:00", "2030-02-01T00:00:00+00:00")
    assert (job["max_runs"], job["jitter_s"], job["runs_done"], job["finished"]) == (3, 90.0, 0, False)
    slot = datetime(2030, 1, 1, 7, tzinfo=UTC)
    planned = datetime.fromisoformat(job["next_fire_at"])
    assert slot <= planned <= slot + timedelta(seconds=90), "the first slot is start_at, jittered"
    shown = api.get("/api/v1/jobs/bounded").get_json()
    assert {k: shown[k] for k in ("start_at", "end_at", "max_runs", "jitter_s")} == {
        k: job[k] for k in ("start_at", "end_at", "max_runs", "jitter_s")}
    assert shown["upcoming"][0] == job["next_fire_at"]
    assert len(shown["upcoming"]) == 3, "max_runs: three slots in all"
    default = api.post("/api/v1/jobs", json=job_body("unbounded")).get_json()
    assert {k: default[k] for k in ("start_at", "end_at", "max_runs", "jitter_s", "finished")} == {
        "start_at": None, "end_at": None, "max_runs": None, "jitter_s": 0.0, "finished": False}
    # PATCH clears a bound with null.
    cleared = api.patch("/api/v1/jobs/bounded", json={"max_runs": None, "end_at": None})
    assert cleared.status_code == 200
    assert (cleared.get_json()["max_runs"], cleared.get_json()["end_at"]) == (None, None)

    for bad, field, reason in [
        ({"start_at": "next tuesday"}, "start_at", "not an ISO-8601 instant"),
        ({"start_at": "2030-01-01T00:00:00"}, "start_at", "UTC offset"),
        ({"end_at": 5}, "end_at", "ISO-8601 instant"),
        ({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "end_at",
         "must be after start_at"),
        ({"end_at": "2001-01-01T00:00:00Z"}, "end_at", "never fire"),
        ({"max_runs": 0}, "max_runs", "between 1 and"),
        ({"max_runs": 1.5}, "max_runs", "must be an integer"),
        ({"max_runs": "2"}, "max_runs", "must be an integer"),
        ({"jitter_s": -1}, "jitter_s", "at least 0"),
        ({"jitter_s": 3601}, "jitter_s", "at most 3600"),
        ({"jitter_s": None}, "jitter_s", "must be a number"),
    ]:
        error = assert_error(api.post("/api/v1/jobs", json=job_body("bad", **bad)),
                             400, "validation_error", field)
        assert reason in error["details"]["reason"], (bad, error)
    for bad, field in [({"start_at": "soon"}, "start_at"), ({"max_runs": -1}, "max_runs"),
                       ({"jitter_s": 1e9}, "jitter_s")]:  # (refused writes are rate limited)
        assert_error(api.patch("/api/v1/jobs/bounded", json=bad), 400, "validation_error", field)
    assert_error(api.get("/api/v1/jobs/bad"), 404, "not_found")


def test_a_job_past_its_runs_shows_finished(api: Api, rows: Rows) -> None:
    """Idle, not paused, no next fire: finished (the state stays idle); paused, it is
    not; its upcoming fires are none."""
    api.post("/api/v1/jobs", json=job_body("done", schedule="@every 1h", max_runs=2))
    rows.set_job("done", runs_done=2, next_fire_at=None, next_slot_at=None)

    shown = api.get("/api/v1/jobs/done").get_json()
    assert (shown["state"], shown["finished"], shown["runs_done"]) == ("idle", True, 2)
    assert (shown["next_fire_at"], shown["upcoming"]) == (None, [])
    listed = {j["name"]: j["finished"] for j in api.get("/api/v1/jobs").get_json()["items"]}
    assert listed == {"done": True}
    paused = api.post("/api/v1/jobs/done/pause").get_json()
    assert paused["finished"] is False
    resumed = api.post("/api/v1/jobs/done/resume").get_json()
    assert (resumed["finished"], resumed["next_fire_at"]) == (True, None)
    more = api.patch("/api/v1/jobs/done", json={"max_runs": 3}).get_json()
    assert (more["finished"], more["runs_done"]) == (False, 2)
    assert more["next_fire_at"] is not None


def test_the_openapi_document_describes_bounds_and_the_finished_flag(api: Api) -> None:
    schemas = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]

    fields = schemas["JobInput"]["properties"]
    assert fields["start_at"]["type"] == ["string", "null"]
    assert fields["start_at"]["format"] == "date-time"
    assert fields["end_at"]["type"] == ["string", "null"]
    assert (fields["max_runs"]["type"], fields["max_runs"]["minimum"]) == (["integer", "null"], 1)
    jitter = fields["jitter_s"]
    assert (jitter["minimum"], jitter["maximum"], jitter["default"]) == (0, 3600.0, 0.0)
    job = schemas["Job"]
    for name in ("start_at", "end_at", "max_runs", "jitter_s", "finished", "runs_done"):
        assert name in job["properties"], name
        assert name in job["required"], name
    assert job["properties"]["finished"]["type"] == "boolean"


def test_get_shows_definition_state_upcoming_owner_and_last_run(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("shown", schedule="@every 1h"))
    job_id = rows.job_id("shown")
    planned = datetime.now(UTC) - timedelta(hours=1)
    run_id = rows.add_run("shown", job_id, planned, status="failed", exit_code=3, output="boom")
    rows.add_session("sess-1", host="box", pid=77)
    rows.set_job("shown", owner_session="sess-1", state="executing", fire_id="f1")

    job = api.get("/api/v1/jobs/shown").get_json()

    assert job["state"] == "executing"
    assert job["owner_session"] == "sess-1"
    assert job["owner_node"] == "box:77"
    assert len(job["upcoming"]) == 5
    assert job["last_run"]["id"] == run_id
    assert job["last_run"]["status"] == "failed"
    assert "output" not in job["last_run"]
    assert_error(api.get("/api/v1/jobs/missing"), 404, "not_found")


def test_list_filters_by_state_paused_tag_and_prefix(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("etl-a", tags=["gpu"]))
    api.post("/api/v1/jobs", json=job_body("etl-b", paused=True))
    api.post("/api/v1/jobs", json=job_body("web-a", tags=["gpu", "ssd"]))
    rows.set_job("web-a", state="prepared", owner_session="s", fire_id="f")

    def names(query: str) -> list[str]:
        response = api.get(f"/api/v1/jobs{query}")
        assert response.status_code == 200, response.get_json()
        return [j["name"] for j in response.get_json()["items"]]

    assert names("") == ["etl-a", "etl-b", "web-a"]
    assert names("?prefix=etl-") == ["etl-a", "etl-b"]
    assert names("?paused=true") == ["etl-b"]
    assert names("?paused=false") == ["etl-a", "web-a"]
    assert names("?tag=gpu") == ["etl-a", "web-a"]
    assert names("?tag=ssd") == ["web-a"]
    assert names("?state=prepared") == ["web-a"]
    assert names("?state=idle&prefix=etl") == ["etl-a", "etl-b"]


def test_list_filters_by_the_status_of_the_newest_run(api: Api, rows: Rows) -> None:
    for name in ("fails-now", "fine", "never-ran"):
        api.post("/api/v1/jobs", json=job_body(name))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows.add_run("fails-now", rows.job_id("fails-now"), t0, status="succeeded")
    rows.add_run("fails-now", rows.job_id("fails-now"), t0 + timedelta(hours=1), status="failed")
    rows.add_run("fine", rows.job_id("fine"), t0, status="failed")
    rows.add_run("fine", rows.job_id("fine"), t0 + timedelta(hours=1), status="succeeded")

    def names(query: str) -> list[str]:
        response = api.get(f"/api/v1/jobs{query}")
        assert response.status_code == 200, response.get_json()
        return [j["name"] for j in response.get_json()["items"]]

    assert names("?last_status=failed") == ["fails-now"]
    assert names("?last_status=succeeded") == ["fine"]
    assert names("?last_status=never") == ["never-ran"]
    assert names("?last_status=running") == []
    assert_error(api.get("/api/v1/jobs?last_status=sleepy"), 400, "validation_error", "last_status")


def test_list_pages_with_a_cursor(api: Api) -> None:
    for i in range(7):
        assert api.post("/api/v1/jobs", json=job_body(f"job-{i}")).status_code == 201

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/api/v1/jobs{query}").get_json()
        pages += 1
        seen.extend(j["name"] for j in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert seen == [f"job-{i}" for i in range(7)]


def test_delete_keeps_the_history_and_frees_the_name(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("gone"))
    rows.add_run("gone", rows.job_id("gone"), datetime.now(UTC) - timedelta(minutes=1))

    response = api.delete("/api/v1/jobs/gone")

    assert response.status_code == 200
    assert response.get_json()["deleted"] is True
    assert_error(api.get("/api/v1/jobs/gone"), 404, "not_found")
    assert_error(api.delete("/api/v1/jobs/gone"), 404, "not_found")
    assert len(api.get("/api/v1/jobs/gone/runs").get_json()["items"]) == 1
    assert api.post("/api/v1/jobs", json=job_body("gone")).status_code == 201


def test_pause_and_resume(api: Api) -> None:
    api.post("/api/v1/jobs", json=job_body("pr"))

    paused = api.post("/api/v1/jobs/pr/pause")
    resumed = api.post("/api/v1/jobs/pr/resume")

    assert paused.status_code == 200
    assert paused.get_json()["paused"] is True
    assert resumed.status_code == 200
    assert resumed.get_json()["paused"] is False
    assert_error(api.post("/api/v1/jobs/nope/pause"), 404, "not_found")


def test_trigger_makes_it_due_now_and_conflicts_while_it_runs_or_is_paused(
    api: Api, rows: Rows
) -> None:
    created = api.post("/api/v1/jobs", json=job_body("t")).get_json()

    response = api.post("/api/v1/jobs/t/trigger")

    assert response.status_code == 202
    due = datetime.fromisoformat(response.get_json()["next_fire_at"])
    assert due < datetime.fromisoformat(created["next_fire_at"])
    assert due <= datetime.now(UTC) + timedelta(minutes=5)

    rows.set_job("t", state="executing", owner_session="s", fire_id="f")
    assert_error(api.post("/api/v1/jobs/t/trigger"), 409, "conflict")

    rows.set_job("t", state="idle", owner_session=None, fire_id=None)
    api.post("/api/v1/jobs/t/pause")
    assert_error(api.post("/api/v1/jobs/t/trigger"), 409, "conflict")


def test_kill_is_409_unless_the_job_runs(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("k"))

    assert_error(api.post("/api/v1/jobs/k/kill"), 409, "conflict")

    rows.set_job("k", state="executing", owner_session="s", fire_id="f")
    response = api.post("/api/v1/jobs/k/kill")
    assert response.status_code == 202
    assert response.get_json()["kill_requested"] is True
    assert_error(api.post("/api/v1/jobs/nope/kill"), 404, "not_found")
