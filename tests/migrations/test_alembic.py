"""The alembic migrations build exactly ``tables.metadata``, round-trip, and leave a
database a node accepts (procrastinate ``tests/migration``)."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import make_url

from quartzlite.errors import SchemaError
from quartzlite.storage import migrate
from quartzlite.storage.engine import Database
from quartzlite.storage.tables import LOCK_NAMES, metadata
from tests.migrations.conftest import NewDatabase
from tests.migrations.support import (
    Snapshot,
    execute,
    query,
    snapshot,
    snapshot_diff,
    table_names,
)

pytestmark = pytest.mark.db

TABLES = set(metadata.tables)


def metadata_diff(url: str) -> list[Any]:
    """alembic's autogenerate comparison of ``url``'s database with ``tables.metadata``."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "compare_server_default": True,
                    # autogenerate leaves the version table out of the comparison
                    "version_table": migrate.VERSION_TABLE,
                },
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def lock_rows(url: str) -> dict[str, int]:
    return {
        name: int(version)
        for name, version in query(url, "SELECT name, version FROM ql_locks")
    }


def check_ready(url: str) -> None:
    db = Database(url)
    try:
        migrate.check_ready(db)
    finally:
        db.dispose()


def revision(url: str) -> str | None:
    db = Database(url)
    try:
        return migrate.current_revision(db)
    finally:
        db.dispose()


def test_upgrade_head_on_an_empty_database_builds_exactly_the_metadata(
    new_database: NewDatabase,
) -> None:
    url = new_database(create=False)  # upgrade creates the database itself

    migrate.upgrade(url)

    assert table_names(url) == TABLES | {migrate.VERSION_TABLE}
    assert revision(url) == migrate.head_revision()
    diff = metadata_diff(url)
    assert diff == [], "alembic upgrade head differs from tables.metadata:\n" + "\n".join(
        map(str, diff)
    )


def test_the_metadata_comparison_sees_types_defaults_and_indexes(
    new_database: NewDatabase,
) -> None:
    """Guard the guard: the comparison above must notice a drifted column type, a
    drifted server default and a missing index."""
    url = new_database()
    migrate.upgrade(url)
    execute(url, "ALTER TABLE ql_jobs MODIFY description VARCHAR(1000) NOT NULL DEFAULT ''")
    execute(url, "ALTER TABLE ql_jobs ALTER COLUMN priority SET DEFAULT 5")
    execute(url, "DROP INDEX ix_ql_runs_planned ON ql_runs")

    diff = repr(metadata_diff(url))

    assert "modify_type" in diff
    assert "description" in diff
    assert "modify_default" in diff
    assert "priority" in diff
    assert "add_index" in diff
    assert "ix_ql_runs_planned" in diff


def test_upgrade_is_idempotent(new_database: NewDatabase) -> None:
    url = new_database()
    migrate.upgrade(url)
    before = snapshot(url)

    migrate.upgrade(url)

    assert snapshot_diff(before, snapshot(url)) == ""
    assert lock_rows(url) == dict.fromkeys(LOCK_NAMES, 0)


def test_downgrade_to_base_then_upgrade_head_round_trips(new_database: NewDatabase) -> None:
    url = new_database()
    migrate.upgrade(url)
    at_head = snapshot(url)

    migrate.downgrade(url, "base")

    # alembic keeps its (now empty) version table; every quartzlite table is gone.
    assert table_names(url) == {migrate.VERSION_TABLE}
    assert revision(url) is None

    migrate.upgrade(url)

    assert table_names(url) == TABLES | {migrate.VERSION_TABLE}
    assert revision(url) == migrate.head_revision()
    assert snapshot_diff(at_head, snapshot(url), ("first upgrade", "after round trip")) == ""
    assert lock_rows(url) == dict.fromkeys(LOCK_NAMES, 0)
    assert metadata_diff(url) == []
    check_ready(url)


def test_every_migration_downgrades_and_upgrades_one_step_at_a_time(
    new_database: NewDatabase,
) -> None:
    """Each revision's downgrade undoes exactly its upgrade (not only the whole chain)."""
    script = ScriptDirectory.from_config(migrate.alembic_config(""))
    chain = [r.revision for r in script.walk_revisions()][::-1]  # base -> head
    url = new_database()
    # alembic keeps its version table at base: compare the rest
    only_ours = [migrate.VERSION_TABLE]
    snapshots: dict[str | None, Snapshot] = {None: snapshot(url, exclude=only_ours)}
    for rev in chain:
        migrate.upgrade(url, rev)
        snapshots[rev] = snapshot(url, exclude=only_ours)

    for rev, below in reversed(list(zip(chain, [None, *chain[:-1]], strict=True))):
        migrate.downgrade(url, "-1")
        assert revision(url) == below
        diff = snapshot_diff(snapshots[below], snapshot(url, exclude=only_ours), (str(below), "now"))
        assert diff == "", f"downgrade of {rev} does not restore {below}:\n{diff}"

    for rev in chain:
        migrate.upgrade(url, "+1")
        assert revision(url) == rev
        assert snapshot_diff(snapshots[rev], snapshot(url, exclude=only_ours), (rev, "now")) == ""


