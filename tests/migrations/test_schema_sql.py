"""sql/schema.sql (plain DDL for DBAs) gives the same schema as the alembic migrations.

The drift test: one database built by ``alembic upgrade head``, another by running
sql/schema.sql in a database with the server's default character set; their tables
(engine, collation), columns, indexes and constraints, read from information_schema,
must be equal. Change a migration, ``tables.py`` or the file alone and this fails.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from quartzlite.storage import migrate
from quartzlite.storage.engine import Database
from quartzlite.storage.tables import LOCK_NAMES, metadata
from tests.migrations.conftest import NewDatabase
from tests.migrations.support import (
    GENERATOR,
    SCHEMA_SQL,
    apply_sql,
    execute,
    query,
    snapshot,
    snapshot_diff,
    sql_statements,
)
from tests.migrations.test_alembic import metadata_diff

pytestmark = pytest.mark.db


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schema_sql", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_schema_sql", module)
    spec.loader.exec_module(module)
    return module


def schema_sql_database(new_database: NewDatabase) -> str:
    """A database with the server's defaults, built by running sql/schema.sql."""
    url = new_database()
    apply_sql(url, sql_statements(SCHEMA_SQL.read_text(encoding="utf-8")))
    return url


def alembic_database(new_database: NewDatabase) -> str:
    url = new_database(create=False)
    migrate.upgrade(url)
    return url


def test_schema_sql_is_what_the_generator_renders() -> None:
    rendered = load_generator().render()

    assert SCHEMA_SQL.read_text(encoding="utf-8") == rendered, (
        "sql/schema.sql is stale: run `make schema-sql` and commit the result"
    )


def test_schema_sql_has_every_table_the_lock_rows_and_the_head_revision() -> None:
    statements = sql_statements(SCHEMA_SQL.read_text(encoding="utf-8"))
    created = [s.split()[2] for s in statements if s.startswith("CREATE TABLE")]

    assert created == [*metadata.tables, migrate.VERSION_TABLE]
    assert "INSERT INTO ql_locks (name, version) VALUES ('job', 0), ('session', 0)" in statements
    assert (
        f"INSERT INTO {migrate.VERSION_TABLE} (version_num) VALUES ('{migrate.head_revision()}')"
        in statements
    )


def test_schema_sql_gives_the_same_schema_as_alembic(new_database: NewDatabase) -> None:
    by_alembic = alembic_database(new_database)
    by_sql = schema_sql_database(new_database)

    left, right = snapshot(by_alembic), snapshot(by_sql)

    assert left["tables"], "the snapshot saw no tables"
    assert snapshot_diff(left, right, ("alembic", "sql/schema.sql")) == ""
    for sql in ("SELECT name, version FROM ql_locks ORDER BY name",
                f"SELECT version_num FROM {migrate.VERSION_TABLE}"):
        assert query(by_alembic, sql) == query(by_sql, sql)


def test_schema_sql_database_equals_the_metadata_and_a_node_accepts_it(
    new_database: NewDatabase,
) -> None:
    url = schema_sql_database(new_database)

    assert metadata_diff(url) == []
    assert {row[0] for row in query(url, "SELECT name FROM ql_locks")} == set(LOCK_NAMES)
    db = Database(url)
    try:
        assert migrate.current_revision(db) == migrate.head_revision()
        migrate.check_ready(db)
    finally:
        db.dispose()


def test_db_upgrade_continues_from_schema_sql(new_database: NewDatabase) -> None:
    url = schema_sql_database(new_database)
    before = snapshot(url)

    migrate.upgrade(url)  # already at head: nothing to do, nothing fails

    assert snapshot_diff(before, snapshot(url)) == ""
    assert query(url, f"SELECT version_num FROM {migrate.VERSION_TABLE}") == [
        (migrate.head_revision(),)
    ]


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ("ALTER TABLE ql_jobs MODIFY description VARCHAR(1000) NOT NULL DEFAULT ''",
         "'description'"),
        ("ALTER TABLE ql_runs MODIFY output TEXT", "'output'"),
        ("ALTER TABLE ql_sessions ALTER COLUMN capacity SET DEFAULT 16", "'capacity'"),
        ("DROP INDEX ix_ql_jobs_owner ON ql_jobs", "'ix_ql_jobs_owner'"),
        ("CREATE INDEX ix_extra ON ql_runs (node)", "'ix_extra'"),
        ("ALTER TABLE ql_locks ENGINE=MyISAM", "'MyISAM'"),
        ("ALTER TABLE ql_locks CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
         "'utf8mb4_general_ci'"),
        ("ALTER TABLE ql_jobs ADD COLUMN extra INT NULL", "'extra'"),
    ],
)
def test_the_drift_comparison_notices_a_change(
    new_database: NewDatabase, change: str, expect: str
) -> None:
    """Guard the guard: a change on one side shows up in the diff."""
    url = schema_sql_database(new_database)
    before = snapshot(url)
    execute(url, change)

    diff = snapshot_diff(before, snapshot(url))

    assert expect in diff, diff or "no difference seen"
