"""Schema management through alembic: upgrade, current revision, the at-head check."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, exc, pool, select, text
from sqlalchemy.engine import make_url

from quartzlite.config import database_hosts
from quartzlite.errors import SchemaError, StoreError
from quartzlite.storage.engine import Database
from quartzlite.storage.tables import LOCK_NAMES, locks

VERSION_TABLE = "ql_alembic_version"


def migrations_dir() -> Path:
    """The alembic environment: inside the installed package, else the checkout's."""
    try:
        module = importlib.import_module("quartzlite._migrations")
    except ImportError:
        module = None
    if module is not None and module.__file__ is not None:
        return Path(module.__file__).resolve().parent
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config(stdout=io.StringIO())
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["database_url"] = database_url
    return config


def head_revision() -> str:
    script = ScriptDirectory.from_config(alembic_config("mysql+pymysql://"))
    head = script.get_current_head()
    if head is None:
        raise SchemaError("no migrations found")
    return head


def ensure_database(database_url: str) -> bool:
    """Create the URL's database (utf8mb4) when it does not exist; True if created."""
    url = make_url(database_url)
    name = url.database
    if not name:
        raise StoreError("the database URL names no database")
    engine = create_engine(url.set(database=""), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :n"),
                {"n": name},
            ).first()
            if exists:
                return False
            quoted = name.replace("`", "``")
            conn.execute(
                text(f"CREATE DATABASE `{quoted}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            )
            return True
    except exc.DBAPIError as error:
        raise StoreError(f"cannot reach the database server: {error.orig}") from error
    finally:
        engine.dispose()


def one_server(database_url: str) -> str:
    """The URL with its host list (several members of one cluster) narrowed to the first
    member that answers and may serve: schema changes run on one of them."""
    single, hosts = database_hosts(database_url)
    if len(hosts) == 1:
        return database_url
    # Without the database part: upgrade creates the database when it does not exist.
    db = Database(urlunsplit(urlsplit(database_url)._replace(path="/")))
    try:
        with db.auto.connect():
            pass
    except exc.DBAPIError as error:
        raise StoreError(f"no server of the host list answers: {error.orig}") from error
    finally:
        db.dispose()
    member = db.member
    assert member is not None
    host = f"[{member.host}]" if ":" in member.host else member.host
    parts = urlsplit(single)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}:{member.port}"))


def upgrade(database_url: str, revision: str = "head") -> None:
    database_url = one_server(database_url)
    ensure_database(database_url)
    try:
        command.upgrade(alembic_config(database_url), revision)
    except exc.DBAPIError as error:
        raise StoreError(f"migration failed: {error.orig}") from error
    except CommandError as error:  # e.g. an unknown revision, given or in the database
        raise SchemaError(f"cannot upgrade to {revision}: {error}") from error


def downgrade(database_url: str, revision: str) -> None:
    database_url = one_server(database_url)
    try:
        command.downgrade(alembic_config(database_url), revision)
    except exc.DBAPIError as error:
        raise StoreError(f"migration failed: {error.orig}") from error
    except CommandError as error:
        raise SchemaError(f"cannot downgrade to {revision}: {error}") from error


def current_revision(db: Database) -> str | None:
    with db.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def check_ready(db: Database) -> None:
    """Refuse to run on a schema that is not at head or lacks a lock row."""
    current = current_revision(db)
    head = head_revision()
    if current != head:
        raise SchemaError(
            f"the database schema is at {current or 'nothing'}, not at {head}: "
            "run `quartzlite db upgrade`"
        )
    with db.connect() as conn:
        present = {row[0] for row in conn.execute(select(locks.c.name))}
    missing = [name for name in LOCK_NAMES if name not in present]
    if missing:
        raise SchemaError(
            f"lock row(s) {', '.join(missing)} missing from ql_locks: without them there is "
            "no mutual exclusion; run `quartzlite db upgrade` or restore the rows"
        )