def test_0005_gives_stored_jobs_catch_up_and_new_jobs_skip(new_database: NewDatabase) -> None:
    """Jobs stored before the overrun policy existed keep catching up (the behaviour they
    had); jobs created afterwards skip by default; the column keeps no server default."""
    from quartzlite.client import SchedulerClient
    from quartzlite.enums import OverrunPolicy

    url = new_database()
    migrate.upgrade(url, "0004")
    execute(
        url,
        "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, command, "
        "kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
        "misfire_grace_s, recovery_policy, state, next_fire_at, created_at, updated_at) "
        "VALUES ('old', 'old', '@every 1s', 'UTC', 'shell', 'sleep 2.5', '{}', 1, 1, 300, "
        "'fire_once', 60, 'rerun', 'idle', NOW(6), NOW(6), NOW(6))",
    )

    migrate.upgrade(url, "0005")

    assert query(url, "SELECT name, overrun_policy FROM ql_jobs") == [("old", "catch_up")]
    assert query(
        url,
        "SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'ql_jobs' AND COLUMN_NAME = 'overrun_policy'",
    ) in ([(None,)], [("NULL",)])
    migrate.upgrade(url)  # the client reads the columns of head
    client = SchedulerClient(url)
    try:
        assert client.get_job("old").spec.overrun_policy is OverrunPolicy.CATCH_UP
        new = client.add_job({"name": "new", "schedule": "@every 1s", "command": "true"})
        assert new.spec.overrun_policy is OverrunPolicy.SKIP
        assert client.get_job("new").spec.overrun_policy is OverrunPolicy.SKIP
    finally:
        client.close()

    migrate.downgrade(url, "0004")

    assert query(url, "SELECT name FROM ql_jobs ORDER BY id") == [("old",), ("new",)]
    assert "overrun_policy" not in {
        row[0] for row in query(
            url,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = 'ql_jobs'",
        )
    }


def test_0006_gives_stored_jobs_no_bounds_and_a_count_of_zero(new_database: NewDatabase) -> None:
    """Jobs stored before bounds existed get none (NULL start, end and max_runs), no
    jitter and runs_done 0: they fire as before; new jobs store their bounds; the
    downgrade drops the five columns and keeps the jobs."""
    from datetime import UTC, datetime

    from quartzlite.client import SchedulerClient

    columns = ("start_at", "end_at", "max_runs", "jitter_s", "runs_done")

    def ql_jobs_columns() -> list[str]:
        return [row[0] for row in query(
            url,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = 'ql_jobs' ORDER BY ORDINAL_POSITION",
        )]

    url = new_database()
    migrate.upgrade(url, "0005")
    execute(
        url,
        "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, command, "
        "kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
        "misfire_grace_s, overrun_policy, recovery_policy, state, next_fire_at, created_at, "
        "updated_at) VALUES ('old', 'old', '@every 1h', 'UTC', 'shell', 'true', '{}', 1, 1, "
        "300, 'fire_once', 60, 'skip', 'rerun', 'idle', NOW(6), NOW(6), NOW(6))",
    )

    migrate.upgrade(url, "0006")

    assert ql_jobs_columns()[-6:] == ["overrun_policy", *columns], "added last, in this order"
    assert query(url, f"SELECT {', '.join(columns)} FROM ql_jobs") == [(None, None, None, 0.0, 0)]
    migrate.upgrade(url)  # the client reads the columns of head
    client = SchedulerClient(url)
    try:
        old = client.get_job("old")
        assert (old.spec.start_at, old.spec.end_at, old.spec.max_runs, old.spec.jitter_s) == (
            None, None, None, 0.0)
        assert (old.runs_done, old.finished) == (0, False)
        start = datetime(2030, 1, 1, tzinfo=UTC)
        new = client.add_job({"name": "new", "schedule": "@every 1h", "command": "true",
                              "start_at": "2030-01-01T00:00:00Z", "max_runs": 2, "jitter_s": 1.5})
        assert new.next_fire_at is not None
        assert start <= new.next_fire_at
        assert query(url, "SELECT start_at, max_runs, jitter_s FROM ql_jobs WHERE name = 'new'") == [
            (start.replace(tzinfo=None), 2, 1.5)]
    finally:
        client.close()

    migrate.downgrade(url, "0005")

    assert query(url, "SELECT name FROM ql_jobs ORDER BY id") == [("old",), ("new",)]
    assert ql_jobs_columns()[-1] == "overrun_policy"
    assert not set(columns) & set(ql_jobs_columns())


