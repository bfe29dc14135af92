"""Quartz expressions name one day field: the other is ``?``

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

A 6/7-field (Quartz) expression now follows Quartz 2.3.2, which refuses both day fields
given or both ``?``: one of day-of-month and day-of-week must be ``?``. Stored jobs
written before are rewritten where the meaning is certain: a ``*`` day field (which
restricted nothing) becomes ``?``, and ``?`` in both becomes ``*`` in day-of-month. A job
that restricts both day fields is left as it is; its node quarantines it (paused, with
the reason in its ``error``) until its schedule is fixed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def quartz_days(expression: str) -> str | None:
    """The expression with its day fields as Quartz wants them; None: leave it."""
    fields = expression.split()
    if len(fields) not in (6, 7):
        return None
    dom, dow = fields[3], fields[5]
    if dom == "?" and dow == "?":
        fields[3] = "*"
    elif dom != "?" and dow != "?":
        if dow == "*":
            fields[5] = "?"
        elif dom == "*":
            fields[3] = "?"
        else:
            return None
    else:
        return None
    return " ".join(fields)


def upgrade() -> None:
    conn = op.get_bind()
    jobs = sa.table("ql_jobs", sa.column("id", sa.BigInteger), sa.column("schedule", sa.String),
                    sa.column("updated_at", sa.DateTime))
    found = conn.execute(
        sa.select(jobs.c.id, jobs.c.schedule).where(sa.not_(jobs.c.schedule.like("@%")))
    ).all()
    for job_id, schedule in found:
        rewritten = quartz_days(schedule)
        if rewritten is not None:
            conn.execute(
                sa.update(jobs).where(jobs.c.id == job_id)
                .values(schedule=rewritten, updated_at=sa.func.now(6))
            )


def downgrade() -> None:
    # The rewritten expressions mean what they meant before: nothing to undo.
    pass
