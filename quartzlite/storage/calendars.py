"""Exclusion calendars: the management writes and reads of ``ql_calendars``.

Every write takes the job lock first (bumping its version: the nodes' watch sees that
and reads the calendars again), as job writes do, so a calendar cannot be deleted while
a job write that names it is deciding, and a job write sees the calendars as they are.
Each method is one transaction: on any error nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.errors import Conflict, NotFound
from quartzlite.models import Calendar
from quartzlite.storage import rows
from quartzlite.storage.engine import Database, Tx
from quartzlite.storage.jobs import db_now, read_all, read_named, take_job_lock
from quartzlite.storage.tables import calendars, jobs


class CalendarStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- reads -------------------------------------------------------------------

    def get(self, name: str) -> Calendar:
        with self.db.connect() as conn:
            row = self._find(conn, name)
        if row is None:
            raise NotFound(f"no calendar named {name!r}", details={"calendar": name})
        return rows.calendar_from_row(row)

    def all(self) -> list[Calendar]:
        with self.db.connect() as conn:
            return read_all(conn)

    def named(self, names: Sequence[str], *, field: str = "calendars") -> list[Calendar]:
        with self.db.connect() as conn:
            return read_named(conn, names, field=field)

    # -- writes ------------------------------------------------------------------

    def add(self, calendar: Calendar) -> Calendar:
        def tx(t: Tx) -> Calendar:
            take_job_lock(t.conn)
            existing = self._find(t.conn, calendar.name, lock=True)
            if existing is not None:
                if t.after_unknown and _same(rows.calendar_from_row(existing), calendar):
                    return rows.calendar_from_row(existing)  # our own earlier commit
                raise Conflict(
                    f"a calendar named {calendar.name!r} exists", details={"calendar": calendar.name}
                )
            return self._insert(t.conn, calendar)

        return self.db.transaction(tx, name="add_calendar")

    def upsert(self, calendar: Calendar) -> tuple[Calendar, bool, bool]:
        """Create or replace by name: (calendar, changed, created). The same definition
        twice changes nothing (not even updated_at). Replacing plans no job anew: the
        nodes use the new rules from their next plan of each job."""

        def tx(t: Tx) -> tuple[Calendar, bool, bool]:
            take_job_lock(t.conn)
            existing = self._find(t.conn, calendar.name, lock=True)
            if existing is None:
                return self._insert(t.conn, calendar), True, True
            if _same(rows.calendar_from_row(existing), calendar):
                return rows.calendar_from_row(existing), False, False
            t.conn.execute(
                update(calendars).where(calendars.c.id == existing["id"]).values(
                    **rows.calendar_values(calendar), updated_at=func.now(6),
                )
            )
            row = self._find(t.conn, calendar.name)
            assert row is not None
            return rows.calendar_from_row(row), True, False

        return self.db.transaction(tx, name="put_calendar")

    def delete(self, name: str) -> Calendar:
        """Delete a calendar no job uses; :class:`Conflict` naming the jobs that do."""

        def tx(t: Tx) -> Calendar:
            take_job_lock(t.conn)
            existing = self._find(t.conn, name, lock=True)
            if existing is None:
                raise NotFound(f"no calendar named {name!r}", details={"calendar": name})
            users = [
                r[0] for r in t.conn.execute(
                    select(jobs.c.name)
                    .where(jobs.c.deleted.is_(False), jobs.c.parent_id.is_(None),
                           func.find_in_set(name, jobs.c.calendars) > 0)
                    .order_by(jobs.c.name)
                    .limit(21)
                )
            ]
            if users:
                shown = ", ".join(users[:20]) + (", ..." if len(users) > 20 else "")
                raise Conflict(
                    f"calendar {name!r} is used by job(s) {shown}: take it off them first",
                    details={"calendar": name, "jobs": users[:20]},
                )
            t.conn.execute(delete(calendars).where(calendars.c.id == existing["id"]))
            return rows.calendar_from_row(existing)

        return self.db.transaction(tx, name="delete_calendar")

    # -- helpers -----------------------------------------------------------------

    @staticmethod
    def _find(conn: Connection, name: str, *, lock: bool = False) -> RowMapping | None:
        query = select(calendars).where(calendars.c.name == name)
        return conn.execute(query.with_for_update() if lock else query).mappings().first()

    def _insert(self, conn: Connection, calendar: Calendar) -> Calendar:
        now = rows.to_db(db_now(conn))
        conn.execute(
            calendars.insert().values(**rows.calendar_values(calendar), created_at=now, updated_at=now)
        )
        row = self._find(conn, calendar.name)
        assert row is not None
        return rows.calendar_from_row(row)


def _same(stored: Calendar, wanted: Calendar) -> bool:
    """The same definition (the stamps aside)."""
    return (stored.timezone, stored.description, stored.rules) == (
        wanted.timezone, wanted.description, wanted.rules
    )


__all__ = ["CalendarStore", "read_all", "read_named"]
