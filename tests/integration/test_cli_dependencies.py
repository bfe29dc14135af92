"""``quartzlite job add/put/update --upstream A --upstream-on ...``, ``job show`` with the
upstream and downstream jobs, and ``job history`` with the upstream run."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.integration.dbtools import add_run, connect, job_rows
from tests.integration.test_cli import fails, ok, show

pytestmark = pytest.mark.db


def test_a_chain_is_written_and_shown(db_url: str) -> None:
    ok(db_url, "job", "add", "extract", "--schedule", "@every 1h", "--command", "true")
    added = ok(db_url, "job", "add", "load", "--schedule", "@manual", "--command", "true",
               "--upstream", "extract")
    assert added.startswith("added: load (state idle, next fire -)"), added
    ok(db_url, "job", "put", "report", "--schedule", "@manual", "--command", "true",
       "--upstream", "load", "--upstream", "extract", "--upstream-on", "completion")

    assert show(db_url, "extract")["downstream"] == "load,report"
    load = show(db_url, "load")
    assert (load["upstream"], load["upstream_on"], load["downstream"], load["state"]) == (
        "extract", "success", "report", "idle")
    report = json.loads(ok(db_url, "job", "show", "report", "--json"))
    assert (report["upstream"], report["upstream_on"], report["downstream"]) == (
        ["extract", "load"], "completion", [])

    ok(db_url, "job", "update", "report", "--upstream", "")
    assert show(db_url, "report")["upstream"] == "-"
    assert show(db_url, "load")["downstream"] == "-"


def test_refusals_exit_with_the_field_and_the_reason(db_url: str) -> None:
    ok(db_url, "job", "add", "a", "--schedule", "@manual", "--command", "true")
    ok(db_url, "job", "add", "b", "--schedule", "@manual", "--command", "true", "--upstream", "a")
    before = job_rows(db_url)
    assert fails(db_url, "job", "add", "c", "--schedule", "@every 5s", "--command", "true",
                 "--upstream", "a", code=2) == (
        "Error: upstream: a job with upstream jobs runs only when they end: give it the "
        "schedule @manual")
    assert "a -> b -> a" in fails(db_url, "job", "update", "a", "--upstream", "b", code=2)
    assert "'ghost'" in fails(db_url, "job", "update", "b", "--upstream", "ghost", code=2)
    assert fails(db_url, "job", "delete", "a", code=1).endswith(
        "job a is upstream of b: remove the dependency first")
    assert job_rows(db_url) == before


def test_history_shows_the_upstream_run(db_url: str) -> None:
    ok(db_url, "job", "add", "a", "--schedule", "@manual", "--command", "true")
    ok(db_url, "job", "add", "b", "--schedule", "@manual", "--command", "true", "--upstream", "a")
    ids = {r["name"]: r["id"] for r in job_rows(db_url)}
    at = datetime(2026, 1, 1, 3, tzinfo=UTC)
    upstream = add_run(db_url, job_id=ids["a"], job_name="a", planned_at=at)
    assert ok(db_url, "job", "history", "a").splitlines()[0].split()[-1] == "NODE"
    downstream = add_run(db_url, job_id=ids["b"], job_name="b", planned_at=at)
    with connect(db_url) as conn:
        conn.exec_driver_sql("UPDATE ql_runs SET upstream_run_id = %s WHERE id = %s",
                             (upstream, downstream))
    table = ok(db_url, "job", "history", "b").splitlines()
    assert table[0].split()[-1] == "UPSTREAM"
    assert table[1].split()[-1] == f"#{upstream}"
    data = json.loads(ok(db_url, "job", "history", "b", "--json"))
    assert data["runs"][0]["upstream_run_id"] == upstream
