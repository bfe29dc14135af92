"""Every write through the API is in the audit trail: who, what, which job, from where."""

from __future__ import annotations

import pytest

from quartzlite.client import SchedulerClient

from .support import Api, assert_error, job_body

pytestmark = pytest.mark.db


def _entries(api: Api, query: str = "") -> list[dict[str, object]]:
    response = api.get(f"/api/v1/audit{query}")
    assert response.status_code == 200, response.get_json()
    items: list[dict[str, object]] = response.get_json()["items"]
    return items


def test_writes_are_recorded_newest_first_with_their_outcome(api: Api, viewer: Api) -> None:
    api.post("/api/v1/jobs", json=job_body("audited", description="first"))
    api.patch("/api/v1/jobs/audited", json={"description": "second"})
    api.post("/api/v1/jobs/audited/pause")
    api.post("/api/v1/jobs/audited/kill")  # 409: not running
    viewer.delete("/api/v1/jobs/audited")  # 403: a viewer
    api.delete("/api/v1/jobs/audited")
    api.get("/api/v1/jobs/audited")  # reads are not recorded

    entries = _entries(api)

    assert [(e["action"], e["token"], e["details"]["status"]) for e in entries] == [  # type: ignore[index]
        ("jobs.delete", "ops-admin", 200),
        ("jobs.delete", "ops-viewer", 403),
        ("jobs.kill", "ops-admin", 409),
        ("jobs.pause", "ops-admin", 200),
        ("jobs.patch", "ops-admin", 200),
        ("jobs.create", "ops-admin", 201),
    ]
    assert all(e["job"] == "audited" for e in entries)
    assert all(e["client_address"] == "127.0.0.1" for e in entries)
    created = entries[-1]
    assert created["details"] == {  # type: ignore[comparison-overlap]
        "method": "POST", "path": "/api/v1/jobs", "status": 201,
        "body": job_body("audited", description="first"),
    }
    assert entries[2]["details"]["error"] == "conflict"  # type: ignore[index]
    assert entries[1]["details"]["error"] == "forbidden"  # type: ignore[index]


def test_unauthenticated_writes_leave_no_entry(anonymous: Api, api: Api) -> None:
    anonymous.post("/api/v1/jobs", json=job_body("x"))
    anonymous.post("/api/v1/jobs", json=job_body("x"), headers={"Authorization": "Bearer qlt_nope"})

    assert _entries(api) == []


def test_the_audit_trail_pages_and_filters(api: Api, viewer: Api) -> None:
    for i in range(5):
        api.post("/api/v1/jobs", json=job_body(f"j{i}"))
    viewer.post("/api/v1/jobs/j0/pause")

    seen: list[object] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/api/v1/audit{query}").get_json()
        pages += 1
        seen.extend(e["id"] for e in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert len(seen) == 6
    assert seen == sorted(seen, reverse=True)
    assert [e["action"] for e in _entries(api, "?job=j0")] == ["jobs.pause", "jobs.create"]
    assert [e["job"] for e in _entries(api, "?token=ops-viewer")] == ["j0"]
    assert len(_entries(api, "?since=2000-01-01T00:00:00Z")) == 6
    assert _entries(api, "?since=2999-01-01T00:00:00Z") == []


def test_an_api_write_is_recorded_once_with_source_api(api: Api) -> None:
    assert api.post("/api/v1/jobs", json=job_body("once")).status_code == 201
    assert api.post("/api/v1/jobs", json=job_body("once")).status_code == 409

    entries = _entries(api)

    # The app's client does not audit: one entry per request, the app's.
    assert [(e["action"], e["token"], e["source"]) for e in entries] == [
        ("jobs.create", "ops-admin", "api"), ("jobs.create", "ops-admin", "api"),
    ]
    assert [e["details"].get("error") for e in entries] == ["conflict", None]  # type: ignore[attr-defined]


def test_the_source_filter(api: Api, client: SchedulerClient) -> None:
    api.post("/api/v1/jobs", json=job_body("from-api"))
    client.auditing(actor="billing-service").add_job(job_body("from-library"))

    by_library = _entries(api, "?source=library")
    assert [(e["job"], e["token"], e["action"]) for e in by_library] == [
        ("from-library", "billing-service", "job.add"),
    ]
    assert [e["job"] for e in _entries(api, "?source=api")] == ["from-api"]
    assert _entries(api, "?source=cli") == []
    assert [e["source"] for e in _entries(api)] == ["library", "api"]
    assert_error(api.get("/api/v1/audit?source=mail"), 400, "validation_error", "source")
