"""The dashboard's SQL: its sign-in sessions, and the overview's reads.

Sessions: the cookie's secret never reaches this module, only its sha256. A session is
valid while a token with its ``token_hash`` exists (revoking the token ends it), it was
seen within the idle timeout and created within the absolute one, both by the database
clock. ``seen_at`` is written at most once a minute per session, not on every request.

The overview reads only through indexes, each with a LIMIT or a bounded range, so that
its cost does not grow with the size of the history (docs/benchmarks.md measures it with
100,000 jobs and 1,000,000 runs).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.models import (
    ActivityMinute,
    ExpiredNode,
    Overview,
    Run,
    RunningRun,
    UiSession,
)
from quartzlite.storage import rows
from quartzlite.storage.auth import token_from_row
from quartzlite.storage.engine import Database, Tx
from quartzlite.storage.jobs import JobStore
from quartzlite.storage.tables import jobs, runs, tokens, ui_sessions

#: ``seen_at`` is refreshed when older than this (seconds): one write a minute at most.
TOUCH_EVERY_S = 60
#: Expired sessions deleted per sign-in (the rest go at the next ones).
PRUNE_BATCH = 100
#: The run statuses the overview lists as the last problems.
PROBLEMS = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.ABANDONED)


class UiSessionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self, *, session_hash: str, token_hash: str, csrf: str, client_address: str | None,
        idle_s: float, max_s: float,
    ) -> None:
        """Insert a session (and delete a batch of expired ones)."""

        def tx(t: Tx) -> None:
            t.conn.execute(
                delete(ui_sessions)
                .where(_expired(idle_s, max_s))
                .with_dialect_options(mysql_limit=PRUNE_BATCH)
            )
            if t.after_unknown and t.conn.execute(
                select(ui_sessions.c.id).where(ui_sessions.c.id == session_hash)
            ).first():
                return  # our own earlier commit
            t.conn.execute(
                ui_sessions.insert().values(
                    id=session_hash, token_hash=token_hash, csrf=csrf,
                    client_address=None if client_address is None else client_address[:64],
                    created_at=func.now(6), seen_at=func.now(6),
                )
            )

        self.db.transaction(tx, name="create_ui_session")

    def find(self, session_hash: str, *, idle_s: float, max_s: float) -> UiSession | None:
        """The live session with this hash and its token, refreshing ``seen_at`` when it
        is over a minute old; None when there is none, it expired or its token is gone."""
        query = (
            select(
                tokens, ui_sessions.c.csrf, ui_sessions.c.created_at.label("session_created_at"),
                (ui_sessions.c.seen_at < func.now(6) - text(f"INTERVAL {TOUCH_EVERY_S} SECOND"))
                .label("stale"),
            )
            .select_from(ui_sessions.join(tokens, tokens.c.token_hash == ui_sessions.c.token_hash))
            .where(ui_sessions.c.id == session_hash, ~_expired(idle_s, max_s))
        )
        with self.db.connect() as conn:
            row = conn.execute(query).mappings().first()
            if row is None:
                return None
            if row["stale"]:
                conn.execute(
                    update(ui_sessions).where(ui_sessions.c.id == session_hash)
                    .values(seen_at=func.now(6))
                )
        return UiSession(
            token=token_from_row(row), csrf=row["csrf"], created_at=utc(row["session_created_at"])
        )

    def delete(self, session_hash: str) -> None:
        with self.db.connect() as conn:
            conn.execute(delete(ui_sessions).where(ui_sessions.c.id == session_hash))


def _expired(idle_s: float, max_s: float) -> ColumnElement[bool]:
    return (
        (ui_sessions.c.seen_at < func.now(6) - text(f"INTERVAL {int(idle_s)} SECOND"))
        | (ui_sessions.c.created_at < func.now(6) - text(f"INTERVAL {int(max_s)} SECOND"))
    )


class DashboardStore:
    """The overview page's reads, in one snapshot."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def overview(
        self, *, limit: int = 10, running_limit: int = 100, activity_minutes: int = 180,
    ) -> Overview:
        with self.db.snapshot() as conn:
            now = utc(conn.execute(select(func.now(6))).scalar_one())
            hour_ago = rows.to_db(now - timedelta(hours=1))
            problems: list[Run] = []
            for status in PROBLEMS:  # one backward range of ix_ql_runs_status each
                problems += self._runs(conn, runs.c.status == status.value, limit)
            problems.sort(key=lambda r: r.planned_at, reverse=True)
            missed_recent = and_(runs.c.status == RunStatus.MISSED.value, runs.c.planned_at >= hour_ago)
            missed_count = conn.execute(
                select(func.count()).select_from(runs).where(missed_recent)
            ).scalar_one()
            return Overview(
                now=now,
                sessions=JobStore.sessions_in(conn),
                running=self._running(conn, running_limit),
                problems=problems[:limit],
                missed=self._runs(conn, missed_recent, limit),
                missed_count=int(missed_count),
                expired=self._expired_nodes(conn, hour_ago),
                activity=self._activity(conn, now, activity_minutes) if activity_minutes else [],
            )

    @staticmethod
    def _runs(conn: Connection, where: ColumnElement[bool], limit: int) -> list[Run]:
        query = select(runs).where(where).order_by(runs.c.planned_at.desc()).limit(limit)
        return [rows.run_from_row(r) for r in conn.execute(query).mappings()]

    @staticmethod
    def _running(conn: Connection, limit: int) -> list[RunningRun]:
        """Runs executing now (ix_ql_runs_status), with their job row's start."""
        query = (
            select(runs, jobs.c.started_at.label("job_started_at"), jobs.c.kill_requested)
            .select_from(
                runs.outerjoin(
                    jobs,
                    and_(jobs.c.id == runs.c.job_id, jobs.c.fire_id == runs.c.fire_id,
                         jobs.c.state == JobState.EXECUTING.value),
                )
            )
            .where(runs.c.status == RunStatus.RUNNING.value)
            .order_by(runs.c.planned_at)
            .limit(limit)
        )
        found = []
        for r in conn.execute(query).mappings():
            started = r["job_started_at"]
            found.append(RunningRun(
                run=rows.run_from_row(r), started_at=None if started is None else utc(started),
                kill_requested=bool(r["kill_requested"]),
            ))
        return found

    @staticmethod
    def _expired_nodes(conn: Connection, since: datetime | None) -> list[ExpiredNode]:
        """Nodes that left runs abandoned in the last hour (a session that expired with
        nothing running leaves no trace here)."""
        query = (
            select(runs.c.node, func.max(runs.c.ended_at), func.count())
            .where(runs.c.status == RunStatus.ABANDONED.value, runs.c.planned_at >= since)
            .group_by(runs.c.node)
            .order_by(func.max(runs.c.ended_at).desc())
            .limit(20)
        )
        return [
            ExpiredNode(node=node or "?", at=utc(at), abandoned=int(count))
            for node, at, count in conn.execute(query)
            if at is not None
        ]

    @staticmethod
    def _activity(conn: Connection, now: datetime, minutes: int) -> list[ActivityMinute]:
        """Per minute of the last ``minutes``: runs planned in it that started, those late
        by over a second, mean and largest lateness: a range of the covering index
        ix_ql_runs_planned (planned_at, started_at), read without touching the rows, so
        its cost follows the runs planned in the window, not the history's size."""
        start = (now - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
        late_us = func.timestampdiff(text("MICROSECOND"), runs.c.planned_at, runs.c.started_at)
        minute = func.timestampdiff(text("MINUTE"), rows.to_db(start), runs.c.planned_at)
        query = (
            select(
                minute.label("m"), func.count(), func.sum(late_us > 1_000_000),
                func.avg(late_us), func.max(late_us),
            )
            .where(runs.c.planned_at >= rows.to_db(start), runs.c.started_at.is_not(None))
            .group_by(text("m"))
        )
        found = {int(m): (int(n), int(late or 0), avg, top) for m, n, late, avg, top in conn.execute(query)}
        out = []
        for i in range(minutes):
            n, late, avg, top = found.get(i, (0, 0, None, None))
            out.append(ActivityMinute(
                start=start + timedelta(minutes=i), fires=n, late=late,
                mean_ms=None if avg is None else max(float(avg), 0.0) / 1000,
                max_ms=None if top is None else max(float(top), 0.0) / 1000,
            ))
        return out
