"""/api/v1/runs, /api/v1/runs/{id} and /api/v1/jobs/{name}/runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from .support import Api, Rows, assert_error, job_body

pytestmark = pytest.mark.db

BASE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def history(api: Api, rows: Rows) -> dict[str, list[int]]:
    """Runs of two jobs on two nodes: 'a' has 5 (2 failed), 'b' has 3."""
    api.post("/api/v1/jobs", json=job_body("a"))
    api.post("/api/v1/jobs", json=job_body("b"))
    ids: dict[str, list[int]] = {"a": [], "b": []}
    for i in range(5):
        ids["a"].append(rows.add_run(
            "a", rows.job_id("a"), BASE + timedelta(minutes=i),
            status="failed" if i % 2 else "succeeded", node="n1:1", session_id="s1",
            output=f"out {i}", exit_code=1 if i % 2 else 0,
        ))
    for i in range(3):
        ids["b"].append(rows.add_run(
            "b", rows.job_id("b"), BASE + timedelta(minutes=10 + i), node="n2:2", session_id="s2",
        ))
    return ids


def _all_pages(api: Api, path: str, limit: int) -> tuple[list[int], int]:
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        sep = "&" if "?" in path else "?"
        query = f"{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        response = api.get(path + query)
        assert response.status_code == 200, response.get_json()
        page = response.get_json()
        pages += 1
        seen.extend(r["id"] for r in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return seen, pages


def test_runs_page_newest_first_across_pages(api: Api, history: dict[str, list[int]]) -> None:
    everything = sorted(history["a"] + history["b"], reverse=True)

    seen, pages = _all_pages(api, "/api/v1/runs", 3)

    assert seen == everything
    assert pages == 3
    first = api.get("/api/v1/runs?limit=1").get_json()["items"][0]
    assert "output" not in first
    assert first["lateness_ms"] is None


def test_runs_of_a_job_page_too(api: Api, history: dict[str, list[int]]) -> None:
    seen, pages = _all_pages(api, "/api/v1/jobs/a/runs", 2)

    assert seen == sorted(history["a"], reverse=True)
    assert pages == 3
    assert api.get("/api/v1/jobs/never-existed/runs").get_json() == {"items": [], "next_cursor": None}


def test_run_filters(api: Api, history: dict[str, list[int]]) -> None:
    def ids(query: str) -> list[int]:
        response = api.get("/api/v1/runs" + query)
        assert response.status_code == 200, response.get_json()
        return [r["id"] for r in response.get_json()["items"]]

    assert ids("?job=b") == sorted(history["b"], reverse=True)
    assert ids("?status=failed") == [history["a"][3], history["a"][1]]
    assert ids("?node=n2:2") == sorted(history["b"], reverse=True)
    assert ids("?node=s1") == sorted(history["a"], reverse=True)
    since = quote((BASE + timedelta(minutes=3)).isoformat())
    until = quote((BASE + timedelta(minutes=11)).isoformat())
    assert ids(f"?since={since}&until={until}") == [history["b"][0], history["a"][4], history["a"][3]]
    assert ids("?since=2026-03-01T12:10:00Z") == sorted(history["b"], reverse=True)
    assert ids("?job=a&status=failed&limit=1") == [history["a"][3]]
    assert api.get("/api/v1/jobs/a/runs?status=succeeded").get_json()["items"][0]["id"] == history["a"][4]


def test_one_run_has_its_output_tail(api: Api, history: dict[str, list[int]]) -> None:
    run_id = history["a"][1]

    run = api.get(f"/api/v1/runs/{run_id}").get_json()

    assert run["id"] == run_id
    assert run["job"] == "a"
    assert run["status"] == "failed"
    assert run["output"] == "out 1"
    assert run["exit_code"] == 1
    assert run["node"] == "n1:1"
    assert_error(api.get("/api/v1/runs/999999"), 404, "not_found")


def test_prune_deletes_old_finished_runs_only(
    api: Api, viewer: Api, rows: Rows, history: dict[str, list[int]]
) -> None:
    running = rows.add_run("a", rows.job_id("a"), BASE - timedelta(days=1), status="running",
                           node="n1:1", session_id="s1")
    assert_error(viewer.post("/api/v1/runs/prune", json={"older_than": "90d"}), 403, "forbidden")

    kept = api.post("/api/v1/runs/prune", json={"older_than": "400d"})
    assert kept.status_code == 200, kept.get_json()
    assert {k: v for k, v in kept.get_json().items() if k != "before"} == {
        "runs": 0, "jobs": 0, "events": 0, "deliveries": 0}

    pruned = api.post("/api/v1/runs/prune", json={"older_than": 90 * 86400})
    assert pruned.status_code == 200, pruned.get_json()
    body = pruned.get_json()
    assert (body["runs"], body["jobs"]) == (8, 0)
    assert body["before"].endswith("Z") or "+00:00" in body["before"]
    left = api.get("/api/v1/runs").get_json()["items"]
    assert [r["id"] for r in left] == [running]
    entries = api.get("/api/v1/audit").get_json()["items"]
    assert entries[0]["action"] == "runs.prune"


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "older_than"), ({"older_than": "soon"}, "older_than"), ({"older_than": 5}, "older_than"),
     ({"older_than": "90d", "dry_run": True}, "dry_run"), ({"older_than": None}, "older_than")],
)
def test_prune_refuses_bad_input_and_deletes_nothing(
    api: Api, history: dict[str, list[int]], body: dict[str, object], field: str
) -> None:
    error = assert_error(api.post("/api/v1/runs/prune", json=body), 400, "validation_error")
    assert error["details"]["field"] == field
    assert len(api.get("/api/v1/runs").get_json()["items"]) == 8
