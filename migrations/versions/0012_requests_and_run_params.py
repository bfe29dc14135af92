"""Trigger requests and run parameters: ql_requests, ql_runs.params

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24

``ql_requests``: what a slot was asked for with, one row per (job, slot): a trigger with
parameters (``cause`` 'trigger'), later a dependency (``cause`` 'upstream', with the run
that triggered it in ``upstream_run_id``). Written by the transaction that makes the slot
due; the fire transaction joins it on (job_id, slot_at) and copies ``params`` (a JSON
object) into the slot's run rows, so every attempt of the slot has them.

``ql_runs.params``: the parameters a run was triggered with (a JSON object); runs stored
before this revision get NULL (none).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "ql_requests",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("slot_at", DATETIME(fsp=6), nullable=False),
        sa.Column("params", sa.Text, nullable=True),
        sa.Column("cause", sa.String(16), nullable=False),
        sa.Column("upstream_run_id", sa.BigInteger, nullable=True),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.UniqueConstraint("job_id", "slot_at", name="uq_ql_requests_job_slot"),
        sa.Index("ix_ql_requests_created", "created_at"),
        **TABLE_ARGS,
    )
    op.add_column("ql_runs", sa.Column("params", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("ql_runs", "params")
    op.drop_table("ql_requests")
