"""Firing: prepared -> executing with the run rows, and the start check at the instant."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import and_, func, insert, literal, select
from sqlalchemy.engine import Connection

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.models import Fired, Prepared
from quartzlite.storage import lanes, rows, transitions
from quartzlite.storage.engine import RetryPolicy, Tx
from quartzlite.storage.jobs import db_now
from quartzlite.storage.node.base import (
    FIRE_COLUMNS,
    Planner,
    StartCheck,
    StoreBase,
)
from quartzlite.storage.tables import jobs, requests, runs

log = logging.getLogger("quartzlite.storage.node")

#: A fire id that may be written into a statement as it is (see ``start_check``).
_PLAIN = re.compile(r"[0-9A-Za-z:._-]*")


class Firing(StoreBase):
    def fire(
        self, *, session_id: str, items: Sequence[Prepared], planner: Planner,
        ahead_s: float = 0.0,
    ) -> tuple[list[Fired], list[int]]:
        """prepared -> executing plus a running run row, for everything due within
        ``ahead_s`` of now, in one transaction. Re-checks owner, fire id, paused and
        deleted under the job lock. Returns the fired runs and the ids of the jobs this
        node no longer owns; an item not yet that close by the database clock is neither
        (it stays prepared), whatever our clock estimate says. A run row has no
        ``started_at`` until its result records when it did start."""

        def tx(t: Tx) -> tuple[list[Fired], list[int]]:
            self.lock(t.conn, "job")
            now = db_now(t.conn)
            horizon = now + timedelta(seconds=ahead_s)
            due = [p for p in items if p.planned_at <= horizon]  # the rest stay prepared
            if not due:
                return [], []
            # The common case in one set-based statement: every job still ours, still
            # prepared under the same fire id, not paused, not deleted.
            moved = transitions.fire(t.conn, job_ids=[p.job_id for p in due],
                                     fire_ids=[p.fire_id for p in due], session_id=session_id,
                                     now=now)
            to_fire, lost = (due, []) if moved == len(due) else self._sort_out(t.conn, due, session_id)
            if not to_fire:
                return [], lost
            self._insert_runs(t.conn, to_fire, session_id)
            fired, duplicates = self._match_runs(t.conn, to_fire, now)
            self._refuse_duplicates(t.conn, duplicates, planner, now)
            return fired, lost + [p.job_id for p in duplicates]

        return self.db.transaction(tx, name="fire", stop=self.stop)

    def _sort_out(
        self, conn: Connection, due: Sequence[Prepared], session_id: str
    ) -> tuple[list[Prepared], list[int]]:
        """Not every due job moved to executing: which ones did (an earlier attempt of
        this transaction may have committed them), and which this node lost (taken
        over, or paused or deleted meanwhile: those are handed back)."""
        current = {
            r["id"]: r
            for r in conn.execute(
                select(*FIRE_COLUMNS).where(jobs.c.id.in_([p.job_id for p in due]))
            ).mappings()
        }
        to_fire: list[Prepared] = []
        lost: list[int] = []
        give_back: list[int] = []
        for item in due:
            row = current.get(item.job_id)
            if row is None or row["owner_session"] != session_id or row["fire_id"] != item.fire_id:
                lost.append(item.job_id)
            elif row["state"] == JobState.EXECUTING.value:
                to_fire.append(item)
            else:
                lost.append(item.job_id)
                if row["state"] == JobState.PREPARED.value and (row["paused"] or row["deleted"]):
                    give_back.append(item.job_id)
        if give_back:
            transitions.hand_back(conn, jobs.c.id.in_(give_back))
        return to_fire, lost

    def _insert_runs(self, conn: Connection, to_fire: Sequence[Prepared], session_id: str) -> None:
        """The run rows, copied server-side from the job rows (which hold the planned
        instant, slot and attempt): nothing per row crosses the wire. IGNORE: the UNIQUE
        (job_id, planned_at) key refuses a second run of a slot (:meth:`_match_runs`
        sees whose row it is). No started_at: the run has not started (it may never);
        its result writes when it did. The slot's request, if any (a trigger with
        parameters), is joined on (job_id, slot_at) through its UNIQUE key: its params go
        into the row of every attempt of the slot, at no extra statement, and so does
        the upstream run whose end requested the slot (dependencies)."""
        slot_at = func.coalesce(jobs.c.next_slot_at, jobs.c.next_fire_at)
        # A lane's runs are its job's (see quartzlite.storage.lanes), and so is the
        # slot's request.
        job_id = func.coalesce(jobs.c.parent_id, jobs.c.id)
        source = select(
            job_id, jobs.c.name, jobs.c.fire_id, jobs.c.next_fire_at, slot_at,
            jobs.c.next_attempt, literal(session_id), literal(self.node_name),
            literal(RunStatus.RUNNING.value), requests.c.params, requests.c.upstream_run_id,
            func.coalesce(jobs.c.shard, 0), jobs.c.shard_total,
        ).select_from(
            jobs.outerjoin(requests, and_(requests.c.job_id == job_id,
                                          requests.c.slot_at == slot_at))
        ).where(
            jobs.c.id.in_([p.job_id for p in to_fire]),
            jobs.c.fire_id.in_([p.fire_id for p in to_fire]),
            jobs.c.state == JobState.EXECUTING.value,
        )
        conn.execute(
            insert(runs).prefix_with("IGNORE").from_select(
                ["job_id", "job_name", "fire_id", "planned_at", "slot_at", "attempt",
                 "session_id", "node", "status", "params", "upstream_run_id", "shard",
                 "shard_total"],
                source,
            )
        )

    @staticmethod
    def _match_runs(
        conn: Connection, to_fire: Sequence[Prepared], now: datetime
    ) -> tuple[list[Fired], list[Prepared]]:
        """Each fired job's run row: ours (fired, with the slot's parameters), or another
        fire's (a duplicate slot)."""
        stored = {
            (r["job_id"], utc(r["planned_at"]), r["shard"]): r
            for r in conn.execute(
                select(runs.c.id, runs.c.job_id, runs.c.planned_at, runs.c.fire_id,
                       runs.c.params, runs.c.shard).where(
                    runs.c.job_id.in_({p.run_job_id for p in to_fire}),
                    runs.c.planned_at.in_({rows.to_db(p.planned_at) for p in to_fire}),
                )
            ).mappings()
        }
        fired: list[Fired] = []
        duplicates: list[Prepared] = []
        for p in to_fire:
            run = stored.get((p.run_job_id, p.planned_at, 0 if p.shard is None else p.shard.index))
            if run is None or run["fire_id"] != p.fire_id:
                duplicates.append(p)
            else:
                params = run["params"]
                fired.append(Fired(prepared=p, run_id=run["id"], fired_at=now,
                                   params=None if params is None else rows.params_from_db(params)))
        return fired, duplicates

    def _refuse_duplicates(
        self, conn: Connection, duplicates: Sequence[Prepared], planner: Planner, now: datetime
    ) -> None:
        """The slot already has a run (the UNIQUE key refused ours): never run it again;
        move the job on to its next slot."""
        freed: list[int] = []
        for p in duplicates:
            log.warning(
                "slot %s of job %s already ran; skipping it", p.planned_at.isoformat(), p.name,
                extra={"action": "duplicate_refused", "job": p.name},
            )
            if p.parent_id is not None:
                # A lane: free again (its job plans the slots).
                transitions.refuse_duplicate(conn, job_id=p.job_id, fire_id=p.fire_id,
                                             planned_at=None, slot_at=None, attempt=1)
                freed.append(p.parent_id)
                continue
            try:
                # The slot of a first attempt (its planned instant may carry jitter); a
                # retry's own instant, as before.
                after = p.slot_at if p.attempt == 1 else p.planned_at
                self._fresh_calendars(conn, planner, [p.spec])
                plan = planner.skip(p.spec, after, now)
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                self._quarantine_ids(conn, [(p.job_id, p.name, p.fire_id, error)], now)
                continue
            transitions.refuse_duplicate(
                conn, job_id=p.job_id, fire_id=p.fire_id, planned_at=plan.planned_at,
                slot_at=plan.slot_at, attempt=plan.attempt,
            )
        lanes.release(conn, freed, [p.job_id for p in duplicates])

    def start_check(self, session_id: str, items: Sequence[Prepared]) -> StartCheck:
        """At the instant of runs fired ahead of it: the database clock, and those whose
        job was paused, deleted or asked to die since (or is no longer this fire of
        ours). One autocommitted consistent read that locks nothing and returns only
        the exceptions (usually none)."""
        # Straight to the driver, the lists written out: it runs at the instant, on
        # every start's path, and SQLAlchemy's rendering of 2,000 ids and fire ids cost
        # ~8 ms of CPU there (~1.5 ms this way). Ids are ints; fire ids are the node's own
        # (hex session id, batch and job numbers), bound like any value if ever not.
        ids = ",".join(str(int(p.job_id)) for p in items) or "NULL"  # none: just the clock
        fire_ids = [p.fire_id for p in items]
        params: tuple[str, ...] = (JobState.EXECUTING.value, session_id)
        if all(_PLAIN.fullmatch(f) for f in fire_ids):
            marks = ",".join(f"'{f}'" for f in fire_ids) or "NULL"
        else:
            marks = ",".join("%s" for _ in fire_ids)
            params += tuple(fire_ids)
        sql = (
            "SELECT NOW(6), j.id, j.state, j.owner_session, j.fire_id, j.paused, j.deleted,"
            " j.kill_requested FROM (SELECT 1 AS one) AS anchor LEFT OUTER JOIN ql_jobs AS j"
            f" ON j.id IN ({ids}) AND (j.paused IS true OR j.deleted IS true"
            " OR j.kill_requested IS true OR j.state != %s OR j.owner_session != %s"
            f" OR j.fire_id NOT IN ({marks}))"
        )
        by_job = {p.job_id: p.fire_id for p in items}

        def run(conn: Connection) -> StartCheck:
            found = conn.exec_driver_sql(sql, params).all()
            stopped: dict[int, str] = {}
            for _now, job_id, state, owner, fire_id, paused, deleted, kill in found:
                if job_id is None:
                    continue
                if (state != JobState.EXECUTING.value or owner != session_id
                        or fire_id != by_job.get(job_id)):
                    stopped[job_id] = "moved"
                elif kill:
                    stopped[job_id] = "kill"
                elif deleted:
                    stopped[job_id] = "deleted"
                elif paused:
                    stopped[job_id] = "paused"
            return StartCheck(db_now=utc(found[0][0]), stopped=stopped)

        return self.db.read(run, retry=RetryPolicy(deadline_s=0), name="start_check")
