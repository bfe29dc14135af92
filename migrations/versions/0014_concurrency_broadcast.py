"""Concurrency and broadcast: ql_jobs.max_concurrency, broadcast, parent_id,
pinned_session, shard, shard_total, saturated, lanes_version; ql_runs.shard, shard_total

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

``ql_jobs.max_concurrency`` (1: one run at a time, as before) and ``broadcast`` (0) are
the job's; ``parent_id``, ``pinned_session``, ``shard`` and ``shard_total`` are set on
lanes only (hidden rows that run a concurrent or broadcast job's slots); ``saturated``
marks a job whose lanes are all busy, and ``lanes_version`` moves with each slot given to
or freed by a lane. Jobs stored before this revision get 1, 0, NULL
and 0: they behave as before.

``ql_runs.shard`` joins the UNIQUE key of a run: (job_id, planned_at, shard). Runs stored
before this revision get 0, so the key still allows one run per slot for them. The key
is rebuilt (one ALTER TABLE of ql_runs: on a large history, run it in a quiet moment).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ql_jobs",
        sa.Column("max_concurrency", sa.Integer, nullable=False, server_default=sa.text("1")),
    )
    op.add_column(
        "ql_jobs",
        sa.Column("broadcast", sa.Boolean, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("ql_jobs", sa.Column("parent_id", sa.BigInteger, nullable=True))
    op.add_column("ql_jobs", sa.Column("pinned_session", sa.String(64), nullable=True))
    op.add_column("ql_jobs", sa.Column("shard", sa.Integer, nullable=True))
    op.add_column("ql_jobs", sa.Column("shard_total", sa.Integer, nullable=True))
    op.add_column(
        "ql_jobs",
        sa.Column("saturated", sa.Boolean, nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "ql_jobs",
        sa.Column("lanes_version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("ix_ql_jobs_parent", "ql_jobs", ["parent_id", "state"])
    op.add_column(
        "ql_runs", sa.Column("shard", sa.Integer, nullable=False, server_default=sa.text("0"))
    )
    op.add_column("ql_runs", sa.Column("shard_total", sa.Integer, nullable=True))
    # One statement: the key is never missing, not even for a moment.
    op.execute(
        "ALTER TABLE ql_runs DROP INDEX uq_ql_runs_job_planned, "
        "ADD CONSTRAINT uq_ql_runs_job_planned UNIQUE (job_id, planned_at, shard)"
    )


def downgrade() -> None:
    # Broadcast runs (more than one per slot) cannot survive the old key: they go.
    op.execute("DELETE FROM ql_runs WHERE shard <> 0")
    op.execute(
        "ALTER TABLE ql_runs DROP INDEX uq_ql_runs_job_planned, "
        "ADD CONSTRAINT uq_ql_runs_job_planned UNIQUE (job_id, planned_at)"
    )
    op.drop_column("ql_runs", "shard_total")
    op.drop_column("ql_runs", "shard")
    op.execute("DELETE FROM ql_jobs WHERE parent_id IS NOT NULL")
    op.drop_index("ix_ql_jobs_parent", table_name="ql_jobs")
    for column in ("lanes_version", "saturated", "shard_total", "shard", "pinned_session", "parent_id",
                   "broadcast", "max_concurrency"):
        op.drop_column("ql_jobs", column)
