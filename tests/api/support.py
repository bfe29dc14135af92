"""Helpers for the API tests: an authenticated test client, direct inserts of rows
only a node writes (runs, sessions), and waiting on conditions with deadlines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, insert, select
from werkzeug.test import TestResponse

from quartzlite.storage.tables import jobs, runs, sessions

T = TypeVar("T")


class Api:
    """The Flask test client with one token's Authorization header on every request."""

    def __init__(self, app: Flask, token: str | None) -> None:
        self.app = app
        self.http: FlaskClient = app.test_client()
        self.token = token

    def request(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> TestResponse:
        headers = dict(kwargs.pop("headers", {}) or {})
        secret = token if token is not None else self.token
        if secret is not None and "Authorization" not in headers:
            headers["Authorization"] = f"Bearer {secret}"
        return self.http.open(path, method=method, headers=headers, **kwargs)

    def get(self, path: str, **kwargs: Any) -> TestResponse:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> TestResponse:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> TestResponse:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> TestResponse:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> TestResponse:
        return self.request("DELETE", path, **kwargs)


def job_body(name: str, **fields: Any) -> dict[str, Any]:
    """A valid job that will not fire during a test (far-future schedule)."""
    return {"name": name, "schedule": "0 0 1 1 *", "command": "echo hi", **fields}


def assert_error(response: TestResponse, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """The response is our JSON error shape with this status and code (and field)."""
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
    assert response.mimetype == "application/json", response.get_data(as_text=True)[:200]
    body = response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], dict)
    if field is not None:
        assert error["details"]["field"] == field, error
        assert error["details"]["reason"], error
    return dict(error)


class Rows:
    """Direct writes of what only a node writes (runs, sessions, job states)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)

    def close(self) -> None:
        self.engine.dispose()

    def job_id(self, name: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(jobs.c.id).where(jobs.c.active_name == name)).scalar_one())

    def set_job(self, name: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(jobs.update().where(jobs.c.active_name == name).values(**values))

    def add_run(self, job_name: str, job_id: int, planned_at: datetime, **values: Any) -> int:
        row = {
            "job_id": job_id,
            "job_name": job_name,
            "planned_at": planned_at.astimezone(UTC).replace(tzinfo=None),
            "slot_at": planned_at.astimezone(UTC).replace(tzinfo=None),
            "attempt": 1,
            "status": "succeeded",
            "output": "",
            **values,
        }
        with self.engine.begin() as conn:
            result = conn.execute(insert(runs).values(**row))
            return int(result.inserted_primary_key[0])

    def add_session(self, session_id: str, host: str = "host-a", pid: int = 4242, **values: Any) -> None:
        now = datetime.now(UTC).replace(tzinfo=None)
        row = {
            "id": session_id, "host": host, "pid": pid, "started_at": now - timedelta(minutes=5),
            "heartbeat_at": now, "clock_offset_ms": 1.5, "capacity": 16, "tags": "gpu,ssd",
            "version": "0.1.0", **values,
        }
        with self.engine.begin() as conn:
            conn.execute(insert(sessions).values(**row))
