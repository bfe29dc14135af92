"""Scanning: idle -> prepared for the due jobs this node may run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.clock import utc
from quartzlite.enums import JobState
from quartzlite.errors import Fenced
from quartzlite.models import JobSpec, Prepared, Shard
from quartzlite.storage import lanes, rows, transitions
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


@dataclass(frozen=True, slots=True, kw_only=True)
class _Slot:
    """A concurrent or broadcast job's due slot, found by the scan, for its lanes."""

    row: RowMapping
    spec: JobSpec
    planned_at: datetime
    slot_at: datetime
    attempt: int


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
                .where(*self._due_filter(tag_sets, session_id), jobs.c.next_fire_at <= rows.to_db(horizon))
                .order_by(jobs.c.priority.desc(), jobs.c.next_fire_at)
                .limit(limit)
            ).mappings().all()
            specs, poisoned = self._specs_of(t.conn, found)
            self._fresh_calendars(t.conn, planner, specs.values())
            result: list[Prepared] = []
            # Concurrent and broadcast jobs' due slots, for their lanes (below).
            slots: list[_Slot] = []
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
                if row["parent_id"] is None and spec.lanes:
                    slots.append(_Slot(row=row, spec=spec, planned_at=planned_at,
                                       slot_at=slot_at, attempt=attempt))
                    continue
                result.append(
                    Prepared(
                        job_id=row["id"], name=spec.name, fire_id=f"{fire_prefix}{row['id']}",
                        planned_at=planned_at, slot_at=slot_at, attempt=attempt, spec=spec,
                        parent_id=row["parent_id"],
                        shard=rows.shard_of(row["shard"], row["shard_total"]),
                    )
                )
            if moved:
                self._reschedule(t.conn, moved)
            if slots:
                result.extend(self._assign(t.conn, slots, session_id=session_id,
                                           fire_prefix=fire_prefix, now=now, planner=planner,
                                           missed=missed, poisoned=poisoned))
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
                    *self._due_filter(tag_sets, session_id), jobs.c.next_fire_at > rows.to_db(horizon)
                )
            ).scalar()
            return Scan(
                prepared=result, next_due=None if next_due is None else utc(next_due), db_now=now
            )

        return self.db.transaction(tx, name="prepare_due", stop=self.stop)

    def _assign(
        self, conn: Connection, slots: Sequence[_Slot], *, session_id: str, fire_prefix: str,
        now: datetime, planner: Planner, missed: list[dict[str, Any]],
        poisoned: list[tuple[RowMapping, BaseException]],
    ) -> list[Prepared]:
        """Give each due slot of a concurrent or broadcast job to its lanes (see
        :mod:`quartzlite.storage.lanes`) and move the job on to its next slot; a job whose
        lanes are all busy (a broadcast job: any) is saturated instead, its slot waiting.
        Returns the lanes this node prepares now: a concurrent job's, and a broadcast
        job's lane pinned to us (the other nodes' lanes wait for their own scans).

        Under the job lock, the jobs' rows locked first, then their lanes' (the order of
        every lane writer), so that a lane freed meanwhile is seen free."""
        ids = [s.row["id"] for s in slots]
        conn.execute(select(jobs.c.id).where(jobs.c.id.in_(ids)).order_by(jobs.c.id)
                     .with_for_update())
        by_job = lanes.lanes_of(conn, ids, lock=True)
        live = conn.execute(
            select(sessions.c.id, sessions.c.tags).order_by(sessions.c.started_at, sessions.c.id)
        ).all() if any(s.spec.broadcast for s in slots) else []
        ours: list[Prepared] = []
        saturated: list[int] = []
        for s in slots:
            job_id = s.row["id"]
            found = by_job[job_id]
            taken = [lane for lane in found if lanes.busy(lane)]
            if s.spec.broadcast:
                wanted = set(s.spec.tags)
                nodes = [sid for sid, tags in live if wanted <= set(rows.split_tags(tags))]
                if taken:
                    saturated.append(job_id)
                    continue
                if not nodes:
                    continue  # (we match its tags, so never: no node to give it to yet)
                free = {lane["pinned_session"]: lane["id"] for lane in found}
                given = [(free.pop(sid, None) or lanes.create(conn, job_id, sid, now), sid)
                         for sid in nodes]
                if free:
                    # Lanes of nodes that left or no longer match: not needed.
                    conn.execute(delete(jobs).where(jobs.c.id.in_(list(free.values())),
                                                    jobs.c.state == JobState.IDLE.value,
                                                    jobs.c.next_fire_at.is_(None)))
            else:
                if len(taken) >= s.spec.max_concurrency:
                    saturated.append(job_id)
                    continue
                idle = [lane["id"] for lane in found
                        if not lanes.busy(lane) and lane["pinned_session"] is None]
                given = [(idle[0] if idle else lanes.create(conn, job_id, None, now), None)]
            try:
                plan = planner.assigned(s.spec, s.slot_at, now, s.row["runs_done"])
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                poisoned.append((s.row, error))
                continue
            total = len(given) if s.spec.broadcast else None
            for index, (lane_id, pinned) in enumerate(given):
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == lane_id, jobs.c.state == JobState.IDLE.value,
                           jobs.c.next_fire_at.is_(None))
                    .values(next_fire_at=rows.to_db(s.planned_at),
                            next_slot_at=rows.to_db(s.slot_at), next_attempt=s.attempt,
                            shard=None if total is None else index, shard_total=total)
                )
                # Another node's lane: its watch finds it due (the earliest due job it
                # may run) and wakes its scanner.
                if pinned is None or pinned == session_id:
                    ours.append(Prepared(
                        job_id=lane_id, name=s.spec.name, fire_id=f"{fire_prefix}{lane_id}",
                        planned_at=s.planned_at, slot_at=s.slot_at, attempt=s.attempt,
                        spec=s.spec, parent_id=job_id,
                        shard=None if total is None else Shard(index=index, total=total),
                    ))
            missed.extend(self._missed_rows(job_id, s.spec.name, plan))
            full = s.spec.broadcast or len(taken) + 1 >= s.spec.max_concurrency
            conn.execute(
                update(jobs).where(jobs.c.id == job_id).values(
                    **self._next_values(plan), saturated=full,
                    runs_done=s.row["runs_done"] + (1 if plan.counted else 0),
                    lanes_version=jobs.c.lanes_version + 1,
                )
            )
        if saturated:
            conn.execute(update(jobs).where(jobs.c.id.in_(saturated)).values(saturated=True))
        return ours

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
