"""Dependencies: ql_jobs.upstream, upstream_on, has_downstream; ql_requests.planned_at,
taken_at; ql_runs.upstream_run_id

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

``ql_jobs.upstream``: the names of the jobs whose runs trigger this one, sorted and
comma-joined (as ``calendars``); ``upstream_on``: how their slot must end (success,
failure or completion); ``has_downstream``: some live job names this one upstream (the
results transaction looks for downstream jobs only then). Jobs stored before this
revision get '' (none), 'success' and 0: they behave as before.

``ql_requests.planned_at``: the instant the requested slot runs at (an upstream
request: the upstream run's planned instant); ``taken_at``: when a scan made the slot its
job's next fire, NULL while it waits (index ``ix_ql_requests_pending``). The requests
stored before this revision are triggers', which were taken when written: they get
``taken_at = created_at``.

``ql_runs.upstream_run_id``: the upstream run whose end triggered the run's slot;
runs stored before this revision get NULL (none).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ql_jobs",
        sa.Column("upstream", sa.String(1040), nullable=False, server_default=sa.text("''")),
    )
    op.add_column(
        "ql_jobs",
        sa.Column("upstream_on", sa.String(16), nullable=False,
                  server_default=sa.text("'success'")),
    )
    op.add_column(
        "ql_jobs",
        sa.Column("has_downstream", sa.Boolean, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("ix_ql_jobs_upstream", "ql_jobs", ["upstream"], mysql_length=64)
    op.add_column("ql_requests", sa.Column("planned_at", DATETIME(fsp=6), nullable=True))
    op.add_column("ql_requests", sa.Column("taken_at", DATETIME(fsp=6), nullable=True))
    op.execute("UPDATE ql_requests SET taken_at = created_at")
    op.create_index("ix_ql_requests_pending", "ql_requests", ["taken_at", "job_id", "id"])
    op.add_column("ql_runs", sa.Column("upstream_run_id", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.drop_column("ql_runs", "upstream_run_id")
    op.drop_index("ix_ql_requests_pending", table_name="ql_requests")
    op.drop_column("ql_requests", "taken_at")
    op.drop_column("ql_requests", "planned_at")
    op.drop_index("ix_ql_jobs_upstream", table_name="ql_jobs")
    op.drop_column("ql_jobs", "has_downstream")
    op.drop_column("ql_jobs", "upstream_on")
    op.drop_column("ql_jobs", "upstream")
