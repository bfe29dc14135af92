"""Test fixtures.

The database: QUARTZLITE_TEST_DATABASE_URL when set; else a MySQL 8 container through
testcontainers when a Docker engine answers; else the local server on 127.0.0.1:3306.
One database per test session (upgraded to head once), tables emptied between tests.
A test that needs the database FAILS when none answers: it never skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, delete, text, update
from sqlalchemy.engine import make_url

LOCAL_URL = "mysql+pymysql://root@127.0.0.1:3306/"

# tests/galera starts a private three-member Galera cluster (minutes, three mariadbd):
# only `make test-galera` runs it (QUARTZLITE_GALERA=1), never `make test`.
collect_ignore = [] if os.environ.get("QUARTZLITE_GALERA") == "1" else ["galera"]


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable Docker engine
        return False


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """A URL of a MySQL server (database part ignored)."""
    url = os.environ.get("QUARTZLITE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    if _docker_answers():
        from testcontainers.mysql import MySqlContainer

        with MySqlContainer("mysql:8.0", dialect="pymysql") as container:
            yield container.get_connection_url()
        return
    yield LOCAL_URL


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """A fresh database for this test session, upgraded to head."""
    from quartzlite.storage import migrate

    name = f"ql_test_{uuid.uuid4().hex[:10]}"
    base = make_url(server_url)
    url = base.set(drivername="mysql+pymysql", database=name).render_as_string(hide_password=False)
    # pre-ping: the fault suite restarts the server under this engine's pooled connection.
    admin = create_engine(base.set(drivername="mysql+pymysql", database=""), pool_pre_ping=True)
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001
        pytest.fail(
            f"no MySQL/MariaDB answers at {base.render_as_string()}: {error}. Set "
            "QUARTZLITE_TEST_DATABASE_URL, start a Docker engine, or run `make db` "
            "(the tests need a real server and never skip without one)",
            pytrace=False,
        )
    migrate.upgrade(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    admin.dispose()


@pytest.fixture
def db_url(database_url: str) -> str:
    """The session's database with every table emptied (lock rows kept)."""
    from quartzlite.storage.tables import (
        audit,
        calendars,
        deliveries,
        events,
        jobs,
        locks,
        requests,
        runs,
        sessions,
        tokens,
        ui_sessions,
        webhooks,
    )

    engine = create_engine(database_url)
    with engine.begin() as conn:
        for table in (runs, jobs, requests, sessions, ui_sessions, tokens, audit, calendars,
                      deliveries, events, webhooks):
            conn.execute(delete(table))
        conn.execute(update(locks).values(version=0))
    engine.dispose()
    return database_url


@pytest.fixture
def client(db_url: str) -> Iterator[object]:
    from quartzlite.client import SchedulerClient

    c = SchedulerClient(db_url)
    yield c
    checked_out = c.db.checked_out()
    c.close()
    assert checked_out == 0, f"{checked_out} connection(s) still checked out"
