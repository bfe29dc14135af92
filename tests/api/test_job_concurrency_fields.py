"""/api/v1/jobs and /api/v1/runs with the concurrency fields: a job's ``max_concurrency``
and ``broadcast`` created, read back, replaced, changed and validated (400 naming the
field), a run's ``shard``, and the OpenAPI document describing them. No node runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .support import Api, Rows, assert_error, job_body

pytestmark = pytest.mark.db

BROADCAST_REASON = "a broadcast job runs once per node per slot: max_concurrency must be 1"


def test_max_concurrency_and_broadcast_are_created_and_read_back(api: Api) -> None:
    concurrent = api.post("/api/v1/jobs", json=job_body("concurrent", max_concurrency=3))
    broadcast = api.post("/api/v1/jobs", json=job_body("everywhere", broadcast=True,
                                                       tags=["web"]))
    plain = api.post("/api/v1/jobs", json=job_body("plain"))

    assert concurrent.status_code == 201, concurrent.get_json()
    assert broadcast.status_code == 201, broadcast.get_json()
    expected = {"concurrent": (3, False), "everywhere": (1, True), "plain": (1, False)}
    for response in (concurrent, broadcast, plain):
        job = response.get_json()
        assert (job["max_concurrency"], job["broadcast"]) == expected[job["name"]]
    for name, fields in expected.items():
        shown = api.get(f"/api/v1/jobs/{name}").get_json()
        assert (shown["max_concurrency"], shown["broadcast"]) == fields, name
    listed = {j["name"]: (j["max_concurrency"], j["broadcast"])
              for j in api.get("/api/v1/jobs").get_json()["items"]}
    assert listed == expected


def test_put_and_patch_change_the_fields_and_keep_them(api: Api) -> None:
    body = {"schedule": "0 0 1 1 *", "command": "echo hi"}
    created = api.put("/api/v1/jobs/lanes", json={**body, "max_concurrency": 4})
    again = api.put("/api/v1/jobs/lanes", json={**body, "max_concurrency": 4})

    assert (created.status_code, again.status_code) == (201, 200)
    assert again.get_json()["updated_at"] == created.get_json()["updated_at"], "unchanged"
    kept = api.patch("/api/v1/jobs/lanes", json={"description": "still four"}).get_json()
    assert (kept["max_concurrency"], kept["broadcast"]) == (4, False)
    changed = api.patch("/api/v1/jobs/lanes", json={"max_concurrency": 1, "broadcast": True})
    assert changed.status_code == 200, changed.get_json()
    assert (changed.get_json()["max_concurrency"], changed.get_json()["broadcast"]) == (1, True)
    # PUT replaces the whole definition: what it leaves out is the default.
    replaced = api.put("/api/v1/jobs/lanes", json=body).get_json()
    assert (replaced["max_concurrency"], replaced["broadcast"]) == (1, False)


def test_bad_values_are_400_naming_the_field_and_write_nothing(api: Api) -> None:
    api.post("/api/v1/jobs", json=job_body("wide", max_concurrency=5))
    api.post("/api/v1/jobs", json=job_body("bcast", broadcast=True))

    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"max_concurrency": 0}, "max_concurrency", "must be between 1 and 100, got 0"),
        ({"max_concurrency": 101}, "max_concurrency", "must be between 1 and 100, got 101"),
        ({"max_concurrency": True}, "max_concurrency", "must be an integer, not a boolean"),
        ({"max_concurrency": "3"}, "max_concurrency", "must be an integer, not a string"),
        ({"max_concurrency": 2.5}, "max_concurrency", "must be an integer, not a number"),
        ({"max_concurrency": None}, "max_concurrency", "must be an integer, not null"),
        ({"broadcast": "true"}, "broadcast", "must be a boolean, not a string"),
        ({"broadcast": 1}, "broadcast", "must be a boolean, not an integer"),
        ({"broadcast": True, "max_concurrency": 2}, "max_concurrency", BROADCAST_REASON),
    ]
    for bad, field, reason in cases:
        error = assert_error(api.post("/api/v1/jobs", json=job_body("bad", **bad)),
                             400, "validation_error", field)
        assert error["details"]["reason"] == reason, (bad, error)
    # A change checked against what is stored (refused writes are rate limited: a few).
    for name, change in [("wide", {"broadcast": True}), ("bcast", {"max_concurrency": 3})]:
        error = assert_error(api.patch(f"/api/v1/jobs/{name}", json=change),
                             400, "validation_error", "max_concurrency")
        assert error["details"]["reason"] == BROADCAST_REASON
    assert_error(api.put("/api/v1/jobs/wide", json={"schedule": "0 0 1 1 *", "command": "x",
                                                     "broadcast": None}),
                 400, "validation_error", "broadcast")
    assert_error(api.get("/api/v1/jobs/bad"), 404, "not_found")
    wide, bcast = (api.get(f"/api/v1/jobs/{n}").get_json() for n in ("wide", "bcast"))
    assert (wide["max_concurrency"], wide["broadcast"]) == (5, False)
    assert (bcast["max_concurrency"], bcast["broadcast"]) == (1, True)


def test_a_runs_shard_is_in_its_json(api: Api, rows: Rows) -> None:
    api.post("/api/v1/jobs", json=job_body("sharded", broadcast=True))
    job_id = rows.job_id("sharded")
    planned = datetime.now(UTC) - timedelta(minutes=1)
    shards = [rows.add_run("sharded", job_id, planned, shard=i, shard_total=2) for i in (0, 1)]
    plain = rows.add_run("sharded", job_id, planned - timedelta(minutes=1))

    assert api.get(f"/api/v1/runs/{shards[1]}").get_json()["shard"] == {"index": 1, "total": 2}
    assert api.get(f"/api/v1/runs/{plain}").get_json()["shard"] is None
    listed = {r["id"]: r["shard"] for r in api.get("/api/v1/jobs/sharded/runs").get_json()["items"]}
    assert listed == {shards[0]: {"index": 0, "total": 2}, shards[1]: {"index": 1, "total": 2},
                      plain: None}
    last = api.get("/api/v1/jobs/sharded").get_json()["last_run"]
    assert last["shard"] is not None


def test_the_openapi_document_describes_the_fields_and_the_shard(api: Api) -> None:
    schemas = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]

    for name in ("JobInput", "JobReplace", "JobChanges", "Job"):
        fields = schemas[name]["properties"]
        most = fields["max_concurrency"]
        assert (most["type"], most["minimum"], most["maximum"], most["default"]) == (
            "integer", 1, 100, 1), name
        assert (fields["broadcast"]["type"], fields["broadcast"]["default"]) == ("boolean", False)
    assert {"max_concurrency", "broadcast"} <= set(schemas["Job"]["required"])
    shard = schemas["Run"]["properties"]["shard"]
    assert shard["type"] == ["object", "null"]
    assert shard["required"] == ["index", "total"]
    assert {k: v["type"] for k, v in shard["properties"].items()} == {
        "index": "integer", "total": "integer"}
    assert "shard" in schemas["Run"]["required"]
