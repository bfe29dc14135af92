"""Recovery: hand back, kill requests, compensation and the expiry of dead sessions."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.models import Prepared
from quartzlite.storage import lanes, rows, transitions
from quartzlite.storage.dependencies import EndedSlot, ends_slot, request_downstream
from quartzlite.storage.engine import Tx
from quartzlite.storage.jobs import db_now
from quartzlite.storage.node.base import (
    SPEC_COLUMNS,
    Owned,
    Planner,
    StoreBase,
)
from quartzlite.storage.tables import jobs, runs, sessions
from quartzlite.storage.webhooks import record_node_expired, record_run_events

log = logging.getLogger("quartzlite.storage.node")


class Recovery(StoreBase):
    def hand_back(self, session_id: str, job_ids: Sequence[int] | None = None) -> int:
        """prepared -> idle for our prepared jobs (all, or these), so peers take them
        at their next watch."""

        def tx(t: Tx) -> int:
            self.lock(t.conn, "job")
            where = [jobs.c.owner_session == session_id]
            if job_ids is not None:
                where.append(jobs.c.id.in_(list(job_ids)))
            return transitions.hand_back(t.conn, *where)

        return self.db.transaction(tx, name="hand_back", stop=self.stop)

    def kill_requests(self, session_id: str) -> list[tuple[int, str]]:
        """Our executing jobs with a kill request (a consistent read via the owner index)."""
        with self.db.connect() as conn:
            return [
                (r[0], r[1])
                for r in conn.execute(
                    select(jobs.c.id, jobs.c.fire_id).where(
                        jobs.c.owner_session == session_id,
                        jobs.c.state == JobState.EXECUTING.value,
                        jobs.c.kill_requested.is_(True),
                    )
                )
            ]

    def owned(self, session_id: str) -> list[Owned]:
        with self.db.connect() as conn:
            return [
                Owned(job_id=r[0], state=JobState(r[1]), fire_id=r[2])
                for r in conn.execute(
                    select(jobs.c.id, jobs.c.state, jobs.c.fire_id).where(
                        jobs.c.owner_session == session_id,
                        jobs.c.state != JobState.IDLE.value,
                    )
                )
            ]

    def compensate(
        self,
        *,
        session_id: str,
        in_memory: set[tuple[int, str]],
        planner: Planner,
    ) -> tuple[list[Prepared], int]:
        """Put right what the database says we own but memory does not know (a commit
        of unknown outcome): a prepared job is adopted into memory (we own it and its
        fire id); an executing one never started here, so its run is closed as
        abandoned and the job follows its recovery policy."""

        def tx(t: Tx) -> tuple[list[Prepared], int]:
            self.lock(t.conn, "job")
            now = db_now(t.conn)
            found = t.conn.execute(
                select(*SPEC_COLUMNS)
                .where(jobs.c.owner_session == session_id, jobs.c.state != JobState.IDLE.value)
                .order_by(jobs.c.id)
                .with_for_update()  # a result may be in flight (it takes row locks only)
            ).mappings().all()
            strays = [r for r in found if (r["id"], r["fire_id"]) not in in_memory]
            adopted = [
                self._prepared_from_row(r) for r in strays if r["state"] == JobState.PREPARED.value
            ]
            executing = [r for r in strays if r["state"] == JobState.EXECUTING.value]
            if executing:
                self._recover(
                    t.conn, executing, now, planner,
                    reason="the node's commit of this fire had an unknown outcome; never started",
                )
            return adopted, len(executing)

        return self.db.transaction(tx, name="compensate", stop=self.stop)

    def expire_sessions(
        self, *, session_id: str, session_timeout_s: float, planner: Planner
    ) -> list[str]:
        """Under the session lock, then the job lock: sessions silent for longer than
        the timeout (database clock) are deleted; their prepared jobs are handed back,
        their executing runs closed as abandoned and recovered per policy."""
        with self.db.connect() as conn:
            hint = conn.execute(
                select(sessions.c.id)
                .where(
                    sessions.c.heartbeat_at
                    < func.timestampadd(text("MICROSECOND"), -int(session_timeout_s * 1e6), func.now(6)),
                    sessions.c.id != session_id,
                )
                .limit(1)
                .union_all(self._orphan_owners().limit(1), lanes.orphan_lanes().limit(1))
            ).first()
        if hint is None:
            return []

        def tx(t: Tx) -> list[str]:
            self.lock(t.conn, "session")
            self.lock(t.conn, "job")
            now = db_now(t.conn)
            cutoff = now - timedelta(seconds=session_timeout_s)
            expired = t.conn.execute(
                select(sessions).where(
                    sessions.c.heartbeat_at < rows.to_db(cutoff), sessions.c.id != session_id
                )
            ).mappings().all()
            dead = [r["id"] for r in expired]
            # Jobs owned by a session row that no longer exists (deleted by hand, say)
            # are recovered the same way.
            dead += [r[0] for r in t.conn.execute(self._orphan_owners().limit(100))]
            if not dead:
                # Only broadcast lanes left by a node that is gone (its session deleted).
                lanes.forget_pinned(t.conn, now, self.node_name)
                return []
            # Locked as read: a result of the expired node may be on its way (results
            # take row locks, not the job lock). It either committed before this read
            # (the job is idle, nothing to recover) or waits until we commit.
            owned = t.conn.execute(
                select(*SPEC_COLUMNS)
                .where(jobs.c.owner_session.in_(dead), jobs.c.state != JobState.IDLE.value)
                .order_by(jobs.c.id)
                .with_for_update()
            ).mappings().all()
            prepared = [r["id"] for r in owned if r["state"] == JobState.PREPARED.value]
            if prepared:
                transitions.hand_back(t.conn, jobs.c.id.in_(prepared))
            executing = [r for r in owned if r["state"] == JobState.EXECUTING.value]
            if executing:
                self._recover(t.conn, executing, now, planner, reason="its node's session expired")
            # node.expired, in this transaction (a retry finds the sessions gone).
            record_node_expired(
                t.conn, expired,
                abandoned=Counter(r["owner_session"] for r in executing),
                handed_back=Counter(r["owner_session"] for r in owned
                                    if r["state"] == JobState.PREPARED.value),
            )
            t.conn.execute(delete(sessions).where(sessions.c.id.in_(dead)))
            # Their broadcast lanes (each now idle): a shard given and not run is missed.
            lanes.forget_pinned(t.conn, now, self.node_name, dead)
            log.warning(
                "expired %d session(s) %s: %d prepared job(s) handed back, %d run(s) abandoned",
                len(dead), ", ".join(dead), len(prepared), len(executing),
                extra={"action": "sessions_expired"},
            )
            return dead

        return self.db.transaction(tx, name="expire_sessions", stop=self.stop)

    def _recover(
        self, conn: Connection, executing: Sequence[RowMapping], now: datetime, planner: Planner,
        *, reason: str,
    ) -> None:
        """Close the running runs of these executing jobs as abandoned, then move each
        job on per its recovery policy (rerun the slot, or skip to the next). A slot the
        job moves on from ended abandoned: its downstream jobs that run on failure or
        completion are requested, in this transaction."""
        poisoned: list[tuple[RowMapping, BaseException]] = []
        abandoned: list[int] = []
        all_missed: list[dict[str, Any]] = []
        ended: list[EndedSlot] = []
        freed: list[int] = []
        released: set[int] = set()
        for row in executing:
            try:
                spec = rows.spec_from_row(row)
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                poisoned.append((row, error))
                continue
            run = conn.execute(
                select(runs.c.id, runs.c.slot_at, runs.c.attempt, runs.c.planned_at,
                       runs.c.params).where(
                    runs.c.job_id == (row["parent_id"] or row["id"]),  # a lane's: its job's
                    runs.c.fire_id == row["fire_id"],
                ).limit(1)
            ).first()
            slot_at = utc(run.slot_at) if run is not None else utc(row["next_slot_at"] or now)
            attempt = run.attempt if run is not None else row["next_attempt"]
            if run is not None:
                conn.execute(
                    update(runs)
                    .where(runs.c.id == run.id, runs.c.status == RunStatus.RUNNING.value)
                    .values(
                        status=RunStatus.ABANDONED.value, ended_at=rows.to_db(now),
                        error=f"abandoned: {reason}; recovery policy {spec.recovery_policy.value}",
                    )
                )
                abandoned.append(run.id)
            try:
                self._fresh_calendars(conn, planner, [spec])
                plan = planner.recover(spec, slot_at, attempt, now, row["runs_done"])
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                poisoned.append((row, error))
                continue
            has_downstream = row["has_downstream"]
            runs_done = row["runs_done"] + (1 if plan.counted else 0)
            if row["parent_id"] is not None:
                # A lane: a concurrent job's reruns its slot as its policy says; else (and
                # always a broadcast lane: its node is gone) it is free. Its job counts.
                plan = lanes.lane_plan(plan, slot_at, may_rerun=not row["broadcast"])
                runs_done = row["runs_done"]
                has_downstream = conn.execute(
                    select(jobs.c.has_downstream).where(jobs.c.id == row["parent_id"])
                ).scalar()
                if plan.planned_at is None:
                    freed.append(row["id"])
                    released.add(row["parent_id"])
            missed = self._missed_rows(row["id"], spec.name, plan)
            if missed:
                conn.execute(insert(runs).prefix_with("IGNORE"), missed)
                all_missed.extend(missed)
            if run is not None and has_downstream and ends_slot(
                slot_at, plan.slot_at, plan.planned_at
            ):
                ended.append(EndedSlot(job_name=spec.name, run_id=run.id, slot_at=slot_at,
                                       planned_at=utc(run.planned_at),
                                       status=RunStatus.ABANDONED, params=run.params,
                                       job_id=row["parent_id"] or row["id"]))
            transitions.abandon(conn, job_id=row["id"], fire_id=row["fire_id"],
                                planned_at=plan.planned_at, slot_at=plan.slot_at, attempt=plan.attempt,
                                runs_done=runs_done)
        # run.abandoned and run.missed, in this transaction (one statement).
        record_run_events(conn, run_ids=abandoned, missed=all_missed)
        request_downstream(conn, ended, now)
        self._quarantine(conn, poisoned, now)
        lanes.release(conn, released, freed)
