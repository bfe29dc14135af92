"""Alembic environment. Migrations spell their columns out and never import the
package's tables; this file only needs a URL (from the Config, or the environment)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config

url = (
    config.attributes.get("database_url")
    or config.get_main_option("sqlalchemy.url")
    or os.environ.get("QUARTZLITE_DATABASE_URL")
    or "mysql+pymysql://root@127.0.0.1:3306/quartzlite"
)

VERSION_TABLE = "ql_alembic_version"


def run_migrations_offline() -> None:
    context.configure(url=url, literal_binds=True, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(
        url, poolclass=pool.NullPool, connect_args={"init_command": "SET time_zone='+00:00'"}
    )
    with engine.connect() as conn:
        context.configure(connection=conn, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
