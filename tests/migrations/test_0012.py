"""Migration 0012: ql_requests and ql_runs.params (trigger parameters)."""

from __future__ import annotations

import pytest

from quartzlite.storage import migrate
from tests.migrations.conftest import NewDatabase
from tests.migrations.support import execute, query, table_names

pytestmark = pytest.mark.db


def test_0012_adds_requests_and_gives_stored_runs_no_params(new_database: NewDatabase) -> None:
    """Runs stored before the revision have no parameters (NULL, read as None); a trigger
    with parameters records its request; the downgrade drops both and keeps the runs."""
    from quartzlite.client import SchedulerClient

    def ql_runs_columns() -> list[str]:
        return [row[0] for row in query(
            url,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = 'ql_runs' ORDER BY ORDINAL_POSITION",
        )]

    url = new_database()
    migrate.upgrade(url, "0012-1")
    execute(
        url,
        "INSERT INTO ql_runs (job_id, job_name, fire_id, planned_at, slot_at, attempt, status, "
        "output) VALUES (1, 'old', 'f', NOW(6), NOW(6), 1, 'succeeded', 'hi')",
    )
    assert "ql_requests" not in table_names(url)

    migrate.upgrade(url, "0012")

    assert "ql_requests" in table_names(url)
    assert ql_runs_columns()[-1] == "params", "added last"
    assert query(url, "SELECT params FROM ql_runs") == [(None,)]
    # The client reads the columns later revisions add too: it runs at head.
    migrate.upgrade(url)
    client = SchedulerClient(url)
    try:
        run = client.list_runs(job="old").items[0]
        assert run.params is None
        client.add_job({"name": "new", "schedule": "0 0 1 1 *", "command": "true"})
        job = client.trigger_job("new", {"who": "me"})
        assert query(url, "SELECT job_id, params, cause, upstream_run_id FROM ql_requests") == [
            (job.id, '{"who":"me"}', "trigger", None)]
    finally:
        client.close()

    migrate.downgrade(url, "0012-1")

    assert "ql_requests" not in table_names(url)
    assert "params" not in ql_runs_columns()
    assert query(url, "SELECT job_name, output FROM ql_runs") == [("old", "hi")]
