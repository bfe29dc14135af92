"""Results: executing -> idle with the run rows completed, in batches; journaled outcomes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.models import Finished, Fired, Prepared
from quartzlite.storage import lanes, rows, transitions
from quartzlite.storage.batch import update_from_rows
from quartzlite.storage.dependencies import EndedSlot, ends_slot, request_downstream
from quartzlite.storage.engine import RetryPolicy, Tx
from quartzlite.storage.jobs import db_now
from quartzlite.storage.node.base import (
    RESULT_COLUMNS,
    SPEC_COLUMNS,
    Completed,
    Planner,
    StoreBase,
)
from quartzlite.storage.tables import jobs, runs
from quartzlite.storage.webhooks import EVENT_STATUSES, record_run_events

log = logging.getLogger("quartzlite.storage.node")

#: Outcomes that say how a job's run went (``ql_jobs.last_outcome``); abandoned and
#: cancelled runs say nothing about the job, and keep the one before.
KNOWN_OUTCOMES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT,
                            RunStatus.KILLED})
#: A success after one of these is ``run.recovered``.
FAILURES = frozenset({RunStatus.FAILED.value, RunStatus.TIMED_OUT.value})


class Results(StoreBase):
    def complete(
        self, *, session_id: str, finished: Sequence[Finished], planner: Planner, stop: Any = None
    ) -> Completed:
        """executing -> idle and the run row completed, for a batch of results.
        Retried until the outcome is known; rows whose fire id moved on are left alone
        (we already recorded them, or we were evicted and a peer recovered them).

        Not under the job lock: under row locks on these jobs' own rows, taken by the
        first read (``FOR UPDATE``, in id order). Every job here is executing under one
        of our fire ids, and the only other writers of an executing job's row (expiry,
        compensation, and the client's pause, update, delete and kill) read it with
        ``FOR UPDATE`` under the job lock: whichever locks the row first decides, the
        other reads what it committed. Nothing here waits for the job lock while
        holding a row, so the two cannot deadlock; a node's results no longer queue
        behind every peer's prepare and fire (the job lock was the cluster's limit: at
        5,000 every-second jobs on 2 nodes it was held all the time)."""

        def tx(t: Tx) -> Completed:
            now = db_now(t.conn)
            # A lane's job row is locked with it, first (its id is lower): a lane freed
            # here may release its job (see quartzlite.storage.lanes).
            locked = {f.fired.prepared.job_id for f in finished}
            locked.update(f.fired.prepared.parent_id for f in finished
                          if f.fired.prepared.parent_id is not None)
            current = {
                r["id"]: r
                for r in t.conn.execute(
                    select(*RESULT_COLUMNS)
                    .where(jobs.c.id.in_(sorted(locked)))
                    .order_by(jobs.c.id)
                    .with_for_update()
                ).mappings()
            }
            fire_ids = {f.fired.prepared.job_id: f.fired.prepared.fire_id for f in finished}
            ours = [
                r for r in current.values()
                if r["state"] == JobState.EXECUTING.value and r["owner_session"] == session_id
                and r["fire_id"] == fire_ids.get(r["id"])
            ]
            specs, poisoned = self._specs_of(t.conn, ours)
            self._fresh_calendars(t.conn, planner, specs.values())
            run_values: list[dict[str, Any]] = []
            job_values: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            # Webhook events (see quartzlite.storage.webhooks): outcomes that may be one,
            # and successes after a failure.
            eventful: list[int] = []
            recovered: list[int] = []
            # Slots of jobs with downstream jobs that this batch ends (dependencies).
            ended: list[EndedSlot] = []
            # Lanes this batch frees, and their jobs.
            freed: list[int] = []
            released: set[int] = set()
            for item in finished:
                p = item.fired.prepared
                status = item.outcome.status
                if status in EVENT_STATUSES:
                    eventful.append(item.fired.run_id)
                run_values.append(
                    {
                        "id": item.fired.run_id, "fire_id": p.fire_id,
                        "status": item.outcome.status.value, "ended_at": rows.to_db(item.ended_at),
                        "started_at": None if item.started_at is None else rows.to_db(item.started_at),
                        "exit_code": item.outcome.exit_code, "output": item.outcome.output,
                        "error": item.outcome.error,
                    }
                )
                row = current.get(p.job_id)
                spec = specs.get(p.job_id)
                if (
                    row is None
                    or spec is None
                    or row["state"] != JobState.EXECUTING.value
                    or row["fire_id"] != p.fire_id
                    or row["owner_session"] != session_id
                ):
                    continue
                try:
                    plan = planner.after_run(spec, item, now, row["runs_done"])
                except Exception as error:  # noqa: BLE001 - one job never stops a node
                    poisoned.append((row, error))
                    continue
                job_row = row
                if row["parent_id"] is not None:
                    # A lane: its slot again (a retry), or free; its job counts and plans.
                    plan = lanes.lane_plan(plan, p.slot_at,
                                           may_rerun=lanes.may_rerun(row["broadcast"], status))
                    job_row = current.get(row["parent_id"], row)
                    if plan.planned_at is None:
                        freed.append(p.job_id)
                        released.add(row["parent_id"])
                missed.extend(self._missed_rows(p.job_id, spec.name, plan))
                if job_row["has_downstream"] and ends_slot(p.slot_at, plan.slot_at, plan.planned_at):
                    ended.append(EndedSlot(job_name=spec.name, run_id=item.fired.run_id,
                                           slot_at=p.slot_at, planned_at=p.planned_at,
                                           status=status, job_id=p.run_job_id,
                                           params=rows.params_to_db(item.fired.params)))
                if status is RunStatus.SUCCEEDED and row["last_outcome"] in FAILURES:
                    recovered.append(item.fired.run_id)
                job_values.append(
                    {
                        "id": p.job_id, "fire_id": p.fire_id,
                        "last_ended_at": rows.to_db(item.ended_at),
                        **self._next_values(plan),
                        # Read under this row's lock: no other writer counts its runs.
                        "runs_done": row["runs_done"] + (1 if plan.counted else 0),
                        "last_outcome": (
                            status.value if status in KNOWN_OUTCOMES else row["last_outcome"]
                        ),
                    }
                )
            # One statement per table for the whole batch (not one per run): the job
            # lock is held for a few round trips, however large the batch.
            update_from_rows(
                t.conn, "ql_runs", run_values, match=("id", "fire_id"),
                assign=("status", "started_at", "ended_at", "exit_code", "output", "error"),
                where="t.status = 'running'",
            )
            transitions.result(t.conn, job_values)
            if missed:
                t.conn.execute(insert(runs).prefix_with("IGNORE"), missed)
            # In this transaction: an event exists exactly when its outcome does. One
            # statement, and none for a batch with nothing to tell.
            record_run_events(t.conn, run_ids=eventful, recovered=recovered, missed=missed)
            self._quarantine(t.conn, poisoned, now)
            upcoming = [v["next_fire_at"] for v in job_values if v["next_fire_at"] is not None]
            if released and lanes.release(t.conn, released, freed):
                upcoming.append(rows.to_db(now))  # a waiting slot may go to the lane
            # The downstream runs of the slots that ended, in this transaction: a node
            # that dies once it committed leaves them requested. No statement for a
            # batch without a job that has downstream jobs (the usual case).
            if ended and request_downstream(t.conn, ended, now):
                upcoming.append(rows.to_db(now))  # the scanner takes them at once
            return Completed(next_due=utc(min(upcoming)) if upcoming else None, db_now=now)

        # A short deadline: the caller holds the node mutex; it keeps the results and
        # tries again (outcomes are never dropped).
        return self.db.transaction(
            tx, name="complete_runs", retry=RetryPolicy(deadline_s=2.0), stop=stop
        )

    def journaled(self, entries: Sequence[Any]) -> list[Finished]:
        """Journaled outcomes (``quartzlite.node.journal.JournaledOutcome``) as results
        to :meth:`complete`, with their jobs' specs read back; those whose job row is
        gone are dropped."""
        if not entries:
            return []
        with self.db.connect() as conn:
            found = {
                r["id"]: (rows.spec_from_row(r), r["parent_id"])
                for r in conn.execute(
                    select(*SPEC_COLUMNS).where(jobs.c.id.in_({e.job_id for e in entries}))
                ).mappings()
            }
        finished: list[Finished] = []
        for e in entries:
            if e.job_id not in found:
                continue
            spec, parent_id = found[e.job_id]
            prepared = Prepared(job_id=e.job_id, name=e.name, fire_id=e.fire_id, planned_at=e.planned_at,
                                slot_at=e.slot_at, attempt=e.attempt, spec=spec,
                                parent_id=parent_id)
            finished.append(Finished(
                fired=Fired(prepared=prepared, run_id=e.run_id, fired_at=e.fired_at),
                outcome=e.outcome, ended_at=e.ended_at, started_at=e.started_at,
            ))
        return finished
