"""Every change of a job's state, in one place: one guarded statement per edge of the
job state machine (go-crontab's idle -> prepared -> executing -> idle).

Each function is named after its edge. Its WHERE holds what makes the edge safe (the
state it leaves, and the owner and fire id read under the job lock where a node acts
on its own work); its SET holds what the edge sets. The node (scan, fire, results,
hand-back, compensation), expiry and the client (pause, delete, update, trigger) all
change state through here, inside their own transactions, under the job lock; the one
exception is ``result``, whose transaction holds row locks on its own executing jobs
instead (see :meth:`quartzlite.storage.node.results.Results.complete`). Nothing
else writes ``ql_jobs.state``: tests/unit/test_transitions.py checks that, and that
:data:`EDGES` and :data:`quartzlite.enums.JOB_TRANSITIONS` describe the same machine.

Every function returns the number of jobs it moved; a guard that refuses moves none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from quartzlite.enums import JobState
from quartzlite.storage import rows
from quartzlite.storage.batch import update_from_rows
from quartzlite.storage.tables import jobs

IDLE, PREPARED, EXECUTING = JobState.IDLE, JobState.PREPARED, JobState.EXECUTING


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge of the job state machine: its name, the states it leaves, the state it
    reaches, and when it is taken."""

    name: str
    sources: frozenset[JobState]
    target: JobState
    when: str


PREPARE = Edge("prepare", frozenset({IDLE}), PREPARED,
               "the scanner takes a due job for this node (look-ahead window)")
FIRE = Edge("fire", frozenset({PREPARED}), EXECUTING,
            "the firer commits the run row: the run is this node's to start")
RESULT = Edge("result", frozenset({EXECUTING}), IDLE,
              "the run's outcome is recorded; the job moves to its next fire")
HAND_BACK = Edge("hand_back", frozenset({PREPARED}), IDLE,
                 "a prepared job goes back to the cluster: its node stops, its session "
                 "expired, it was paused, deleted, changed or triggered, or it was found "
                 "paused or deleted at fire time")
ABANDON = Edge("abandon", frozenset({EXECUTING}), IDLE,
               "the run's node is gone (its session expired) or never started it (a fire "
               "of unknown outcome): the run is abandoned, the job follows its recovery "
               "policy")
REFUSE_DUPLICATE = Edge("refuse_duplicate", frozenset({EXECUTING}), IDLE,
                        "the slot already has a run (the UNIQUE key refused ours): the job "
                        "moves on to its next slot, the slot never runs twice")
QUARANTINE = Edge("quarantine", frozenset({IDLE, PREPARED, EXECUTING}), IDLE,
                  "the scheduler cannot plan the job: it is paused, with the reason")

#: Every edge the code can take.
EDGES: tuple[Edge, ...] = (PREPARE, FIRE, RESULT, HAND_BACK, ABANDON, REFUSE_DUPLICATE,
                           QUARANTINE)

#: What a job nobody owns looks like (every edge to idle sets these).
_RELEASED: dict[str, Any] = {
    "state": JobState.IDLE.value,
    "owner_session": None,
    "fire_id": None,
    "prepared_at": None,
}


def created() -> dict[str, Any]:
    """The state columns of a new job (not an edge: where every job starts)."""
    return {"state": JobState.IDLE.value, "runs_done": 0}


def _in(*states: JobState) -> ColumnElement[bool]:
    if len(states) == 1:
        return jobs.c.state == states[0].value
    return jobs.c.state.in_([s.value for s in states])


def _next(planned_at: datetime | None, slot_at: datetime | None, attempt: int) -> dict[str, Any]:
    return {"next_fire_at": rows.to_db(planned_at), "next_slot_at": rows.to_db(slot_at),
            "next_attempt": attempt}


def prepare(conn: Connection, *, job_ids: Sequence[int], session_id: str,
            fire_prefix: str) -> int:
    """idle -> prepared: these jobs are this session's, under fire id
    ``fire_prefix + job id``. Guard: still idle."""
    return int(conn.execute(
        update(jobs)
        .where(jobs.c.id.in_(list(job_ids)), _in(IDLE))
        .values(state=JobState.PREPARED.value, owner_session=session_id,
                fire_id=func.concat(fire_prefix, jobs.c.id), prepared_at=func.now(6))
    ).rowcount)


