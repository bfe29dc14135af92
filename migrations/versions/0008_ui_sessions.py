"""Dashboard sessions: ql_ui_sessions; ix_ql_runs_planned covers started_at

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

``ql_ui_sessions``: one row per signed-in browser of the dashboard (/ui). The cookie
carries a random secret; the row's id is its sha256 (hex), ``token_hash`` is the
signed-in API token's (a session ends when its token is revoked), ``csrf`` the form
token, and ``created_at``/``seen_at`` the instants that absolute and idle expiry are
measured from.

``ix_ql_runs_planned`` becomes (planned_at, started_at): the dashboard's chart of the
last hours reads lateness from the index alone (an online index rebuild on InnoDB).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "ql_ui_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("client_address", sa.String(64), nullable=True),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.Column("seen_at", DATETIME(fsp=6), nullable=False),
        sa.Index("ix_ql_ui_sessions_token", "token_hash"),
        sa.Index("ix_ql_ui_sessions_seen", "seen_at"),
        **TABLE_ARGS,
    )
    op.drop_index("ix_ql_runs_planned", table_name="ql_runs")
    op.create_index("ix_ql_runs_planned", "ql_runs", ["planned_at", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_ql_runs_planned", table_name="ql_runs")
    op.create_index("ix_ql_runs_planned", "ql_runs", ["planned_at"])
    op.drop_table("ql_ui_sessions")
