"""Lanes: the hidden job rows that run the slots of a job with ``max_concurrency`` > 1 or
``broadcast`` (``JobSpec.lanes``).

Such a job's own row only plans: the scan takes its due slot and gives it to lanes, under
the job lock, and moves the job on to its next slot. A lane is a row of ``ql_jobs`` with
``parent_id`` set and no ``active_name`` (no listing shows it): it copies its job's
definition (:func:`sync`, by every write that changes it) and goes idle -> prepared ->
executing -> idle through the same guarded edges as any job, so fire, start check,
results, kill, compensation and expiry need nothing new. Its runs carry its job's id
(``ql_runs.job_id``), so the runs' UNIQUE (job, planned instant, shard) key still lets a
slot run once (once per shard).

* A concurrent job has up to ``max_concurrency`` busy lanes; a slot waits while all of
  them are (the job is ``saturated``: the due scan skips it).
* A broadcast job gives each slot to one lane per live node whose tags match, pinned to
  that node's session (``pinned_session``: only that node prepares it), with the slot's
  ``shard`` and ``shard_total``; the next slot waits until every lane is free.

A lane keeps its slot through the slot's retries (its own next fire); once it moves on
from the slot it is free again (idle with no next fire) and its job is no longer
saturated. Every writer of a lane's state that frees it holds the job row's lock, taken
before the lane's (ids ascend: the job's row is older than its lanes), so the scan's
reading of a job's lanes and the freeing of one never cross.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, insert, literal, null, select, text, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.enums import JobState, RunStatus
from quartzlite.models import Reschedule
from quartzlite.storage import rows, transitions
from quartzlite.storage.tables import jobs, runs, sessions

#: The columns a lane copies from its job: its definition (and the stamp the node's spec
#: cache keys it by). Not ``upstream`` (a lane is no job's downstream) nor any of the
#: runtime columns.
SYNCED = (
    "name", "schedule", "timezone", "target_kind", "command", "callable", "kwargs",
    "timeout_s", "max_attempts", "retry_backoff_s", "retry_max_backoff_s", "misfire_policy",
    "misfire_grace_s", "recovery_policy", "priority", "tags", "description", "paused",
    "deleted", "overrun_policy", "start_at", "end_at", "max_runs", "jitter_s", "calendars",
    "upstream_on", "max_concurrency", "broadcast", "updated_at",
)

#: What the scan and the freeing writes read of a job's lanes.
LANE_COLUMNS = [
    jobs.c.id, jobs.c.parent_id, jobs.c.state, jobs.c.next_fire_at, jobs.c.pinned_session,
]


def busy(lane: RowMapping) -> bool:
    """A lane holding a slot: prepared, executing, or idle with a fire to come (a retry, a
    rerun, or a broadcast slot its node has not prepared yet)."""
    return lane["state"] != JobState.IDLE.value or lane["next_fire_at"] is not None


def lanes_of(conn: Connection, parent_ids: Iterable[int], *, lock: bool = False
             ) -> dict[int, list[RowMapping]]:
    """The live lanes of these jobs (ix_ql_jobs_parent), by job id; ``lock``: their rows
    locked, in id order (the caller holds the jobs' rows already)."""
    ids = sorted(set(parent_ids))
    found: dict[int, list[RowMapping]] = {i: [] for i in ids}
    if not ids:
        return found
    query = (select(*LANE_COLUMNS)
             .where(jobs.c.parent_id.in_(ids), jobs.c.deleted.is_(False))
             .order_by(jobs.c.id))
    for lane in conn.execute(query.with_for_update() if lock else query).mappings():
        found[lane["parent_id"]].append(lane)
    return found


def create(conn: Connection, parent_id: int, pinned_session: str | None, now: datetime) -> int:
    """A new free lane of job ``parent_id`` (pinned to a node's session, or not), its
    definition copied from the job's row server-side."""
    overrides: dict[str, Any] = {
        **transitions.created(),
        "active_name": None, "parent_id": parent_id, "pinned_session": pinned_session,
        "next_fire_at": None, "next_slot_at": None,
        "next_attempt": 1, "owner_session": None, "fire_id": None, "kill_requested": False,
        "prepared_at": None, "started_at": None, "last_ended_at": None,
        "created_at": rows.to_db(now), "error": None, "last_outcome": None,
        "upstream": "", "has_downstream": False, "shard": None, "shard_total": None,
        "saturated": False, "lanes_version": 0,
    }
    names = [c.name for c in jobs.c if c.name != "id"]
    source = select(*[
        jobs.c[n] if n in SYNCED else _literal(n, overrides[n]) for n in names
    ]).where(jobs.c.id == parent_id)
    # One row inserted: the driver reports its id.
    return int(conn.execute(insert(jobs).from_select(names, source)).lastrowid)


def _literal(name: str, value: Any) -> Any:
    return (null() if value is None else literal(value, jobs.c[name].type)).label(name)


def sync(conn: Connection, parent_id: int) -> None:
    """Copy job ``parent_id``'s definition into its lanes (a write changed it: the next
    fire of each lane runs it as it is now; a lane's start check sees a pause, a delete
    or a kill). One statement; none for a job without lanes."""
    assignments = ", ".join(f"l.{c} = p.{c}" for c in SYNCED)
    conn.execute(
        text(f"UPDATE ql_jobs AS l JOIN ql_jobs AS p ON p.id = l.parent_id SET {assignments} "
             "WHERE l.parent_id = :id"),
        {"id": parent_id},
    )


def lane_plan(plan: Reschedule, slot_at: datetime, *, may_rerun: bool) -> Reschedule:
    """Where a lane goes after a run of slot ``slot_at``, given where its job would go
    (``plan``, from the planner): the same slot again (a retry, or a rerun its recovery
    policy asks for, when ``may_rerun``), else free. A lane never plans a new slot (its
    job does) nor records missed ones."""
    if may_rerun and plan.planned_at is not None and plan.slot_at == slot_at:
        return Reschedule(planned_at=plan.planned_at, slot_at=plan.slot_at, attempt=plan.attempt)
    return Reschedule(planned_at=None, slot_at=None, attempt=1)


def may_rerun(broadcast: bool, status: RunStatus) -> bool:
    """A concurrent job's lane runs its slot again as its job's policies say; a broadcast
    lane only retries a run that failed or timed out on its node (a lost node's shard is
    not run elsewhere)."""
    return not broadcast or status in (RunStatus.FAILED, RunStatus.TIMED_OUT)


def release(conn: Connection, parent_ids: Iterable[int], freed: Iterable[int] = ()) -> list[int]:
    """The jobs among ``parent_ids`` that may take a slot again (a concurrent job: a lane
    freed; a broadcast job: no lane busy, counting the lanes in ``freed`` as free) are no
    longer saturated. The caller holds these jobs' rows (and the freed lanes'). Returns
    the jobs released."""
    ids = sorted(set(parent_ids))
    if not ids:
        return []
    free = set(freed)
    found = conn.execute(
        select(jobs.c.id, jobs.c.broadcast, jobs.c.saturated).where(jobs.c.id.in_(ids))
    ).mappings().all()
    broadcast = [r["id"] for r in found if r["broadcast"] and r["saturated"]]
    lanes = lanes_of(conn, broadcast)
    released = [
        r["id"] for r in found if r["saturated"] and (
            not r["broadcast"]
            or not any(busy(lane) for lane in lanes[r["id"]] if lane["id"] not in free)
        )
    ]
    # Every job whose lane freed is written (``lanes_version``), released or not: see
    # tables.jobs.
    conn.execute(
        update(jobs).where(jobs.c.id.in_(ids)).values(
            lanes_version=jobs.c.lanes_version + 1,
            saturated=jobs.c.saturated if not released else case(
                (jobs.c.id.in_(released), False), else_=jobs.c.saturated),
        )
    )
    return released


def forget_pinned(conn: Connection, now: datetime, node_name: str,
                  sessions_gone: Sequence[str] | None = None) -> list[int]:
    """Broadcast lanes pinned to a node that left (its session row is gone, or is one of
    ``sessions_gone``) and idle: a slot given to one and never prepared is recorded
    ``missed`` for its shard; the lanes are deleted and their jobs released. A lane still
    prepared or executing waits for its recovery (expiry), which frees it first. Returns
    the jobs released."""
    query = (
        select(jobs.c.id, jobs.c.parent_id, jobs.c.name, jobs.c.next_fire_at,
               jobs.c.next_slot_at, jobs.c.next_attempt, jobs.c.shard, jobs.c.shard_total,
               jobs.c.pinned_session)
        .select_from(jobs.outerjoin(sessions, sessions.c.id == jobs.c.pinned_session))
        .where(jobs.c.parent_id.is_not(None), jobs.c.pinned_session.is_not(None),
               jobs.c.state == JobState.IDLE.value)
        .order_by(jobs.c.id)
    )
    gone = set(sessions_gone or ())
    found = [
        r for r in conn.execute(query.add_columns(sessions.c.id.label("live"))).mappings()
        if r["live"] is None or r["pinned_session"] in gone
    ]
    if not found:
        return []
    parents = sorted({r["parent_id"] for r in found})
    # The jobs' rows first, then the lanes' (the order every lane writer keeps).
    conn.execute(select(jobs.c.id).where(jobs.c.id.in_(parents)).order_by(jobs.c.id)
                 .with_for_update())
    missed = [
        {
            "job_id": r["parent_id"], "job_name": r["name"], "fire_id": None,
            "planned_at": r["next_fire_at"], "slot_at": r["next_slot_at"] or r["next_fire_at"],
            "attempt": r["next_attempt"], "session_id": r["pinned_session"], "node": node_name,
            "status": RunStatus.MISSED.value, "output": "", "shard": r["shard"] or 0,
            "shard_total": r["shard_total"],
            "error": "missed: the node this shard was given to left the cluster before it ran",
        }
        for r in found if r["next_fire_at"] is not None
    ]
    ids = [r["id"] for r in found]
    deleted = conn.execute(
        delete(jobs).where(jobs.c.id.in_(ids), jobs.c.state == JobState.IDLE.value)
    ).rowcount
    if missed and deleted:
        conn.execute(insert(runs).prefix_with("IGNORE"), missed)
    return release(conn, parents, ids)


def orphan_lanes() -> Any:
    """Broadcast lanes pinned to a session that no longer exists (idle: a prepared or
    executing one is an orphaned owner first)."""
    return (
        select(jobs.c.pinned_session)
        .select_from(jobs.outerjoin(sessions, sessions.c.id == jobs.c.pinned_session))
        .where(jobs.c.parent_id.is_not(None), jobs.c.pinned_session.is_not(None),
               jobs.c.state == JobState.IDLE.value, sessions.c.id.is_(None))
    )


__all__ = ["LANE_COLUMNS", "SYNCED", "busy", "create", "forget_pinned", "lane_plan",
           "lanes_of", "may_rerun", "orphan_lanes", "release", "sync"]