def fire(conn: Connection, *, job_ids: Sequence[int], fire_ids: Sequence[str],
         session_id: str, now: datetime) -> int:
    """prepared -> executing. Guard: still prepared by this session under the same fire
    id, neither paused nor deleted since. ``started_at`` (of the job row) is when the
    run was due or fired, whichever is later."""
    return int(conn.execute(
        update(jobs)
        .where(
            jobs.c.id.in_(list(job_ids)),
            jobs.c.fire_id.in_(list(fire_ids)),
            _in(PREPARED),
            jobs.c.owner_session == session_id,
            jobs.c.paused.is_(False),
            jobs.c.deleted.is_(False),
        )
        .values(state=JobState.EXECUTING.value,
                started_at=func.greatest(jobs.c.next_fire_at, rows.to_db(now)))
    ).rowcount)


def result(conn: Connection, values: Sequence[Mapping[str, Any]]) -> None:
    """executing -> idle for a batch of recorded outcomes, each with its own next fire:
    ``values`` = {id, fire_id, last_ended_at, next_fire_at, next_slot_at, next_attempt,
    runs_done, last_outcome} (``runs_done``: the job's count of slots run, this one
    included when it counts, read under the row's lock; ``last_outcome``: the status of
    the job's last run with a known outcome, this one's when it has one). Guard: still
    executing under the same fire id (a job whose run was abandoned and taken over
    meanwhile is left alone)."""
    update_from_rows(
        conn, "ql_jobs", values, match=("id", "fire_id"),
        assign=("last_ended_at", "next_fire_at", "next_slot_at", "next_attempt", "runs_done",
                "last_outcome"),
        constants=(
            "t.state = 'idle', t.owner_session = NULL, t.fire_id = NULL, "
            "t.prepared_at = NULL, t.kill_requested = 0"
        ),
        where="t.state = 'executing'",
    )


def hand_back(conn: Connection, *where: ColumnElement[bool], **values: Any) -> int:
    """prepared -> idle for the jobs matching ``where`` (say, ``owner_session == me``),
    with ``values`` set as well (say, ``paused=True``). Guard: still prepared."""
    return int(conn.execute(
        update(jobs).where(_in(PREPARED), *where).values(**_RELEASED, **values)
    ).rowcount)


def trigger(conn: Connection, job_id: int, now: datetime) -> int:
    """A job due now as a fresh slot: prepared -> idle (handed back) or idle -> idle,
    due at ``now``. Guard: not executing (a running job cannot be triggered)."""
    return int(conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, _in(IDLE, PREPARED))
        .values(**_RELEASED, **_next(now, now, 1), updated_at=func.now(6))
    ).rowcount)


def abandon(conn: Connection, *, job_id: int, fire_id: str, planned_at: datetime | None,
            slot_at: datetime | None, attempt: int, runs_done: int | None = None) -> int:
    """executing -> idle for a run whose outcome is unknown (its node is gone, or never
    started it), due next at ``planned_at`` per its recovery policy, with ``runs_done``
    when given (the abandoned slot counted when the job moves on from it). Guard: still
    executing under this fire id."""
    counted = {} if runs_done is None else {"runs_done": runs_done}
    return int(conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.fire_id == fire_id, _in(EXECUTING))
        .values(**_RELEASED, kill_requested=False, **counted, **_next(planned_at, slot_at, attempt))
    ).rowcount)


def refuse_duplicate(conn: Connection, *, job_id: int, fire_id: str,
                     planned_at: datetime | None, slot_at: datetime | None, attempt: int) -> int:
    """executing -> idle when the slot already had a run: the job moves on to the next
    slot. Guard: still executing under this fire id (the fire that was refused)."""
    return int(conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.fire_id == fire_id, _in(EXECUTING))
        .values(**_RELEASED, **_next(planned_at, slot_at, attempt))
    ).rowcount)


def quarantine(conn: Connection, *, job_id: int, fire_id: str | None, reason: str,
               now: datetime) -> int:
    """Any state -> idle, paused, with ``reason`` as the job's error. Guard: the same
    fire id when the job was found prepared or executing (else any)."""
    query = update(jobs).where(jobs.c.id == job_id)
    if fire_id is not None:
        query = query.where(jobs.c.fire_id == fire_id)
    return int(conn.execute(query.values(
        **_RELEASED, paused=True, kill_requested=False, error=reason[:4000],
        updated_at=rows.to_db(now),
    )).rowcount)


__all__ = [
    "ABANDON", "EDGES", "FIRE", "HAND_BACK", "PREPARE", "QUARANTINE", "REFUSE_DUPLICATE",
    "RESULT", "Edge", "abandon", "created", "fire", "hand_back", "prepare", "quarantine",
    "refuse_duplicate", "result", "trigger",
]
