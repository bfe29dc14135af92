"""Dependencies over HTTP: a job's upstream and upstream_on are written like any field,
its downstream jobs shown by GET /jobs/{name}; refusals are 400 naming ``upstream`` (an
unknown job, a cycle, a schedule other than @manual) or 409 (deleting an upstream job);
a run shows the upstream run that triggered its slot."""

from __future__ import annotations

from datetime import UTC, datetime

from .support import Api, Rows, assert_error, job_body


def manual(name: str, *upstream: str, **fields: object) -> dict[str, object]:
    return job_body(name, schedule="@manual", upstream=list(upstream), **fields)


def test_upstream_is_written_and_shown_with_the_downstream_jobs(api: Api) -> None:
    assert api.post("/api/v1/jobs", json=job_body("extract", schedule="@every 1h")).status_code == 201
    created = api.post("/api/v1/jobs", json=manual("load", "extract", upstream_on="completion"))
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    assert (body["upstream"], body["upstream_on"], body["schedule"]) == (
        ["extract"], "completion", "@manual")
    assert body["finished"] is False
    assert body["next_fire_at"] is None
    put = api.put("/api/v1/jobs/report", json={**manual("report", "load"), "name": "report"})
    assert put.status_code == 201, put.get_json()

    extract = api.get("/api/v1/jobs/extract").get_json()
    assert (extract["upstream"], extract["downstream"]) == ([], ["load"])
    load = api.get("/api/v1/jobs/load").get_json()
    assert (load["upstream"], load["downstream"]) == (["extract"], ["report"])
    assert api.get("/api/v1/jobs/report").get_json()["downstream"] == []
    listed = api.get("/api/v1/jobs").get_json()["items"]
    assert {j["name"]: j["upstream_on"] for j in listed} == {
        "extract": "success", "load": "completion", "report": "success"}

    changed = api.patch("/api/v1/jobs/report", json={"upstream": ["extract", "load"]})
    assert changed.get_json()["upstream"] == ["extract", "load"]
    assert api.get("/api/v1/jobs/extract").get_json()["downstream"] == ["load", "report"]


def test_refusals_name_the_field_and_say_why(api: Api) -> None:
    api.post("/api/v1/jobs", json=manual("a"))
    api.post("/api/v1/jobs", json=manual("b", "a"))
    unknown = api.post("/api/v1/jobs", json=manual("c", "ghost"))
    assert "'ghost'" in assert_error(unknown, 400, "validation_error", "upstream")["message"]
    cycle = api.patch("/api/v1/jobs/a", json={"upstream": ["b"]})
    assert "a -> b -> a" in assert_error(cycle, 400, "validation_error", "upstream")["message"]
    cron = api.patch("/api/v1/jobs/b", json={"schedule": "@every 5s"})
    assert "@manual" in assert_error(cron, 400, "validation_error", "upstream")["message"]
    bad = api.patch("/api/v1/jobs/b", json={"upstream_on": "sometimes"})
    assert_error(bad, 400, "validation_error", "upstream_on")
    refused = api.delete("/api/v1/jobs/a")
    error = assert_error(refused, 409, "conflict")
    assert error["message"] == "job a is upstream of b: remove the dependency first"
    assert api.get("/api/v1/jobs/a").status_code == 200


def test_a_run_shows_the_upstream_run_that_triggered_it(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=manual("a"))
    api.post("/api/v1/jobs", json=manual("b", "a"))
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)
    upstream = rows.add_run("a", rows.job_id("a"), at)
    downstream = rows.add_run("b", rows.job_id("b"), at, upstream_run_id=upstream)
    shown = api.get(f"/api/v1/runs/{downstream}").get_json()
    assert (shown["upstream_run_id"], shown["slot_at"]) == (upstream, "2026-05-01T12:00:00+00:00")
    assert api.get(f"/api/v1/runs/{upstream}").get_json()["upstream_run_id"] is None
    items = api.get("/api/v1/jobs/b/runs").get_json()["items"]
    assert [r["upstream_run_id"] for r in items] == [upstream]
