"""The database member each node talks to: ql_sessions.db_member

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

A database URL may list several members of one cluster (Galera); each node's heartbeat
records the member (host:port) it reached, so that ``quartzlite cluster`` and the API show
which member each node uses. Sessions stored before this revision get ''.
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


def downgrade() -> None:
    op.drop_column("ql_sessions", "db_member")
