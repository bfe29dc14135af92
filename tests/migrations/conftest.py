"""Migration tests get databases of their own (never the shared session database)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

#: new_database(create=True) -> the URL of a uniquely named database, dropped at teardown.
NewDatabase = Callable[..., str]


@pytest.fixture
def new_database(server_url: str) -> Iterator[NewDatabase]:
    """A factory of uniquely named databases on the test server.

    ``create=False`` only reserves the name (for code under test that creates the
    database itself); ``charset`` / ``collation`` are the database's defaults (the
    server's when None). Every database handed out is dropped at teardown.
    """
    base = make_url(server_url).set(drivername="mysql+pymysql", database="")
    admin = create_engine(base, poolclass=pool.NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001
        pytest.fail(f"no MySQL/MariaDB answers at {base.render_as_string()}: {error}", pytrace=False)
    names: list[str] = []

    def make(
        *, create: bool = True, charset: str | None = None, collation: str | None = None
    ) -> str:
        name = f"ql_mig_{uuid.uuid4().hex[:12]}"
        names.append(name)
        if create:
            options = ""
            if charset:
                options += f" CHARACTER SET {charset}"
            if collation:
                options += f" COLLATE {collation}"
            with admin.connect() as conn:
                conn.execute(text(f"CREATE DATABASE `{name}`{options}"))
        return base.set(database=name).render_as_string(hide_password=False)

    try:
        yield make
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()
