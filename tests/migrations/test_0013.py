"""Migration 0013: dependencies (ql_jobs.upstream, upstream_on, has_downstream;
ql_requests.planned_at, taken_at; ql_runs.upstream_run_id)."""

from __future__ import annotations

import pytest

from quartzlite.storage import migrate
from tests.migrations.conftest import NewDatabase
from tests.migrations.support import execute, query

pytestmark = pytest.mark.db


def columns(url: str, table: str) -> list[str]:
    return [row[0] for row in query(
        url,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = :t ORDER BY ORDINAL_POSITION", t=table,
    )]


def test_0013_stored_jobs_have_no_dependency_and_stored_requests_are_taken(
    new_database: NewDatabase,
) -> None:
    """Jobs stored before the revision name no upstream job (and run as before); the
    requests stored before it are triggers', taken when written: none becomes pending.
    The downgrade drops the columns and keeps the rows."""
    url = new_database()
    migrate.upgrade(url, "0012")
    execute(
        url,
        "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, command, "
        "kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
        "misfire_grace_s, recovery_policy, state, created_at, updated_at, overrun_policy) "
        "VALUES ('old', 'old', '@every 1m', 'UTC', 'shell', 'true', '{}', 1, 1, 300, "
        "'fire_once', 60, 'rerun', 'idle', NOW(6), NOW(6), 'skip')",
    )
    execute(url, "INSERT INTO ql_requests (job_id, slot_at, params, cause, created_at) "
                 "VALUES (1, '2026-01-01 00:00:00', :p, 'trigger', '2026-01-01 00:00:01')",
                 p='{"a":1}')
    execute(url, "INSERT INTO ql_runs (job_id, job_name, fire_id, planned_at, slot_at, attempt, "
                 "status) VALUES (1, 'old', 'f', NOW(6), NOW(6), 1, 'succeeded')")

    migrate.upgrade(url, "0013")

    assert columns(url, "ql_jobs")[-3:] == ["upstream", "upstream_on", "has_downstream"]
    assert columns(url, "ql_requests")[-2:] == ["planned_at", "taken_at"]
    assert columns(url, "ql_runs")[-1] == "upstream_run_id"
    assert query(url, "SELECT upstream, upstream_on, has_downstream FROM ql_jobs") == [
        ("", "success", 0)]
    assert [tuple(map(str, r)) for r in query(
        url, "SELECT planned_at, taken_at FROM ql_requests")] == [
        ("None", "2026-01-01 00:00:01")]
    assert query(url, "SELECT upstream_run_id FROM ql_runs") == [(None,)]
    from quartzlite.client import SchedulerClient

    migrate.upgrade(url, "head")  # the client reads the schema at head

    client = SchedulerClient(url)
    try:
        job = client.get_job("old")
        assert (job.spec.upstream, job.spec.upstream_on.value) == ((), "success")
        assert client.list_runs(job="old").items[0].upstream_run_id is None
    finally:
        client.close()

    migrate.downgrade(url, "0012")

    assert "upstream" not in columns(url, "ql_jobs")
    assert "taken_at" not in columns(url, "ql_requests")
    assert "upstream_run_id" not in columns(url, "ql_runs")
    assert query(url, "SELECT name FROM ql_jobs") == [("old",)]
    assert query(url, "SELECT params FROM ql_requests") == [('{"a":1}',)]
