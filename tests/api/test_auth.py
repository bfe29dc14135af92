"""Closed by default: tokens, roles, and which routes answer without one."""

from __future__ import annotations

import pytest

from quartzlite.client import SchedulerClient

from .support import Api, assert_error, job_body

pytestmark = pytest.mark.db


def test_no_token_is_401_with_a_bearer_challenge(anonymous: Api) -> None:
    response = anonymous.get("/api/v1/jobs")

    error = assert_error(response, 401, "unauthorized")
    assert error["details"] == {"reason": "missing"}
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="quartzlite"'


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("Bearer qlt_not-a-real-token-at-all-000000000000000", "unknown"),
        ("Bearer something-else", "unknown"),
        ("Basic dXNlcjpwYXNz", "malformed"),
        ("Bearer", "malformed"),
        ("qlt_abc", "malformed"),
    ],
)
def test_a_bad_token_is_401(anonymous: Api, header: str, reason: str) -> None:
    response = anonymous.get("/api/v1/jobs", headers={"Authorization": header})

    error = assert_error(response, 401, "unauthorized")
    assert error["details"]["reason"] == reason
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


def test_a_revoked_token_stops_working(client: SchedulerClient, api: Api) -> None:
    assert api.get("/api/v1/jobs").status_code == 200

    client.revoke_token("ops-admin")

    assert_error(api.get("/api/v1/jobs"), 401, "unauthorized")


def test_the_scheme_is_case_insensitive(anonymous: Api, admin_secret: str) -> None:
    response = anonymous.get("/api/v1/jobs", headers={"Authorization": f"bearer {admin_secret}"})

    assert response.status_code == 200


def test_a_viewer_reads_but_every_write_is_403(viewer: Api, api: Api) -> None:
    assert api.post("/api/v1/jobs", json=job_body("j1")).status_code == 201
    for path in ("/api/v1/jobs", "/api/v1/jobs/j1", "/api/v1/jobs/j1/runs", "/api/v1/runs",
                 "/api/v1/cluster", "/api/v1/schedule/preview?schedule=@every%201m"):
        assert viewer.get(path).status_code == 200, path

    writes = [
        ("POST", "/api/v1/jobs", job_body("j2")),
        ("PUT", "/api/v1/jobs/j1", {"schedule": "@every 1m", "command": "true"}),
        ("PATCH", "/api/v1/jobs/j1", {"description": "x"}),
        ("DELETE", "/api/v1/jobs/j1", None),
        ("POST", "/api/v1/jobs/j1/pause", None),
        ("POST", "/api/v1/jobs/j1/resume", None),
        ("POST", "/api/v1/jobs/j1/trigger", None),
        ("POST", "/api/v1/jobs/j1/kill", None),
    ]
    for method, path, body in writes:
        error = assert_error(viewer.request(method, path, json=body), 403, "forbidden")
        assert error["details"] == {"role": "viewer", "required": "admin"}, (method, path)
    # Nothing changed.
    job = api.get("/api/v1/jobs/j1").get_json()
    assert job["description"] == ""
    assert job["paused"] is False
    assert job["deleted"] is False


def test_the_audit_trail_is_for_admins_only(viewer: Api, api: Api) -> None:
    assert_error(viewer.get("/api/v1/audit"), 403, "forbidden")
    assert api.get("/api/v1/audit").status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"])
def test_health_metrics_and_the_document_need_no_token(anonymous: Api, path: str) -> None:
    assert anonymous.get(path).status_code == 200


def test_token_secrets_are_stored_hashed(client: SchedulerClient, db_url: str) -> None:
    from sqlalchemy import create_engine, text

    token, secret = client.create_token("hashed", "viewer")
    engine = create_engine(db_url)
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT token_hash FROM ql_tokens WHERE name='hashed'")).scalar_one()
    engine.dispose()

    assert secret.startswith("qlt_")
    assert len(secret) > 40
    assert secret not in stored
    assert len(stored) == 64
    assert client.authenticate(secret).name == "hashed"
    assert token.role.value == "viewer"


def test_every_request_is_in_the_access_log_without_secrets(
    api: Api, anonymous: Api, admin_secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="quartzlite.api.access")
    api.get("/api/v1/jobs?limit=5")
    anonymous.get("/api/v1/jobs")

    lines = [r for r in caplog.records if r.name == "quartzlite.api.access"]
    assert [(r.method, r.path, r.status, r.token) for r in lines] == [  # type: ignore[attr-defined]
        ("GET", "/api/v1/jobs", 200, "ops-admin"),
        ("GET", "/api/v1/jobs", 401, "-"),
    ]
    assert '"GET /api/v1/jobs?limit=5" 200' in lines[0].getMessage()
    assert all(r.duration_ms >= 0 for r in lines)  # type: ignore[attr-defined]
    assert admin_secret not in caplog.text
