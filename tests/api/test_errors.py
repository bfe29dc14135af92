"""One JSON error shape for every 4xx and 5xx: validation errors name the field and
the reason; malformed bodies, unknown routes, wrong methods and huge bodies too."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from quartzlite.client import SchedulerClient
from quartzlite.errors import SchemaError, StoreError, TransientStoreError

from .support import Api, assert_error, job_body

pytestmark = pytest.mark.db


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"schedule": "@every 1m", "command": "true"}, "name"),
        ({"name": "x y", "schedule": "@every 1m", "command": "true"}, "name"),
        ({"name": 5, "schedule": "@every 1m", "command": "true"}, "name"),
        ({"name": "a", "command": "true"}, "schedule"),
        ({"name": "a", "schedule": "every day", "command": "true"}, "schedule"),
        ({"name": "a", "schedule": "@every 1m", "timezone": "Mars/Olympus", "command": "x"}, "timezone"),
        ({"name": "a", "schedule": "@every 1m"}, "command"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "callable": "m:f"}, "command"),
        ({"name": "a", "schedule": "@every 1m", "callable": "not a callable"}, "callable"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "max_attempts": "3"}, "max_attempts"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "max_attempts": 0}, "max_attempts"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "timeout_s": -1}, "timeout_s"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "paused": "yes"}, "paused"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "tags": ["Bad Tag"]}, "tags"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "misfire_policy": "?"}, "misfire_policy"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "overrun_policy": "?"}, "overrun_policy"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "start_at": "?"}, "start_at"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "end_at": "2001-01-01T00:00:00Z"}, "end_at"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "max_runs": 0}, "max_runs"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "jitter_s": 3601}, "jitter_s"),
        ({"name": "a", "schedule": "@every 1m", "command": "x", "colour": "red"}, "colour"),
    ],
)
def test_a_bad_job_is_400_naming_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    error = assert_error(api.post("/api/v1/jobs", json=body), 400, "validation_error", field)

    assert field in error["message"]
    assert api.get("/api/v1/jobs").get_json()["items"] == []


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ('{"name": "a",', "is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"text"', "must be a JSON object"),
        ("", "is required"),
        ('{"name": NaN}', "is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
        (b"\xff\xfe{}", "is not valid JSON"),
    ],
)
def test_a_malformed_body_is_400_on_body(api: Api, data: str | bytes, reason: str) -> None:
    response = api.post("/api/v1/jobs", data=data, content_type="application/json")

    error = assert_error(response, 400, "validation_error", "body")
    assert reason in error["details"]["reason"]


def test_an_oversize_body_is_413(api: Api) -> None:
    big = job_body("big", description="x" * (1024 * 1024))

    response = api.post("/api/v1/jobs", json=big)

    error = assert_error(response, 413, "payload_too_large")
    assert error["details"]["field"] == "body"


def test_an_unknown_route_is_a_json_404(api: Api, anonymous: Api) -> None:
    for who in (api, anonymous):
        response = who.get("/api/v1/nothing-here")
        error = assert_error(response, 404, "not_found")
        assert "/api/v1/nothing-here" in error["message"]
    assert_error(api.get("/nothing-here"), 404, "not_found")
    root = api.get("/")  # the dashboard's home, for anyone (it asks them to sign in)
    assert (root.status_code, root.headers["Location"]) == (302, "/ui/")


def test_a_wrong_method_is_a_json_405_with_allow(api: Api) -> None:
    response = api.put("/api/v1/runs", json={})

    error = assert_error(response, 405, "method_not_allowed")
    assert "GET" in error["details"]["allowed"]
    assert "GET" in response.headers["Allow"]
    assert_error(api.delete("/api/v1/jobs"), 405, "method_not_allowed")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/jobs?limit=0", "limit"),
        ("/api/v1/jobs?limit=1001", "limit"),
        ("/api/v1/jobs?limit=ten", "limit"),
        ("/api/v1/jobs?paused=maybe", "paused"),
        ("/api/v1/jobs?state=running", "state"),
        ("/api/v1/jobs?cursor=_w", "cursor"),
        ("/api/v1/jobs?sort=name", "sort"),
        ("/api/v1/jobs?limit=1&limit=2", "limit"),
        ("/api/v1/runs?status=done", "status"),
        ("/api/v1/runs?since=yesterday", "since"),
        ("/api/v1/runs?until=2026-01-01T00:00:00", "until"),
        ("/api/v1/runs?cursor=bm90LWEtbnVtYmVy", "cursor"),
        ("/api/v1/runs/abc", "id"),
        ("/api/v1/jobs/bad%20name", "name"),
        ("/api/v1/jobs/bad%20name/runs", "name"),
        ("/api/v1/schedule/preview", "schedule"),
        ("/api/v1/schedule/preview?schedule=@every%201m&count=0", "count"),
        ("/api/v1/schedule/preview?schedule=nonsense", "schedule"),
        ("/api/v1/schedule/preview?schedule=@every%201m&timezone=Nowhere/Else", "timezone"),
        ("/api/v1/schedule/preview?schedule=@every%201m&from=2026-01-01", "from"),
        ("/api/v1/audit?since=later", "since"),
    ],
)
def test_bad_query_parameters_are_400_naming_them(api: Api, path: str, field: str) -> None:
    assert_error(api.get(path), 400, "validation_error", field)


def _raising(app: Flask, error: Exception) -> None:
    @app.get("/api/v1/boom")
    def boom() -> None:
        raise error


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (TransientStoreError("database unavailable (MySQL error 2013)"), 503, "database_unavailable"),
        (SchemaError("not at head"), 500, "schema_error"),
        (StoreError("database error: boom"), 500, "store_error"),
        (RuntimeError("secret internals"), 500, "internal_error"),
    ],
)
def test_server_errors_are_json_without_a_traceback(
    client: SchedulerClient, admin_secret: str, error: Exception, status: int, code: str
) -> None:
    from quartzlite.api import create_app

    app = create_app(client)
    _raising(app, error)
    response = Api(app, admin_secret).get("/api/v1/boom")

    body = assert_error(response, status, code)
    text = response.get_data(as_text=True)
    assert "Traceback" not in text
    assert "secret internals" not in text
    if status == 503:
        assert response.headers["Retry-After"] == "1"
    assert body["message"]
