"""Sessions: register, heartbeat (with the database clock), the watch query, delete."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.engine import Connection

from quartzlite.clock import utc
from quartzlite.enums import DeliveryStatus, JobState
from quartzlite.storage import lanes, rows
from quartzlite.storage.dependencies import pending_due
from quartzlite.storage.engine import RetryPolicy, Tx, server_of
from quartzlite.storage.jobs import db_now
from quartzlite.storage.node.base import (
    Beat,
    StoreBase,
    Watch,
)
from quartzlite.storage.tables import deliveries, events, jobs, locks, sessions

log = logging.getLogger("quartzlite.storage.node")


class Sessions(StoreBase):
    def register(
        self, *, session_id: str, host: str, pid: int, capacity: int, tags: Sequence[str],
        version: str,
    ) -> datetime:
        def tx(t: Tx) -> datetime:
            now = db_now(t.conn)
            t.conn.execute(
                insert(sessions).prefix_with("IGNORE").values(
                    id=session_id, host=host[:255], pid=pid, started_at=rows.to_db(now),
                    heartbeat_at=rows.to_db(now), capacity=capacity, tags=rows.join_tags(tags),
                    version=version, db_member=server_of(t.conn.connection.dbapi_connection),
                )
            )
            return now

        return self.db.transaction(tx, name="register_session", stop=self.stop)

    def heartbeat(
        self, session_id: str, clock_offset_ms: float, local_now: Callable[[], datetime]
    ) -> Beat:
        """Renew our session by the database clock, in ONE autocommitted statement
        that touches no row but our own: it must never wait on a scheduler lock.

        ``LAST_INSERT_ID(expr)`` hands ``expr`` back in the statement's OK packet, so
        the same UPDATE also reports the database clock (microseconds since the
        epoch). 0 rows matched: peers expired us.
        """
        statement = text(
            "UPDATE ql_sessions SET heartbeat_at = NOW(6), clock_offset_ms = :offset, "
            "db_member = :member, "
            "capacity = capacity + 0 * LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)) "
            "WHERE id = :me"
        )

        def run(conn: Connection) -> Beat:
            before = local_now()
            member = server_of(conn.connection.dbapi_connection)
            result = conn.execute(
                statement, {"offset": clock_offset_ms, "member": member, "me": session_id})
            after = local_now()
            micros = int(result.lastrowid or 0)
            alive = result.rowcount > 0
            return Beat(
                alive=alive,
                db_now=datetime.fromtimestamp(micros / 1e6, UTC) if alive and micros else None,
                local_mid=before + (after - before) / 2,
            )

        return self.db.read(run, retry=RetryPolicy(deadline_s=0), name="heartbeat")

    def watch(self, session_id: str, tag_sets: Sequence[str]) -> Watch:
        """One autocommitted SELECT (a consistent read: it never waits on a lock), every
        poll interval: the oldest peer heartbeat, orphaned and owned job counts, the
        earliest due job this node may run, and the job lock's version (management writes
        move it: the node then reads the calendars again), and when the webhooks thread
        has work. Every part is an index lookup: the cost does not grow with the
        number of jobs."""
        peers = (
            select(func.min(sessions.c.heartbeat_at))
            .where(sessions.c.id != session_id)
            .scalar_subquery()
        )
        orphans = (
            select(func.count())
            .select_from(jobs.outerjoin(sessions, sessions.c.id == jobs.c.owner_session))
            .where(jobs.c.owner_session.is_not(None), sessions.c.id.is_(None))
            .scalar_subquery()
        )
        # Whether a broadcast lane is left pinned to a node that is gone (the expirer
        # forgets them): one row at most, however many lanes there are.
        orphan_lanes = select(func.count()).select_from(
            lanes.orphan_lanes().limit(1).subquery()).scalar_subquery()
        owned = (
            select(func.count())
            .select_from(jobs)
            .where(jobs.c.owner_session == session_id, jobs.c.state != JobState.IDLE.value)
            .scalar_subquery()
        )
        earliest = select(func.min(jobs.c.next_fire_at)).where(*self._due_filter(tag_sets, session_id)).scalar_subquery()
        # A request an upstream job's end left for a job this node may run, and may take
        # now (ix_ql_requests_pending): the scanner is due at once (it takes them).
        pending = pending_due(tag_sets)
        version = select(locks.c.version).where(locks.c.name == "job").scalar_subquery()
        # Webhooks: the earliest pending delivery (ix_ql_deliveries_due) and whether an
        # event waits for its fan-out (ix_ql_events_fan_out): one index dive each.
        delivery_due = (
            select(func.min(deliveries.c.next_attempt_at))
            .where(deliveries.c.status == DeliveryStatus.PENDING.value)
            .scalar_subquery()
        )
        unfanned = select(func.min(events.c.id)).where(events.c.fanned_out.is_(False)).scalar_subquery()
        query = select(func.now(6), peers, orphans + orphan_lanes, owned, earliest, version,
                       delivery_due, unfanned, pending)

        def run(conn: Connection) -> Watch:
            now, oldest, orphaned, mine, due, moved, delivery, fan_out, waiting = (
                conn.execute(query).one()
            )
            webhooks_due = now if fan_out is not None else delivery
            if waiting is not None and (due is None or waiting < due):
                due = waiting
            return Watch(
                db_now=utc(now),
                oldest_peer_heartbeat=None if oldest is None else utc(oldest),
                orphaned_jobs=int(orphaned or 0), owned_jobs=int(mine or 0),
                earliest_due=None if due is None else utc(due),
                jobs_version=int(moved or 0),
                webhooks_due=None if webhooks_due is None else utc(webhooks_due),
            )

        return self.db.read(run, retry=RetryPolicy(deadline_s=0), name="watch")

    def delete_session(self, session_id: str) -> bool:
        """Delete our session unless it still owns jobs (then peers must recover them)."""

        def tx(t: Tx) -> bool:
            self.lock(t.conn, "session")
            self.lock(t.conn, "job")
            still_owned = t.conn.execute(
                select(func.count()).select_from(jobs).where(jobs.c.owner_session == session_id)
            ).scalar_one()
            if still_owned:
                return False
            t.conn.execute(delete(sessions).where(sessions.c.id == session_id))
            # Our broadcast lanes: a shard given to us and not run is missed.
            lanes.forget_pinned(t.conn, db_now(t.conn), self.node_name, [session_id])
            return True

        return self.db.transaction(tx, name="delete_session", stop=self.stop)
