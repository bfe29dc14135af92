"""Hostile input: what an outside probe sent to `quartzlite serve` and got a 500, a wrong
acceptance, a forged log line or an unbounded write for. Every one is now a 4xx JSON
error naming the field (and nothing half-written), or a bounded, redacted record."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import pytest
from flask import Flask

from quartzlite.api import auth as api_auth
from quartzlite.api import limits
from quartzlite.client import SchedulerClient

from .support import Api, Rows, assert_error, job_body

pytestmark = pytest.mark.db


# -- schedules at the edge of time -------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("schedule=@every+1d&from=9999-12-31T00:00:00Z", "from"),
        ("schedule=@every+1d&from=0001-01-01T00:00:00Z", "from"),
        ("schedule=@every+1d&from=9999-12-31T23:59:59-14:00", "from"),
        ("schedule=@every+3000000d", "schedule"),
        ("schedule=@at+9999-12-31T23:59:59-14:00", "schedule"),
        ("schedule=@at+0001-01-01T00:30:00&timezone=Asia/Tokyo", "schedule"),
        ("schedule=@at+9999-06-01T00:00:00Z", "schedule"),
        ("schedule=@every+1000000d", "schedule"),
    ],
)
def test_a_preview_past_the_supported_years_is_400_naming_the_field(
    viewer: Api, query: str, field: str
) -> None:
    assert_error(viewer.get(f"/api/v1/schedule/preview?{query}"), 400, "validation_error", field)


@pytest.mark.parametrize(
    "schedule",
    ["@every 1000000d", "@every 3000000d", "@at 9999-12-31T23:59:59-14:00", "@at 9999-06-01T00:00:00Z"],
)
def test_a_job_past_the_supported_years_is_refused_and_nothing_is_written(
    api: Api, schedule: str
) -> None:
    assert_error(api.post("/api/v1/jobs", json=job_body("far", schedule=schedule)), 400,
                 "validation_error", "schedule")
    assert api.get("/api/v1/jobs").get_json()["items"] == []


def test_a_stored_schedule_that_no_longer_parses_is_shown_not_a_500(
    api: Api, rows: Rows
) -> None:
    """A row written before the door closed (or by hand): reading it never fails."""
    assert api.post("/api/v1/jobs", json=job_body("old")).status_code == 201
    rows.set_job("old", schedule="@every 1000000d")

    response = api.get("/api/v1/jobs/old")

    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["schedule"] == "@every 1000000d"
    assert api.get("/api/v1/jobs").status_code == 200


# -- text the columns cannot hold ---------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"command": "é" * 65_535}, "command", "bytes"),
        ({"command": "\U0001f600" * 20_000}, "command", "bytes"),
        ({"command": "echo \ud800"}, "command", "surrogate"),
        ({"description": "\udfff tail"}, "description", "surrogate"),
        ({"command": None, "callable": "mod:fn", "kwargs": {"\ud800": 1}}, "kwargs", "surrogate"),
        ({"command": None, "callable": "mod:fn", "kwargs": {"k": "\ud800"}}, "kwargs", "surrogate"),
    ],
)
def test_text_the_column_cannot_store_is_400_naming_the_field(
    api: Api, fields: dict[str, Any], field: str, reason: str
) -> None:
    error = assert_error(api.post("/api/v1/jobs", json=job_body("text", **fields)), 400,
                         "validation_error", field)
    assert reason in error["details"]["reason"]
    assert api.get("/api/v1/jobs").get_json()["items"] == []


def test_invalid_utf8_or_nul_in_a_path_or_query_is_never_a_500(api: Api) -> None:
    """Werkzeug decodes invalid UTF-8 (an encoded surrogate) to U+FFFD: no such job."""
    for path in ("/api/v1/jobs/%ED%A0%80", "/api/v1/jobs?name_prefix=%ED%A0%80",
                 "/api/v1/runs?job=%ED%A0%80", "/api/v1/jobs/a%00b", "/api/v1/runs?job=a%00b",
                 "/api/v1/audit?job=%ED%A0%80"):
        response = api.get(path)
        assert response.status_code < 500, (path, response.get_data(as_text=True))
        assert response.is_json


def test_a_database_error_answers_without_sql_or_schema_names(
    api: Api, client: SchedulerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quartzlite.errors import StoreError

    def broken(*_: object, **__: object) -> None:
        raise StoreError(
            "database error: (1366, \"Incorrect string value: '\\xC3\\xA9' for column "
            "`ql_test`.`ql_jobs`.`command` at row 1\")",
            details={"mysql_error": 1366},
        )

    monkeypatch.setattr(SchedulerClient, "add_job", broken)  # the app serves its own client

    response = api.post("/api/v1/jobs", json=job_body("leak"))

    error = assert_error(response, 500, "store_error")
    text = response.get_data(as_text=True)
    assert "ql_jobs" not in text
    assert "Incorrect string" not in text
    assert "1366" not in text
    assert "server log" in error["message"]


# -- patterns that matched before a final newline ------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "nl-job\n"}, "name"),
        ({"tags": ["ok\n"]}, "tags"),
        ({"command": None, "callable": "mod:fn\n"}, "callable"),
    ],
)
def test_a_trailing_newline_is_not_a_valid_name_tag_or_callable(
    api: Api, fields: dict[str, Any], field: str
) -> None:
    body = {**job_body("nl"), **fields}
    assert_error(api.post("/api/v1/jobs", json=body), 400, "validation_error", field)
    assert api.get("/api/v1/jobs").get_json()["items"] == []


def test_a_trailing_newline_is_not_a_valid_token_name(client: SchedulerClient) -> None:
    from quartzlite.errors import ValidationError

    with pytest.raises(ValidationError):
        client.create_token("ops\n", "viewer")


# -- logs and the audit trail --------------------------------------------------------------


def test_control_characters_in_a_path_cannot_forge_an_access_log_line(
    anonymous: Api, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "/api/v1/jobs%0D%0A127.0.0.1%20%22DELETE%20/api/v1/jobs/prod%22%20200%20token=admin"
    with caplog.at_level(logging.INFO, logger="quartzlite.api.access"):
        anonymous.get(forged)

    lines = [r.getMessage() for r in caplog.records if r.name == "quartzlite.api.access"]
    assert len(lines) == 1
    assert "\n" not in lines[0]
    assert "\r" not in lines[0]
    assert "\\r\\n" in lines[0]


def test_secrets_in_a_write_are_redacted_in_the_audit_trail(api: Api) -> None:
    command = "curl -u deploy:hunter2 https://bob:s3cret@example.com/x -H 'Authorization: Bearer abc123'"
    api.post("/api/v1/jobs", json=job_body("secretive", command=command))
    api.post("/api/v1/jobs/secretive/pause?password=p4ss")

    entries = api.get("/api/v1/audit").get_json()["items"]
    text = repr(entries)

    for secret in ("hunter2", "s3cret", "abc123", "p4ss"):
        assert secret not in text
    assert "deploy:" in text
    assert "bob:" in text


def test_an_audit_entry_is_bounded(viewer: Api, api: Api) -> None:
    viewer.post("/api/v1/jobs?" + "q=" + "x" * 60_000, json=job_body("big", command="y" * 16_000))

    entry = api.get("/api/v1/audit").get_json()["items"][0]

    assert entry["details"]["status"] == 403
    assert len(repr(entry["details"])) <= api_auth.AUDIT_ENTRY_BYTES


def test_refused_writes_are_rate_limited_per_token_and_not_recorded_past_the_limit(
    app: Flask, viewer: Api, api: Api
) -> None:
    burst = limits.REFUSED_BURST
    statuses = [viewer.delete("/api/v1/jobs/nope").status_code for _ in range(burst + 5)]

    assert statuses[:burst] == [403] * burst
    limited = viewer.delete("/api/v1/jobs/nope")
    assert_error(limited, 429, "too_many_requests")
    assert int(limited.headers["Retry-After"]) >= 1
    assert limited.headers["X-Content-Type-Options"] == "nosniff"
    assert limited.headers["Cache-Control"] == "no-store"
    entries = api.get("/api/v1/audit?limit=1000").get_json()["items"]
    assert len([e for e in entries if e["token"] == "ops-viewer"]) == burst
    # The admin's own writes are not held back by the viewer's refusals.
    assert api.post("/api/v1/jobs", json=job_body("fine")).status_code == 201


def test_refused_writes_are_rate_limited_per_client_address(
    client: SchedulerClient, app: Flask
) -> None:
    burst = limits.REFUSED_BURST
    secrets = [client.create_token(f"v{i}", "viewer")[1] for i in range(burst + 2)]
    statuses = [Api(app, s).delete("/api/v1/jobs/nope").status_code for s in secrets]

    assert statuses[:burst] == [403] * burst
    assert statuses[burst:] == [429, 429]


def test_refused_writes_grow_the_audit_trail_no_faster_than_the_bound(
    viewer: Api, db_url: str
) -> None:
    """A viewer sending big refused writes as fast as it can: what the audit trail gains
    stays under burst + elapsed x rate entries of at most AUDIT_ENTRY_BYTES each."""
    from sqlalchemy import create_engine, text

    body = job_body("big", command="y" * 60_000, description="z" * 1000)
    query = "?" + "q=" + "x" * 8000
    started = time.monotonic()
    statuses = [viewer.post("/api/v1/jobs" + query, json=body).status_code for _ in range(300)]
    elapsed = time.monotonic() - started

    engine = create_engine(db_url)
    with engine.connect() as conn:
        entries, stored = (int(v) for v in conn.execute(
            text("SELECT COUNT(*), COALESCE(SUM(LENGTH(details)), 0) FROM ql_audit")
        ).one())
    engine.dispose()
    allowed = limits.REFUSED_BURST + math.ceil(elapsed * limits.REFUSED_PER_S)
    assert statuses.count(403) == entries <= allowed
    assert statuses.count(429) == 300 - entries
    assert stored <= entries * api_auth.AUDIT_ENTRY_BYTES
    print(f"\n300 refused writes of {len(query) + 61_000} bytes in {elapsed:.2f} s: {entries} "
          f"entries, {stored} bytes stored ({stored / elapsed:.0f} B/s)")
