"""Helpers for the migration tests: a normalized picture of a database's schema taken
from information_schema, applying a plain .sql file, and a readable diff."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_SQL = ROOT / "sql" / "schema.sql"
GENERATOR = ROOT / "scripts" / "gen_schema_sql.py"

#: What each information_schema view contributes (TABLE_SCHEMA is left out: it is the
#: one thing that differs between two databases holding the same schema).
SNAPSHOT_QUERIES: dict[str, str] = {
    "tables": """
        SELECT TABLE_NAME, TABLE_TYPE, ENGINE, TABLE_COLLATION, ROW_FORMAT, CREATE_OPTIONS,
               TABLE_COMMENT
        FROM information_schema.TABLES WHERE TABLE_SCHEMA = :schema
    """,
    "columns": """
        SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE,
               COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY, EXTRA,
               COLUMN_COMMENT
        FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = :schema
    """,
    "indexes": """
        SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART,
               NULLABLE, INDEX_TYPE, COLLATION
        FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = :schema
    """,
    "constraints": """
        SELECT TABLE_NAME, CONSTRAINT_NAME, CONSTRAINT_TYPE
        FROM information_schema.TABLE_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = :schema
    """,
}

Snapshot = dict[str, list[tuple[Any, ...]]]


def _normalize(value: Any) -> Any:
    """Values that mean the same on MySQL 8 and MariaDB compare equal."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        value = value.strip()
        # MariaDB reports "no default" of a nullable column as the string NULL, MySQL 8
        # as SQL NULL.
        if value.upper() == "NULL":
            return None
    return value


def snapshot(url: str, *, exclude: Iterable[str] = ()) -> Snapshot:
    """Tables (engine, collation), columns, indexes and constraints of ``url``'s database,
    without the schema name, each category sorted; tables in ``exclude`` left out."""
    skip = set(exclude)
    parsed = make_url(url)
    engine = create_engine(parsed, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return {
                name: sorted(
                    (
                        tuple(_normalize(v) for v in row)
                        for row in conn.execute(text(query), {"schema": parsed.database})
                        if row[0] not in skip
                    ),
                    key=repr,
                )
                for name, query in SNAPSHOT_QUERIES.items()
            }
    finally:
        engine.dispose()


def snapshot_diff(left: Snapshot, right: Snapshot, names: Sequence[str] = ("left", "right")) -> str:
    """A readable difference of two snapshots ('' when they are equal)."""
    lines: list[str] = []
    for category in SNAPSHOT_QUERIES:
        a, b = set(left[category]), set(right[category])
        for row in sorted(a - b, key=repr):
            lines.append(f"{category}: only in {names[0]}: {row}")
        for row in sorted(b - a, key=repr):
            lines.append(f"{category}: only in {names[1]}: {row}")
    return "\n".join(lines)


def sql_statements(script: str) -> list[str]:
    """Split a plain DDL file into statements: drop ``--`` comment lines, split on ``;``
    at the end of a line (the file has no procedures and no ``;`` inside literals)."""
    body = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*$", body, flags=re.MULTILINE) if s.strip()]


def apply_sql(url: str, statements: Iterable[str]) -> None:
    """Run ``statements`` one by one on ``url``, as a DBA's client would (autocommit)."""
    engine = create_engine(make_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def query(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_engine(make_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(text(sql), params)]
            conn.commit()
            return rows
    finally:
        engine.dispose()


def execute(url: str, sql: str, **params: Any) -> None:
    engine = create_engine(make_url(url), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    return {
        row[0]
        for row in query(
            url,
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = :s",
            s=make_url(url).database,
        )
    }
