"""Jobs say what to do with the slots that came due while their own run ran: ql_jobs.overrun_policy

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

``skip``: those slots are recorded ``missed`` (the reason says overrun) and the job goes
on at its next slot after the run; ``catch_up``: they are left to the misfire policy, as
before this revision (the slots within the misfire grace run late, back to back).

Jobs stored before this revision keep the behaviour they had: their rows get
``catch_up`` (the column's server default while it is added). New jobs created through
the library, the CLI or the API default to ``skip`` (``JobSpec.overrun_policy``); the
column keeps no server default, as the other policy columns: every write names it.
Re-publishing a stored job's whole definition (``job put``, ``PUT /jobs/{name}``)
without the field gives it the new default; a partial change (``job update``,
``PATCH``) keeps it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ql_jobs",
        sa.Column("overrun_policy", sa.String(16), nullable=False, server_default="catch_up"),
    )
    # The default only filled the existing rows; from here on every write names the field.
    op.alter_column(
        "ql_jobs", "overrun_policy", existing_type=sa.String(16), existing_nullable=False,
        server_default=None,
    )


def downgrade() -> None:
    op.drop_column("ql_jobs", "overrun_policy")