def test_0007_adds_calendars_and_gives_stored_jobs_none(new_database: NewDatabase) -> None:
    """Jobs stored before calendars existed name none ('') and fire as before; the
    client stores calendars and jobs naming them; the downgrade drops ql_calendars and
    the column and keeps the jobs."""
    from quartzlite.client import SchedulerClient

    def ql_jobs_columns() -> list[str]:
        return [row[0] for row in query(
            url,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = 'ql_jobs' ORDER BY ORDINAL_POSITION",
        )]

    url = new_database()
    migrate.upgrade(url, "0006")
    execute(
        url,
        "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, command, "
        "kwargs, max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy, "
        "misfire_grace_s, overrun_policy, recovery_policy, state, next_fire_at, created_at, "
        "updated_at) VALUES ('old', 'old', '@every 1h', 'UTC', 'shell', 'true', '{}', 1, 1, "
        "300, 'fire_once', 60, 'skip', 'rerun', 'idle', NOW(6), NOW(6), NOW(6))",
    )
    assert "ql_calendars" not in table_names(url)

    migrate.upgrade(url, "0007")

    assert "ql_calendars" in table_names(url)
    assert ql_jobs_columns()[-2:] == ["runs_done", "calendars"], "added last"
    assert query(url, "SELECT calendars FROM ql_jobs") == [("",)]
    migrate.upgrade(url)  # the client reads the columns of head
    client = SchedulerClient(url)
    try:
        assert client.get_job("old").spec.calendars == ()
        client.add_calendar({"name": "holidays", "rules": {"dates": ["2030-12-25"]}})
        client.add_job({"name": "new", "schedule": "@every 1h", "command": "true",
                        "calendars": ["holidays"]})
        assert query(url, "SELECT calendars FROM ql_jobs WHERE name = 'new'") == [("holidays",)]
        assert query(url, "SELECT name, timezone, rules FROM ql_calendars") == [
            ("holidays", "UTC",
             '{"dates":["2030-12-25"],"ranges":[],"windows":[],"yearly":[]}')]
    finally:
        client.close()

    migrate.downgrade(url, "0006")

    assert query(url, "SELECT name FROM ql_jobs ORDER BY id") == [("old",), ("new",)]
    assert ql_jobs_columns()[-1] == "runs_done"
    assert "ql_calendars" not in table_names(url)


def test_upgrade_inserts_the_lock_rows_and_check_ready_accepts_it(
    new_database: NewDatabase,
) -> None:
    url = new_database()
    migrate.upgrade(url)

    assert lock_rows(url) == {"job": 0, "session": 0}
    check_ready(url)


@pytest.mark.parametrize("missing", LOCK_NAMES)
def test_check_ready_names_a_missing_lock_row(new_database: NewDatabase, missing: str) -> None:
    url = new_database()
    migrate.upgrade(url)
    execute(url, "DELETE FROM ql_locks WHERE name = :n", n=missing)

    with pytest.raises(SchemaError) as caught:
        check_ready(url)

    message = str(caught.value)
    assert f"lock row(s) {missing} missing from ql_locks" in message
    (present,) = set(LOCK_NAMES) - {missing}
    assert f" {present} " not in message


def test_check_ready_names_every_missing_lock_row(new_database: NewDatabase) -> None:
    url = new_database()
    migrate.upgrade(url)
    execute(url, "DELETE FROM ql_locks")

    with pytest.raises(SchemaError, match=r"lock row\(s\) job, session missing"):
        check_ready(url)


def test_check_ready_on_a_database_without_schema_says_to_upgrade(
    new_database: NewDatabase,
) -> None:
    url = new_database()

    with pytest.raises(SchemaError) as caught:
        check_ready(url)

    assert "`quartzlite db upgrade`" in str(caught.value)
    assert "at nothing" in str(caught.value)


def test_check_ready_after_a_downgrade_says_to_upgrade(new_database: NewDatabase) -> None:
    url = new_database()
    migrate.upgrade(url)
    migrate.downgrade(url, "base")

    with pytest.raises(SchemaError, match="run `quartzlite db upgrade`"):
        check_ready(url)


