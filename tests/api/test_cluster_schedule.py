"""/api/v1/cluster and /api/v1/schedule/preview."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from .support import Api, Rows, assert_error, job_body

pytestmark = pytest.mark.db


def test_cluster_lists_nodes_with_their_running_jobs(api: Api, rows: Rows) -> None:
    assert api.get("/api/v1/cluster").get_json()["nodes"] == []
    rows.add_session("s-1", host="alpha", pid=11)
    rows.add_session("s-2", host="beta", pid=22, tags="")
    api.post("/api/v1/jobs", json=job_body("busy"))
    rows.set_job("busy", state="executing", owner_session="s-2", fire_id="f")

    body = api.get("/api/v1/cluster").get_json()

    datetime.fromisoformat(body["now"])
    nodes = {n["id"]: n for n in body["nodes"]}
    assert set(nodes) == {"s-1", "s-2"}
    alpha = nodes["s-1"]
    assert (alpha["host"], alpha["pid"], alpha["name"]) == ("alpha", 11, "alpha:11")
    assert alpha["tags"] == ["gpu", "ssd"]
    assert alpha["capacity"] == 16
    assert alpha["clock_offset_ms"] == 1.5
    assert alpha["running_jobs"] == []
    assert isinstance(alpha["heartbeat_age_s"], float)
    for key in ("started_at", "heartbeat_at", "version"):
        assert alpha[key]
    assert nodes["s-2"]["running_jobs"] == ["busy"]


def test_preview_lists_the_next_instants(api: Api) -> None:
    response = api.get(
        "/api/v1/schedule/preview?schedule=30%202%20*%20*%20*&timezone=Europe/Paris"
        "&count=3&from=2026-03-28T00:00:00Z"
    )

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["timezone"] == "Europe/Paris"
    assert body["from"].startswith("2026-03-28T00:00:00")
    times = [datetime.fromisoformat(t) for t in body["times"]]
    # Instants carry the schedule's own UTC offset (Paris: +01:00, then +02:00 after the
    # DST change of 2026-03-29, when 02:30 does not exist and quartzlite's rule decides).
    assert len(times) == 3
    assert times == sorted(times)
    assert body["times"][0] == "2026-03-28T02:30:00+01:00"
    assert body["times"][2] == "2026-03-30T02:30:00+02:00"


def test_preview_defaults_to_now_and_ten(api: Api) -> None:
    body = api.get("/api/v1/schedule/preview?schedule=@every%2030s").get_json()

    assert len(body["times"]) == 10
    assert datetime.fromisoformat(body["times"][0]) > datetime.fromisoformat(body["from"])
    assert abs((datetime.fromisoformat(body["from"]) - datetime.now(UTC)).total_seconds()) < 3600
    assert_error(api.get("/api/v1/schedule/preview?schedule=@every%2030s&count=1001"), 400,
                 "validation_error", "count")
