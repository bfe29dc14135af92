"""POST /api/v1/jobs/{name}/trigger with parameters; runs show their params and, while
they run, their output so far (output_live)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import Flask
from sqlalchemy import text

from .support import Api, Rows, assert_error, job_body
from .test_ui import Browser


def request_rows(rows: Rows) -> list[tuple[object, ...]]:
    with rows.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT params, cause FROM ql_requests"))]


def test_trigger_with_params_records_the_slots_request(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("t"))

    response = api.post("/api/v1/jobs/t/trigger", json={"params": {"who": "me", "n": 2}})

    assert response.status_code == 202, response.get_json()
    assert response.get_json()["name"] == "t"
    assert request_rows(rows) == [('{"n":2,"who":"me"}', "trigger")]
    # No body, an empty body, null or {} params: a trigger without parameters.
    for kwargs in ({}, {"json": {}}, {"json": {"params": None}}, {"json": {"params": {}}},
                   {"data": b"  "}):
        assert api.post("/api/v1/jobs/t/trigger", **kwargs).status_code == 202
    assert len(request_rows(rows)) == 1


def test_invalid_trigger_bodies_are_400_naming_the_field_and_write_nothing(
    api: Api, rows: Rows
) -> None:
    created = api.post("/api/v1/jobs", json=job_body("t")).get_json()
    cases = [
        ({"json": {"params": {"who": "me"}, "when": "now"}}, "when"),
        ({"json": {"params": [1]}}, "params"),
        ({"json": {"params": "who=me"}}, "params"),
        ({"json": {"params": {"9lives": 1}}}, "params"),
        ({"json": {"params": {f"p{i}": i for i in range(33)}}}, "params"),
        ({"json": {"params": {"who": {"nested": True}}}}, "params.who"),
        ({"json": {"params": {"who": "x" * 4097}}}, "params.who"),
        ({"json": {"params": {"who": "a", "WHO": "b"}}}, "params.WHO"),
        ({"json": {"params": {f"p{i}": "x" * 4000 for i in range(5)}}}, "params"),
        ({"json": [1, 2]}, "body"),
        ({"data": b"{not json"}, "body"),
    ]
    for kwargs, field in cases:
        assert_error(api.post("/api/v1/jobs/t/trigger", **kwargs), 400, "validation_error", field)
    assert request_rows(rows) == []
    assert api.get("/api/v1/jobs/t").get_json()["next_fire_at"] == created["next_fire_at"]


def test_runs_show_their_params_and_a_running_run_its_output_so_far(api: Api, rows: Rows) -> None:
    job_id = api.post("/api/v1/jobs", json=job_body("t")).get_json()["id"]
    at = datetime.now(UTC) - timedelta(minutes=1)
    done = rows.add_run("t", job_id, at, output="final\n", params='{"who":"me"}')
    running = rows.add_run("t", job_id, at + timedelta(seconds=1), status="running",
                           output="line 1\n", ended_at=None)

    finished = api.get(f"/api/v1/runs/{done}").get_json()
    assert (finished["params"], finished["output"], finished["output_live"]) == (
        {"who": "me"}, "final\n", False)
    live = api.get(f"/api/v1/runs/{running}").get_json()
    assert (live["params"], live["output"], live["output_live"], live["status"]) == (
        None, "line 1\n", True, "running")
    listed = {r["id"]: r for r in api.get("/api/v1/jobs/t/runs").get_json()["items"]}
    assert listed[done]["params"] == {"who": "me"}
    assert "output" not in listed[done]
    assert "output_live" not in listed[done]


def test_the_openapi_document_describes_trigger_params_and_live_output(api: Api) -> None:
    document = api.get("/api/v1/openapi.json").get_json()
    schemas = document["components"]["schemas"]
    trigger = document["paths"]["/api/v1/jobs/{name}/trigger"]["post"]
    assert trigger["requestBody"]["required"] is False
    assert trigger["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TriggerInput"}
    params = schemas["TriggerInput"]["properties"]["params"]
    assert params["maxProperties"] == 32
    assert params["propertyNames"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]{0,63}$"
    assert "params" in schemas["Run"]["required"]
    assert schemas["Run"]["properties"]["output_live"]["type"] == "boolean"


def test_the_run_page_shows_params_escaped_and_the_output_so_far(
    app: Flask, admin_secret: str, api: Api, rows: Rows
) -> None:
    browser = Browser(app)
    assert browser.sign_in(admin_secret).status_code == 303
    job_id = api.post("/api/v1/jobs", json=job_body("t")).get_json()["id"]
    at = datetime.now(UTC) - timedelta(minutes=1)
    running = rows.add_run("t", job_id, at, status="running", output="line 1\n", ended_at=None,
                           params='{"who":"<script>alert(1)</script>","n":3}')
    done = rows.add_run("t", job_id, at + timedelta(seconds=1), output="")

    page = browser.get(f"/ui/runs/{running}").text
    assert 'id="run-params"' in page
    assert "<code>who</code>" in page
    assert "<code>n</code> = <code>3</code>" in page
    assert "<script>alert" not in page
    assert 'id="run-output-live"' in page
    assert "line 1" in page
    finished = browser.get(f"/ui/runs/{done}").text
    assert 'id="run-params"' not in finished
    assert 'id="run-output-live"' not in finished
