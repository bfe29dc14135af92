"""Database clusters: ql_sessions.db_member, ql_locks.seq

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

A database URL may list several members of one cluster (Galera); each node's heartbeat
records the member (host:port) it reached, so that ``quartzlite cluster`` and the API show
which member each node uses. Sessions stored before this revision get ''.

``ql_locks.seq``: on Galera a node taking a lock row also bumps it, so that two members'
holders conflict at certification (a row lock holds on one member only).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ql_sessions",
        sa.Column("db_member", sa.String(300), nullable=False, server_default=sa.text("''")),
    )
    op.add_column(
        "ql_locks", sa.Column("seq", sa.BigInteger, nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    op.drop_column("ql_locks", "seq")
    op.drop_column("ql_sessions", "db_member")
