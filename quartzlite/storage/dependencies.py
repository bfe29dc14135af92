"""Dependencies between jobs, in SQL: what the writes that name upstream jobs check and
keep under the job lock, the requests the end of an upstream slot writes for its
downstream jobs (in the transaction that records that end), and the scan's taking of
the pending ones.

The graph is stored on the jobs: ``ql_jobs.upstream`` names a job's upstream jobs
(comma-joined), ``upstream_on`` says how their slot must end, and ``has_downstream``
flags the jobs that some live job names, so that the results transaction looks for
downstream jobs only for a batch holding one of those (no statement otherwise).

A downstream job runs once per upstream slot: its request's key is (job, slot) in
``ql_requests`` (UNIQUE), written by ``INSERT IGNORE``; the fire transaction copies the
request's upstream run into the run rows, and the run rows' UNIQUE (job, planned
instant) keeps the slot from running twice however often the request is seen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.elements import ColumnElement

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus, UpstreamCondition
from quartzlite.errors import Conflict, ValidationError
from quartzlite.models import MANUAL_SCHEDULE
from quartzlite.storage import rows
from quartzlite.storage.tables import jobs, requests, runs

log = logging.getLogger("quartzlite.storage")

#: ``ql_requests.cause`` of a slot requested by the end of an upstream job's slot.
UPSTREAM_CAUSE = "upstream"


@dataclass(frozen=True, slots=True, kw_only=True)
class EndedSlot:
    """A slot of a job that has downstream jobs, ended with a final outcome: the run
    that ended it, its status, and its slot and planned instant (the downstream runs'
    own)."""

    job_name: str
    run_id: int
    slot_at: datetime
    #: The planned instant of the run that ended the slot (a retry's or a rerun's is
    #: later than the slot's own: the request takes the slot's first, see
    #: :func:`request_downstream`).
    planned_at: datetime
    status: RunStatus
    #: The ending run's parameters (stored JSON; None: none): its downstream runs get
    #: them too (a backfill date goes down the chain).
    params: str | None = None
    #: The id its run rows carry (None: planned at ``planned_at``, taken as it is).
    job_id: int | None = None


def ends_slot(slot_at: datetime, next_slot_at: datetime | None, next_fire_at: datetime | None) -> bool:
    """Whether a job that leaves the slot ``slot_at`` for this next fire moves on from it
    (a retry or a rerun is the same slot again: not an end)."""
    return next_fire_at is None or next_slot_at != slot_at


# -- reads -------------------------------------------------------------------------------


def _naming(names: Iterable[str]) -> list[ColumnElement[bool]]:
    """Live jobs that name one of ``names`` upstream (ix_ql_jobs_upstream: only the jobs
    with upstream jobs are read)."""
    return [
        jobs.c.upstream > "",
        jobs.c.deleted.is_(False),
        or_(*(func.find_in_set(name, jobs.c.upstream) > 0 for name in sorted(set(names)))),
    ]


def downstream_of(conn: Connection, names: Iterable[str]) -> list[RowMapping]:
    """The live jobs naming one of ``names`` upstream (id, name, upstream, upstream_on)."""
    wanted = sorted(set(names))
    if not wanted:
        return []
    return list(conn.execute(
        select(jobs.c.id, jobs.c.active_name, jobs.c.upstream, jobs.c.upstream_on)
        .where(*_naming(wanted)).order_by(jobs.c.id)
    ).mappings())


def downstream_names(conn: Connection, name: str) -> list[str]:
    """The names of the live jobs that name ``name`` upstream, sorted."""
    return sorted(
        r["active_name"] for r in downstream_of(conn, [name])
        if name in rows.split_tags(r["upstream"])
    )


# -- writes under the job lock ---------------------------------------------------------


def link(
    conn: Connection, *, name: str, upstream: Sequence[str], before: Sequence[str] = (),
    job_id: int | None = None, field: str = "upstream",
) -> None:
    """After a write stored job ``name`` naming ``upstream`` (it named ``before``), in
    the same transaction, under the job lock: every upstream job exists and is not
    deleted, the graph has no cycle (walked from the stored rows), and the upstream
    jobs' ``has_downstream`` flags say whether some live job names them. A
    :class:`ValidationError` naming ``field`` otherwise (the caller's transaction rolls
    the write back). A job that no longer names any upstream job drops the requests its
    upstream jobs left pending (``job_id``)."""
    wanted = sorted(set(upstream))
    if name in wanted:
        raise ValidationError(field, "a job cannot be its own upstream")
    if wanted:
        found = {
            r[0] for r in conn.execute(
                select(jobs.c.active_name).where(jobs.c.active_name.in_(wanted))
            )
        }
        for upstream_name in wanted:
            if upstream_name not in found:
                raise ValidationError(
                    field, f"unknown job {upstream_name!r}: name an existing job (create it first)"
                )
        _refuse_cycle(conn, name, wanted, field)
        added = sorted(set(wanted) - set(before))
        if added:
            conn.execute(
                update(jobs)
                .where(jobs.c.active_name.in_(added), jobs.c.has_downstream.is_(False))
                .values(has_downstream=True)
            )
    removed = sorted(set(before) - set(wanted))
    if removed:
        refresh_has_downstream(conn, removed)
    if before and not wanted and job_id is not None:
        drop_pending(conn, job_id)


def _refuse_cycle(conn: Connection, name: str, upstream: Sequence[str], field: str) -> None:
    """Walk up from ``upstream`` through the stored rows (one indexed read per level):
    reaching ``name`` again is a cycle, refused naming it in the order the jobs would
    trigger each other ("a -> b -> a")."""
    # toward[x]: the job that names x upstream, on the way back to ``name``.
    toward: dict[str, str] = dict.fromkeys(upstream, name)
    frontier = list(upstream)
    while frontier:
        found = conn.execute(
            select(jobs.c.active_name, jobs.c.upstream).where(jobs.c.active_name.in_(frontier))
        ).all()
        following: list[str] = []
        for job_name, names in found:
            for up in rows.split_tags(names):
                if up == name:
                    chain = [name]
                    step = job_name
                    while step != name:
                        chain.append(step)
                        step = toward[step]
                    chain.append(name)
                    raise ValidationError(
                        field, f"would make a cycle: {' -> '.join(chain)} (each job runs when "
                        "the one before it ends)",
                    )
                if up not in toward:
                    toward[up] = job_name
                    following.append(up)
        frontier = sorted(set(following))


def refresh_has_downstream(conn: Connection, names: Iterable[str]) -> None:
    """Clear ``has_downstream`` on those of ``names`` that no live job names any more."""
    wanted = sorted(set(names))
    if not wanted:
        return
    still: set[str] = set()
    for row in downstream_of(conn, wanted):
        still.update(rows.split_tags(row["upstream"]))
    gone = [n for n in wanted if n not in still]
    if gone:
        conn.execute(
            update(jobs)
            .where(jobs.c.active_name.in_(gone), jobs.c.has_downstream.is_(True))
            .values(has_downstream=False)
        )


def refuse_delete(conn: Connection, existing: rows.Row) -> None:
    """A :class:`Conflict` when live jobs name the job ``existing`` (a row) upstream."""
    if not existing["has_downstream"]:
        return
    name = existing["active_name"]
    names = downstream_names(conn, name)
    if names:
        raise Conflict(
            f"job {name} is upstream of {', '.join(names)}: remove the dependency first",
            details={"job": name, "downstream": names},
        )


def drop_pending(conn: Connection, job_id: int) -> None:
    """Delete the job's pending requests (it was deleted, or names no upstream job any
    more): nobody will take them (UNIQUE (job_id, slot_at): an index range)."""
    conn.execute(delete(requests).where(requests.c.job_id == job_id,
                                        requests.c.taken_at.is_(None)))


def release_taken(conn: Connection, row: rows.Row) -> None:
    """Before a management write plans the ``@manual`` job ``row`` (a row read under the
    job lock) anew (a trigger, a resume, a change of its timing): the upstream request
    whose slot is its next fire, taken but not run yet, is pending again, so that the
    slot still runs once the job is free (one statement on the request's UNIQUE key)."""
    if (
        row["next_slot_at"] is None or row["next_attempt"] != 1
        or row["state"] == JobState.EXECUTING.value
        or str(row["schedule"]).strip().lower() != MANUAL_SCHEDULE
    ):
        return
    conn.execute(
        update(requests)
        .where(requests.c.job_id == row["id"], requests.c.slot_at == row["next_slot_at"],
               requests.c.cause == UPSTREAM_CAUSE, requests.c.taken_at.is_not(None))
        .values(taken_at=None)
    )


# -- the node: an upstream slot ended; a scan takes the pending requests -----------------


def request_downstream(conn: Connection, ended: Sequence[EndedSlot], now: datetime) -> int:
    """In the transaction that records the end of these slots: a pending request, for
    each live downstream job whose condition the outcome meets, to run the upstream's
    slot (its slot and planned instant, with the upstream run). One SELECT and one
    ``INSERT IGNORE``; the UNIQUE (job_id, slot_at) key makes a request written twice
    (a transaction run again, two upstream jobs ending the same slot) one request.
    Returns the requests written (or found written)."""
    if not ended:
        return 0
    ended = [_first_planned(conn, e) for e in ended]
    values: list[dict[str, Any]] = []
    for job in downstream_of(conn, [e.job_name for e in ended]):
        try:
            condition = UpstreamCondition(job["upstream_on"])
        except ValueError:  # a row edited by hand: it triggers nothing
            log.error("job %s has an unknown upstream_on %r", job["active_name"],
                      job["upstream_on"], extra={"action": "upstream_on_invalid"})
            continue
        named = set(rows.split_tags(job["upstream"]))
        for e in ended:
            if e.job_name in named and condition.matches(e.status):
                values.append({
                    "job_id": job["id"], "slot_at": rows.to_db(e.slot_at),
                    "planned_at": rows.to_db(e.planned_at), "params": e.params,
                    "cause": UPSTREAM_CAUSE, "upstream_run_id": e.run_id,
                    "created_at": rows.to_db(now), "taken_at": None,
                })
    if values:
        # One order for every writer: two transactions writing the same keys queue.
        values.sort(key=lambda v: (v["job_id"], v["slot_at"]))
        conn.execute(insert(requests).prefix_with("IGNORE"), values)
    return len(values)


def _first_planned(conn: Connection, e: EndedSlot) -> EndedSlot:
    """The slot as first planned: a retry or a rerun ended it, planned later than the
    slot's first run, whose instant the downstream runs take. Every run of a slot is
    planned at or after the slot, so one range of the run key (job, planned instant)
    from the slot to this run holds them (only the runs of the job planned in between)."""
    if e.job_id is None or e.planned_at == e.slot_at:
        return e
    first = conn.execute(
        select(func.min(runs.c.planned_at)).where(
            runs.c.job_id == e.job_id, runs.c.planned_at >= rows.to_db(e.slot_at),
            runs.c.planned_at <= rows.to_db(e.planned_at),
            runs.c.slot_at == rows.to_db(e.slot_at),
        )
    ).scalar()
    return e if first is None else replace(e, planned_at=utc(first))


def _oldest_pending() -> Any:
    """Each job's oldest pending request: ``(job_id, first_id)``, read from
    ix_ql_requests_pending by a loose index scan (one dive per job that has pending
    requests, whatever their number: a paused job's backlog costs the probe one)."""
    return (
        select(requests.c.taken_at, requests.c.job_id, func.min(requests.c.id).label("first_id"))
        .where(requests.c.taken_at.is_(None))
        .group_by(requests.c.taken_at, requests.c.job_id)
        .subquery("pending")
    )


def _takers(tag_sets: Sequence[str]) -> list[ColumnElement[bool]]:
    """Jobs whose pending requests a node with these tag sets may take now: idle with
    nothing planned (a retry, a rerun or a trigger goes first; a downstream job never
    overlaps itself), not paused (its requests wait until it is resumed), not deleted,
    and its tags this node's."""
    return [
        jobs.c.state == JobState.IDLE.value,
        jobs.c.paused.is_(False),
        jobs.c.deleted.is_(False),
        jobs.c.next_fire_at.is_(None),
        jobs.c.tags.in_(list(tag_sets)),
    ]


def pending_due(tag_sets: Sequence[str]) -> Any:
    """A scalar subquery for the watch: the earliest planned instant of a request a node
    with these tag sets may take now (NULL: none), so that its scanner runs at once."""
    pending = _oldest_pending()
    return (
        select(func.min(func.coalesce(requests.c.planned_at, requests.c.slot_at)))
        .select_from(pending.join(jobs, jobs.c.id == pending.c.job_id)
                     .join(requests, requests.c.id == pending.c.first_id))
        .where(*_takers(tag_sets))
        .scalar_subquery()
    )


def take_requests(conn: Connection, tag_sets: Sequence[str], limit: int) -> int:
    """Under the job lock, in the scan's transaction, before its due query: the oldest
    pending request of each job that may take one (``limit`` jobs at most, oldest
    first) becomes the job's next fire (the request's planned instant and slot, attempt
    1) and is marked taken; the due query then prepares them. One statement when none
    waits. Only idle rows change, which only writers holding the job lock change. A job
    that ran its ``max_runs`` slots runs no more: its pending requests are dropped
    (marked taken, unplanned)."""
    pending = _oldest_pending()
    found = conn.execute(
        select(requests.c.id, requests.c.job_id, requests.c.slot_at, requests.c.planned_at,
               jobs.c.max_runs, jobs.c.runs_done)
        .select_from(pending.join(jobs, jobs.c.id == pending.c.job_id)
                     .join(requests, requests.c.id == pending.c.first_id))
        .where(*_takers(tag_sets))
        .order_by(pending.c.first_id)
        .limit(limit)
    ).all()
    if not found:
        return 0
    done = [r.job_id for r in found if r.max_runs is not None and r.runs_done >= r.max_runs]
    planned = [r for r in found if r.job_id not in done]
    if planned:
        conn.execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), jobs.c.state == JobState.IDLE.value,
                   jobs.c.next_fire_at.is_(None))
            .values(next_fire_at=bindparam("b_fire"), next_slot_at=bindparam("b_slot"),
                    next_attempt=1),
            [{"b_id": r.job_id, "b_fire": r.planned_at or r.slot_at, "b_slot": r.slot_at}
             for r in planned],
        )
        conn.execute(
            update(requests).where(requests.c.id.in_([r.id for r in planned]))
            .values(taken_at=func.now(6))
        )
    if done:
        conn.execute(
            update(requests).where(requests.c.job_id.in_(done), requests.c.taken_at.is_(None))
            .values(taken_at=func.now(6))
        )
    return len(planned)


__all__ = [
    "UPSTREAM_CAUSE", "EndedSlot", "downstream_names", "downstream_of", "drop_pending",
    "ends_slot", "link", "pending_due", "refresh_has_downstream", "refuse_delete",
    "release_taken", "request_downstream", "take_requests",
]
