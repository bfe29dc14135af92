"""Jobs quarantined by the scheduler: ql_jobs.error says why

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Set when a node could not plan the job (its schedule or stored definition fails):
    # the job is paused instead of stopping the node; resuming or updating it clears it.
    op.add_column("ql_jobs", sa.Column("error", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("ql_jobs", "error")
