"""Exclusion calendars: ql_calendars, and the calendars a job names (ql_jobs.calendars)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

``ql_calendars``: named calendars (unique name), each with a timezone, a description
and its rules as a JSON object (``dates``, ``yearly``, ``ranges``, ``windows``). A slot
of a job that falls in a time one of its calendars excludes is skipped: never fired,
never recorded missed.

``ql_jobs.calendars``: the names of the job's calendars, sorted and comma-joined
(as ``tags``); jobs stored before this revision get '' (no calendar) and behave as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "ql_calendars",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.String(1024), nullable=False, server_default=sa.text("''")),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("rules", sa.Text, nullable=False),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.Column("updated_at", DATETIME(fsp=6), nullable=False),
        sa.UniqueConstraint("name", name="uq_ql_calendars_name"),
        **TABLE_ARGS,
    )
    op.add_column(
        "ql_jobs",
        sa.Column("calendars", sa.String(1040), nullable=False, server_default=sa.text("''")),
    )


def downgrade() -> None:
    op.drop_column("ql_jobs", "calendars")
    op.drop_table("ql_calendars")