def test_check_ready_on_a_revision_other_than_head_says_to_upgrade(
    new_database: NewDatabase,
) -> None:
    url = new_database()
    migrate.upgrade(url)
    execute(url, f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'older'")

    with pytest.raises(SchemaError) as caught:
        check_ready(url)

    message = str(caught.value)
    assert "at older" in message
    assert f"not at {migrate.head_revision()}" in message
    assert "`quartzlite db upgrade`" in message


def test_upgrade_of_a_database_at_an_unknown_revision_is_a_schema_error(
    new_database: NewDatabase,
) -> None:
    """E.g. a database a newer quartzlite migrated: say so, do not crash."""
    url = new_database()
    migrate.upgrade(url)
    execute(url, f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'")

    with pytest.raises(SchemaError, match="cannot upgrade to head: .*'9999'"):
        migrate.upgrade(url)
    with pytest.raises(SchemaError, match="cannot downgrade to base: .*'9999'"):
        migrate.downgrade(url, "base")


def test_tables_are_innodb_utf8mb4_whatever_the_database_default(
    new_database: NewDatabase,
) -> None:
    # A database whose defaults are not ours: the tables must still say InnoDB/utf8mb4.
    url = new_database(charset="latin1", collation="latin1_swedish_ci")
    migrate.upgrade(url)
    schema = make_url(url).database

    tables = query(
        url,
        "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = :s AND TABLE_NAME <> :v",
        s=schema,
        v=migrate.VERSION_TABLE,
    )
    assert {t[0] for t in tables} == TABLES
    for name, engine, collation in tables:
        assert (engine, collation) == ("InnoDB", "utf8mb4_bin"), name

    text_columns = query(
        url,
        "SELECT TABLE_NAME, COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME "
        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = :s "
        "AND CHARACTER_SET_NAME IS NOT NULL AND TABLE_NAME <> :v",
        s=schema,
        v=migrate.VERSION_TABLE,
    )
    assert len(text_columns) > 10
    for table, column, charset, collation in text_columns:
        assert (charset, collation) == ("utf8mb4", "utf8mb4_bin"), f"{table}.{column}"


def test_upgrade_creates_the_database_utf8mb4(new_database: NewDatabase) -> None:
    url = new_database(create=False)
    migrate.upgrade(url)

    rows = query(
        url,
        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME "
        "FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = :s",
        s=make_url(url).database,
    )
    assert rows == [("utf8mb4", "utf8mb4_bin")]


def test_0004_gives_stored_quartz_expressions_their_question_mark(
    new_database: NewDatabase,
) -> None:
    """Quartz wants "?" in one day field: stored jobs whose unused day field was "*"
    (or both "?") are rewritten to mean the same; one restricting both is left for its
    node to quarantine; cron and @ forms are untouched."""
    url = new_database()
    migrate.upgrade(url, "0003")
    stored = {
        "every-second": ("* * * * * *", "* * * * * ?"),
        "mondays": ("0 0 12 * * MON", "0 0 12 ? * MON"),
        "first": ("0 0 12 1 * *", "0 0 12 1 * ?"),
        "with-year": ("0 0 12 1 1 * 2027", "0 0 12 1 1 ? 2027"),
        "both-question": ("0 0 12 ? * ?", "0 0 12 * * ?"),
        "already-quartz": ("0 0 12 ? * MON", "0 0 12 ? * MON"),
        "friday-13th": ("0 0 12 13 * FRI", "0 0 12 13 * FRI"),
        "cron": ("0 0 */2 * 1", "0 0 */2 * 1"),
        "every": ("@every 1s", "@every 1s"),
    }
    for name, (schedule, _) in stored.items():
        execute(
            url,
            "INSERT INTO ql_jobs (name, active_name, schedule, timezone, target_kind, kwargs,"
            " max_attempts, retry_backoff_s, retry_max_backoff_s, misfire_policy,"
            " misfire_grace_s, recovery_policy, state, created_at, updated_at)"
            " VALUES (:n, :n, :s, 'UTC', 'command', '{}', 1, 1, 1, 'fire_once', 60, 'rerun',"
            " 'idle', '2026-01-01', '2026-01-01')",
            n=name, s=schedule,
        )

    migrate.upgrade(url, "0004")

    found = dict(query(url, "SELECT name, schedule FROM ql_jobs"))
    assert found == {name: after for name, (_, after) in stored.items()}
    changed = {name for name, updated in query(url, "SELECT name, updated_at FROM ql_jobs")
               if str(updated) != "2026-01-01 00:00:00"}
    # A rewritten definition gets a new stamp: a node re-reads it instead of its cache.
    assert changed == {"every-second", "mondays", "first", "with-year", "both-question"}
