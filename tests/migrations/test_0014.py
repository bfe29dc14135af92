"""Migration 0014: concurrency and broadcast (ql_jobs.max_concurrency, broadcast and the
lane columns; ql_runs.shard, shard_total in the run key)."""

from __future__ import annotations

import pytest

from quartzlite.storage import migrate
from tests.migrations.conftest import NewDatabase
from tests.migrations.support import execute, query

pytestmark = pytest.mark.db

JOB = (
    "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, command, "
    "kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
    "misfire_grace_s, recovery_policy, state, created_at, updated_at, overrun_policy) "
    "VALUES ('old', 'old', '@every 1m', 'UTC', 'shell', 'true', '{}', 1, 1, 300, "
    "'fire_once', 60, 'rerun', 'idle', NOW(6), NOW(6), 'skip')"
)
RUN = ("INSERT INTO ql_runs (job_id, job_name, fire_id, planned_at, slot_at, attempt, status"
       "{extra}) VALUES (1, 'old', 'f', '2026-01-01 00:00:00', '2026-01-01 00:00:00', 1, "
       "'succeeded'{values})")


def run_key(url: str) -> list[str]:
    return [r[0] for r in query(
        url,
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'ql_runs' AND INDEX_NAME = 'uq_ql_runs_job_planned' "
        "ORDER BY SEQ_IN_INDEX",
    )]


def test_0014_stored_jobs_run_one_at_a_time_and_a_slot_still_runs_once(
    new_database: NewDatabase,
) -> None:
    """Jobs stored before the revision run one at a time and are not broadcast; their
    runs are shard 0, so the run key (now with the shard) still refuses a second run of a
    slot. The downgrade drops broadcast runs (the old key cannot hold them) and lanes."""
    url = new_database()
    migrate.upgrade(url, "0013")
    execute(url, JOB)
    execute(url, RUN.format(extra="", values=""))
    assert run_key(url) == ["job_id", "planned_at"]

    migrate.upgrade(url, "0014")

    assert run_key(url) == ["job_id", "planned_at", "shard"]
    assert query(url, "SELECT max_concurrency, broadcast, parent_id, saturated FROM ql_jobs") == [
        (1, 0, None, 0)]
    assert query(url, "SELECT shard, shard_total FROM ql_runs") == [(0, None)]
    with pytest.raises(Exception, match="1062|Duplicate"):
        execute(url, RUN.format(extra="", values=""))
    # A broadcast slot: one run per shard.
    execute(url, RUN.format(extra=", shard, shard_total", values=", 1, 2"))
    execute(url, "INSERT INTO ql_jobs (name, schedule, timezone, target_kind, command, kwargs, "
                 "max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
                 "misfire_grace_s, recovery_policy, state, created_at, updated_at, "
                 "overrun_policy, parent_id) SELECT name, schedule, timezone, target_kind, "
                 "command, kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, "
                 "misfire_policy, misfire_grace_s, recovery_policy, state, created_at, "
                 "updated_at, overrun_policy, id FROM ql_jobs WHERE id = 1")

    migrate.downgrade(url, "0013")

    assert run_key(url) == ["job_id", "planned_at"]
    assert query(url, "SELECT COUNT(*) FROM ql_runs") == [(1,)]
    assert query(url, "SELECT name FROM ql_jobs") == [("old",)]
