"""Audit source: ql_audit.source

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

Every change is audited, whichever way it came: ``source`` says which (``api``: the
HTTP API, ``ui``: the dashboard, ``cli``: the ``quartzlite`` command, ``library``:
:class:`quartzlite.client.SchedulerClient` used from Python). Entries stored before this
revision were all made through the API (the dashboard's ones are ``ui.*`` actions) and
get ``api``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ql_audit",
        sa.Column("source", sa.String(16), nullable=False, server_default=sa.text("'api'")),
    )
    # Newest first within a source (the ``source`` filter of the audit listing).
    op.create_index("ix_ql_audit_source", "ql_audit", ["source", "id"])


def downgrade() -> None:
    op.drop_index("ix_ql_audit_source", table_name="ql_audit")
    op.drop_column("ql_audit", "source")
