"""Scanning: idle -> prepared for the due jobs this node may run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from quartzlite.clock import utc
from quartzlite.enums import JobState
from quartzlite.errors import Fenced
from quartzlite.models import Prepared
from quartzlite.storage import rows, transitions
from quartzlite.storage.dependencies import take_requests
from quartzlite.storage.engine import Tx
from quartzlite.storage.jobs import db_now
from quartzlite.storage.node.base import (
    SCAN_COLUMNS,
    SPEC_COLUMNS,
    Planner,
    Scan,
    StoreBase,
)
from quartzlite.storage.tables import jobs, runs, sessions
from quartzlite.storage.webhooks import record_run_events

log = logging.getLogger("quartzlite.storage.node")


class Scanning(StoreBase):
    def prepare_due(
        self,
        *,
        session_id: str,
        fire_prefix: str,
        limit: int,
        tag_sets: Sequence[str],
        look_ahead_s: float,
        planner: Planner,
    ) -> Scan:
        """idle -> prepared for the jobs due within the look-ahead that we may run,
        highest priority first, then earliest. Fire ids are ``fire_prefix + job id``."""

        def tx(t: Tx) -> Scan:
            self.lock(t.conn, "job")
            # Expiry deletes sessions only while holding the job lock, which we hold:
            # if our row exists now, it exists until we commit.
            if t.conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first() is None:
                raise Fenced("our session is gone: peers expired it")
            now = db_now(t.conn)
            horizon = now + timedelta(seconds=look_ahead_s)
            # Slots requested by upstream jobs' ends become their jobs' next fire (one
            # indexed probe when none waits): the due query below prepares them.
            take_requests(t.conn, tag_sets, limit)
            found = t.conn.execute(
                select(*SCAN_COLUMNS)
                .where(*self._due_filter(tag_sets), jobs.c.next_fire_at <= rows.to_db(horizon))
                .order_by(jobs.c.priority.desc(), jobs.c.next_fire_at)
                .limit(limit)
            ).mappings().all()
            specs, poisoned = self._specs_of(t.conn, found)
            self._fresh_calendars(t.conn, planner, specs.values())
            result: list[Prepared] = []
            moved: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            for row in found:
                spec = specs.get(row["id"])
                if spec is None:
                    continue  # poisoned
                try:
                    planned_at = utc(row["next_fire_at"])
                    slot_at = utc(row["next_slot_at"] or row["next_fire_at"])
                    attempt = row["next_attempt"]
                    plan = None
                    if attempt == 1:
                        # A slot a calendar excludes (replaced since the slot was planned)
                        # is skipped, not run nor missed; else a late one misfires.
                        plan = planner.excluded(spec, slot_at, now)
                        if plan is None and planned_at < now - timedelta(seconds=spec.misfire_grace_s):
                            plan = planner.misfire(spec, slot_at, now, planned_at)
                            if (plan.planned_at, plan.slot_at, plan.missed) == (planned_at, slot_at, ()):
                                plan = None  # fires as planned, however late (@manual)
                    if plan is not None:
                        missed.extend(self._missed_rows(row["id"], spec.name, plan))
                        moved.append(self._reschedule_values(row["id"], plan))
                        if plan.planned_at is None or plan.planned_at > horizon or plan.slot_at is None:
                            continue
                        planned_at, slot_at, attempt = plan.planned_at, plan.slot_at, plan.attempt
                except Exception as error:  # noqa: BLE001 - one job never stops a node
                    poisoned.append((row, error))
                    continue
                result.append(
                    Prepared(
                        job_id=row["id"], name=spec.name, fire_id=f"{fire_prefix}{row['id']}",
                        planned_at=planned_at, slot_at=slot_at, attempt=attempt, spec=spec,
                    )
                )
            if moved:
                self._reschedule(t.conn, moved)
            if missed:
                t.conn.execute(insert(runs).prefix_with("IGNORE"), missed)
                record_run_events(t.conn, missed=missed)  # run.missed, in this transaction
            self._quarantine(t.conn, poisoned, now)
            if result:
                transitions.prepare(t.conn, job_ids=[p.job_id for p in result],
                                    session_id=session_id, fire_prefix=fire_prefix)
            if t.after_unknown:
                result.extend(self._adopt(t.conn, session_id, fire_prefix, result))
            next_due = t.conn.execute(
                select(func.min(jobs.c.next_fire_at)).where(
                    *self._due_filter(tag_sets), jobs.c.next_fire_at > rows.to_db(horizon)
                )
            ).scalar()
            return Scan(
                prepared=result, next_due=None if next_due is None else utc(next_due), db_now=now
            )

        return self.db.transaction(tx, name="prepare_due", stop=self.stop)

    def _adopt(
        self, conn: Connection, session_id: str, fire_prefix: str, have: list[Prepared]
    ) -> list[Prepared]:
        """After a prepare commit of unknown outcome: the rows it did prepare."""
        known = {p.job_id for p in have}
        found = conn.execute(
            select(*SPEC_COLUMNS).where(
                jobs.c.owner_session == session_id,
                jobs.c.state == JobState.PREPARED.value,
                jobs.c.fire_id.like(fire_prefix.replace("%", r"\%").replace("_", r"\_") + "%"),
            )
        ).mappings().all()
        return [self._prepared_from_row(r) for r in found if r["id"] not in known]
