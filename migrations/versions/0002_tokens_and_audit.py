"""API tokens and the audit trail of API writes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "ql_tokens",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        # sha256 (hex) of the secret; the secret itself is never stored.
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", DATETIME(fsp=6), nullable=False),
        sa.UniqueConstraint("name", name="uq_ql_tokens_name"),
        sa.UniqueConstraint("token_hash", name="uq_ql_tokens_hash"),
        **TABLE_ARGS,
    )

    op.create_table(
        "ql_audit",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("recorded_at", DATETIME(fsp=6), nullable=False),
        sa.Column("token_name", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=True),
        sa.Column("client_address", sa.String(64), nullable=True),
        sa.Column("details", sa.Text, nullable=False),
        **TABLE_ARGS,
    )
    op.create_index("ix_ql_audit_job_name", "ql_audit", ["job_name", "id"])
    op.create_index("ix_ql_audit_token_name", "ql_audit", ["token_name", "id"])
    op.create_index("ix_ql_audit_recorded", "ql_audit", ["recorded_at"])


def downgrade() -> None:
    op.drop_table("ql_audit")
    op.drop_table("ql_tokens")
