"""initial schema: locks, sessions, jobs, runs

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME, DOUBLE, MEDIUMTEXT

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def instant(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, DATETIME(fsp=6), nullable=nullable)


def double(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, DOUBLE(asdecimal=False), nullable=nullable)


def upgrade() -> None:
    locks = op.create_table(
        "ql_locks",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        **TABLE_ARGS,
    )
    op.bulk_insert(locks, [{"name": "job", "version": 0}, {"name": "session", "version": 0}])

    op.create_table(
        "ql_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        instant("started_at", nullable=False),
        instant("heartbeat_at", nullable=False),
        sa.Column("clock_offset_ms", DOUBLE(asdecimal=False), nullable=False, server_default=sa.text("0")),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("tags", sa.String(512), nullable=False, server_default=sa.text("''")),
        sa.Column("version", sa.String(32), nullable=False, server_default=sa.text("''")),
        **TABLE_ARGS,
    )
    op.create_index("ix_ql_sessions_heartbeat", "ql_sessions", ["heartbeat_at"])

    op.create_table(
        "ql_jobs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("active_name", sa.String(128), nullable=True),
        sa.Column("schedule", sa.String(255), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("command", sa.Text, nullable=True),
        sa.Column("callable", sa.String(255), nullable=True),
        sa.Column("kwargs", sa.Text, nullable=False),
        double("timeout_s", nullable=True),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        double("retry_backoff_s"),
        double("retry_max_backoff_s"),
        sa.Column("misfire_policy", sa.String(16), nullable=False),
        double("misfire_grace_s"),
        sa.Column("recovery_policy", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("tags", sa.String(512), nullable=False, server_default=sa.text("''")),
        sa.Column("description", sa.String(1024), nullable=False, server_default=sa.text("''")),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.text("0")),
        sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.text("0")),
        sa.Column("state", sa.String(16), nullable=False),
        instant("next_fire_at"),
        instant("next_slot_at"),
        sa.Column("next_attempt", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("owner_session", sa.String(64), nullable=True),
        sa.Column("fire_id", sa.String(96), nullable=True),
        sa.Column("kill_requested", sa.Boolean, nullable=False, server_default=sa.text("0")),
        instant("prepared_at"),
        instant("started_at"),
        instant("last_ended_at"),
        instant("created_at", nullable=False),
        instant("updated_at", nullable=False),
        sa.UniqueConstraint("active_name", name="uq_ql_jobs_active_name"),
        **TABLE_ARGS,
    )
    op.create_index("ix_ql_jobs_due", "ql_jobs", ["state", "paused", "deleted", "next_fire_at"])
    op.create_index("ix_ql_jobs_owner", "ql_jobs", ["owner_session", "state"])
    op.create_index("ix_ql_jobs_name", "ql_jobs", ["name"])

    op.create_table(
        "ql_runs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("job_name", sa.String(128), nullable=False),
        sa.Column("fire_id", sa.String(96), nullable=True),
        instant("planned_at", nullable=False),
        instant("slot_at", nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default=sa.text("1")),
        instant("started_at"),
        instant("ended_at"),
        sa.Column("session_id", sa.String(64), nullable=True),
        sa.Column("node", sa.String(255), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("output", MEDIUMTEXT, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("job_id", "planned_at", name="uq_ql_runs_job_planned"),
        **TABLE_ARGS,
    )
    op.create_index("ix_ql_runs_job_name", "ql_runs", ["job_name", "id"])
    op.create_index("ix_ql_runs_status", "ql_runs", ["status", "planned_at"])
    op.create_index("ix_ql_runs_session", "ql_runs", ["session_id", "status"])
    op.create_index("ix_ql_runs_planned", "ql_runs", ["planned_at"])


def downgrade() -> None:
    op.drop_table("ql_runs")
    op.drop_table("ql_jobs")
    op.drop_table("ql_sessions")
    op.drop_table("ql_locks")
