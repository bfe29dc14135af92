"""Jobs have bounds and jitter: ql_jobs.start_at, end_at, max_runs, jitter_s, runs_done

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

``start_at`` / ``end_at``: no slot before / after them fires (NULL: no bound).
``max_runs``: the job runs at most this many slots (NULL: no limit), counted in
``runs_done`` (a slot counts once its final outcome is recorded and the job moves on).
``jitter_s``: each slot is planned at the slot plus a stable offset in [0, jitter_s].

Jobs stored before this revision get no bounds, no jitter (0) and a count of 0: they
behave as before. The counter starts at this revision (runs recorded before it are not
counted).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = ("start_at", "end_at", "max_runs", "jitter_s", "runs_done")


def upgrade() -> None:
    op.add_column("ql_jobs", sa.Column("start_at", mysql.DATETIME(fsp=6), nullable=True))
    op.add_column("ql_jobs", sa.Column("end_at", mysql.DATETIME(fsp=6), nullable=True))
    op.add_column("ql_jobs", sa.Column("max_runs", sa.Integer, nullable=True))
    op.add_column(
        "ql_jobs",
        sa.Column("jitter_s", mysql.DOUBLE(asdecimal=False), nullable=False,
                  server_default=sa.text("0")),
    )
    op.add_column(
        "ql_jobs", sa.Column("runs_done", sa.Integer, nullable=False, server_default=sa.text("0"))
    )


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.drop_column("ql_jobs", name)
