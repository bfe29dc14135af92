"""Webhooks: ql_webhooks, ql_events (the outbox), ql_deliveries, ql_jobs.last_outcome

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24

``ql_events``: the outbox. The transaction that makes an event happen (a run recorded
failed, timed out, abandoned or missed, a run recovered after a failure, a node's
session expired) writes its row; UNIQUE (run_id, type) keeps one per run and type.
Every node's webhooks thread fans new events out (``fanned_out``) into
``ql_deliveries``, one per matching subscription (UNIQUE (webhook_id, event_id)), and
delivers them at least once, with retries. ``ql_webhooks.secret`` is kept as it is: it
signs every delivery.

``ql_jobs.last_outcome``: the status of the job's last run that ended with a known
outcome (succeeded, failed, timed_out, killed), set by the results transaction in the
same statement that moves the job on: a success after failed or timed_out is
``run.recovered``. Rows stored before this revision get NULL (unknown).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.add_column("ql_jobs", sa.Column("last_outcome", sa.String(16), nullable=True))
    op.create_table(
        "ql_webhooks",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.String(255), nullable=False),
        sa.Column("job_prefix", sa.String(128), nullable=True),
        sa.Column("tag", sa.String(32), nullable=True),
        sa.Column("secret", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("1")),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.UniqueConstraint("name", name="uq_ql_webhooks_name"),
        **TABLE_ARGS,
    )
    op.create_table(
        "ql_events",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("occurred_at", DATETIME(fsp=6), nullable=False),
        sa.Column("job_id", sa.BigInteger, nullable=True),
        sa.Column("job_name", sa.String(128), nullable=True),
        sa.Column("run_id", sa.BigInteger, nullable=True),
        sa.Column("payload", sa.Text, nullable=True),
        sa.Column("fanned_out", sa.Boolean, nullable=False, server_default=sa.text("0")),
        sa.UniqueConstraint("run_id", "type", name="uq_ql_events_run_type"),
        sa.Index("ix_ql_events_fan_out", "fanned_out", "id"),
        sa.Index("ix_ql_events_occurred", "occurred_at"),
        **TABLE_ARGS,
    )
    op.create_table(
        "ql_deliveries",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("webhook_id", sa.BigInteger, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", DATETIME(fsp=6), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("claim_until", DATETIME(fsp=6), nullable=True),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("delivered_at", DATETIME(fsp=6), nullable=True),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.UniqueConstraint("webhook_id", "event_id", name="uq_ql_deliveries_webhook_event"),
        sa.Index("ix_ql_deliveries_due", "status", "next_attempt_at"),
        sa.Index("ix_ql_deliveries_event", "event_id"),
        **TABLE_ARGS,
    )


def downgrade() -> None:
    op.drop_table("ql_deliveries")
    op.drop_table("ql_events")
    op.drop_table("ql_webhooks")
    op.drop_column("ql_jobs", "last_outcome")
