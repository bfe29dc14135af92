"""What every part of the node's SQL shares: the planner it is given, the lock rows, the
results it returns, and the statements several parts use."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, insert, or_, select, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.errors import SchemaError
from quartzlite.models import Calendar, Finished, JobSpec, Prepared, Reschedule
from quartzlite.storage import lanes, rows, transitions
from quartzlite.storage.engine import Database
from quartzlite.storage.jobs import read_all
from quartzlite.storage.tables import jobs, locks, runs, sessions

log = logging.getLogger("quartzlite.storage.node")


class Planner(Protocol):
    """The node's scheduling decisions, called inside transactions (pure functions)."""

    def misfire(
        self, spec: JobSpec, slot_at: datetime, now: datetime, planned: datetime | None = None
    ) -> Reschedule:
        """A job found with slot ``slot_at`` (planned at ``planned``) later than its
        misfire grace; a ``@manual`` job's slot fires as planned, however late."""

    def after_run(
        self, spec: JobSpec, finished: Finished, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """Where a job goes once a run ended (retry, next slot, misfire of passed slots,
        or, for a run its node gave up, a rerun or the recovery policy). ``runs_done``:
        the slots the job ran before this one; ``Reschedule.counted`` says whether this
        one counts (``max_runs``)."""

    def recover(
        self, spec: JobSpec, slot_at: datetime, attempt: int, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """Where a job goes when its run was abandoned (its node died)."""

    def skip(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule:
        """The next slot after ``slot_at``, which must not run (it already ran)."""

    def assigned(
        self, spec: JobSpec, slot_at: datetime, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """A concurrent or broadcast job's next slot once ``slot_at`` went to its lanes."""

    def excluded(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule | None:
        """None when the job's calendars do not exclude ``slot_at``; else where it goes."""

    def knows_calendars(self, names: Iterable[str]) -> bool:
        """Whether the planner has every calendar named."""

    def use_calendars(self, calendars: Iterable[Calendar]) -> None:
        """Plan with these calendars (the whole table) from now on."""


class SpecCache:
    """Job definitions this node has read, by job id, each with the ``updated_at`` of the
    row it was read from. Every write that changes a definition (put, pause, resume,
    trigger, delete, quarantine) stamps ``updated_at`` under the job lock, so a row with
    the same stamp holds the same definition and is not read again: parsing a job's 32
    definition columns on every prepare and every result was the largest part of the
    node's CPU per run. Bounded: the oldest entries go first. Shared by the node's
    stores; a dict read or write is atomic, so no lock."""

    LIMIT = 20_000

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._specs: dict[int, tuple[datetime, JobSpec]] = {}
        self.reads = 0

    def get(self, job_id: int, stamp: datetime) -> JobSpec | None:
        found = self._specs.get(job_id)
        if found is None or found[0] != stamp:
            return None
        return found[1]

    def put(self, job_id: int, stamp: datetime, spec: JobSpec) -> None:
        self._specs.pop(job_id, None)
        self._specs[job_id] = (stamp, spec)
        while len(self._specs) > self.limit:
            try:
                del self._specs[next(iter(self._specs))]
            except (StopIteration, KeyError, RuntimeError):  # emptied by another thread
                break

    def __len__(self) -> int:
        return len(self._specs)


@dataclass(slots=True)
class LockStats:
    """Time spent waiting for lock rows, for metrics."""

    waits: int = 0
    wait_s: float = 0.0
    by_name: dict[str, float] = field(default_factory=dict)


SPEC_COLUMNS = [
    jobs.c.id, jobs.c.name, jobs.c.schedule, jobs.c.timezone, jobs.c.target_kind,
    jobs.c.command, jobs.c.callable, jobs.c.kwargs, jobs.c.timeout_s, jobs.c.max_attempts,
    jobs.c.retry_backoff_s, jobs.c.retry_max_backoff_s, jobs.c.misfire_policy,
    jobs.c.misfire_grace_s, jobs.c.overrun_policy, jobs.c.recovery_policy, jobs.c.priority,
    jobs.c.tags, jobs.c.start_at, jobs.c.end_at, jobs.c.max_runs, jobs.c.jitter_s,
    jobs.c.description, jobs.c.paused, jobs.c.deleted, jobs.c.state, jobs.c.next_fire_at,
    jobs.c.next_slot_at, jobs.c.next_attempt, jobs.c.owner_session, jobs.c.fire_id,
    jobs.c.runs_done, jobs.c.calendars, jobs.c.upstream, jobs.c.upstream_on,
    jobs.c.has_downstream, jobs.c.max_concurrency, jobs.c.broadcast, jobs.c.parent_id,
    jobs.c.shard, jobs.c.shard_total,
]

#: What the scanner reads of each due job: its definition comes from the node's
#: :class:`SpecCache` when ``updated_at`` says it has not changed.
SCAN_COLUMNS = [
    jobs.c.id, jobs.c.name, jobs.c.fire_id, jobs.c.updated_at, jobs.c.next_fire_at,
    jobs.c.next_slot_at, jobs.c.next_attempt, jobs.c.parent_id, jobs.c.shard,
    jobs.c.shard_total, jobs.c.runs_done,
]

#: What the results transaction reads of each job (its definition likewise);
#: ``has_downstream``: whether a run's end may trigger other jobs.
RESULT_COLUMNS = [
    jobs.c.id, jobs.c.name, jobs.c.state, jobs.c.fire_id, jobs.c.owner_session,
    jobs.c.updated_at, jobs.c.runs_done, jobs.c.last_outcome, jobs.c.has_downstream,
    jobs.c.parent_id, jobs.c.broadcast,
]


#: What the fire transaction re-checks of each job (it has the spec in memory already).
FIRE_COLUMNS = [
    jobs.c.id, jobs.c.state, jobs.c.fire_id, jobs.c.owner_session, jobs.c.paused, jobs.c.deleted,
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Beat:
    """What one heartbeat learned: whether our session still exists, and the database
    clock with the local instant halfway through the statement that read it."""

    alive: bool
    db_now: datetime | None
    local_mid: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Watch:
    """What one watch poll learned; each field wakes one service at the right time."""

    db_now: datetime
    oldest_peer_heartbeat: datetime | None
    orphaned_jobs: int
    owned_jobs: int
    earliest_due: datetime | None
    #: The job lock's version: every management write (jobs and calendars) moves it.
    jobs_version: int = 0
    #: When the webhooks thread has work: the earliest pending delivery's next attempt,
    #: or now when an event waits to be fanned out (None: nothing).
    webhooks_due: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """What a prepare transaction did, and when the next job after its window is due."""

    prepared: list[Prepared]
    next_due: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The earliest next fire among the jobs a results transaction rescheduled."""

    next_due: datetime | None
    db_now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StartCheck:
    """The database clock at a start check, and why some fired runs must not start."""

    db_now: datetime
    #: job id -> "paused", "deleted", "kill" or "moved" (no longer this fire of ours).
    stopped: dict[int, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Owned:
    job_id: int
    state: JobState
    fire_id: str | None


class StoreBase:
    """``stop``: when set (the node fenced), every retry loop gives up and no transaction
    commits, except the results' (outcomes are facts)."""

    def __init__(self, db: Database, *, node_name: str, stop: threading.Event | None = None,
                 specs: SpecCache | None = None) -> None:
        self.db = db
        self.node_name = node_name
        self.stop = stop
        self.lock_stats = LockStats()
        self.specs = specs if specs is not None else SpecCache()

    def _specs_of(
        self, conn: Connection, found: Sequence[RowMapping]
    ) -> tuple[dict[int, JobSpec], list[tuple[RowMapping, BaseException]]]:
        """The definitions of these rows (each with ``id``, ``name``, ``fire_id`` and
        ``updated_at``): from the cache where the stamp matches, the others read in one
        statement. A definition that cannot be read comes back poisoned, with its row."""
        specs: dict[int, JobSpec] = {}
        missing: dict[int, RowMapping] = {}
        for row in found:
            spec = self.specs.get(row["id"], row["updated_at"])
            if spec is None:
                missing[row["id"]] = row
            else:
                specs[row["id"]] = spec
        poisoned: list[tuple[RowMapping, BaseException]] = []
        if missing:
            self.specs.reads += len(missing)
            for full in conn.execute(
                select(*SPEC_COLUMNS, jobs.c.updated_at).where(jobs.c.id.in_(list(missing)))
            ).mappings():
                try:
                    spec = rows.spec_from_row(full)
                except Exception as error:  # noqa: BLE001 - one job never stops a node
                    poisoned.append((missing[full["id"]], error))
                    continue
                specs[full["id"]] = spec
                self.specs.put(full["id"], full["updated_at"], spec)
        return specs, poisoned

    def calendars(self) -> list[Calendar]:
        """Every exclusion calendar: one lock-free SELECT of a small table."""
        return self.db.read(read_all, name="read_calendars", stop=self.stop)

    @staticmethod
    def _fresh_calendars(conn: Connection, planner: Planner, specs: Iterable[JobSpec]) -> None:
        """When a job names a calendar the planner lacks (created since the node's watch
        last read them), read them all again on this connection before planning: a job
        write naming a calendar commits after the calendar, so it is there."""
        for spec in specs:
            if spec.calendars and not planner.knows_calendars(spec.calendars):
                planner.use_calendars(read_all(conn))
                return

    def lock(self, conn: Connection, name: str) -> None:
        """``SELECT ... FOR UPDATE`` on a named lock row; a missing row is fatal.

        On Galera a row lock holds on one member only: two members' holders would both
        go on. There the holder writes the row (``seq``), so that of two transactions that
        held the lock at once on two members, the later to commit fails certification
        (1213) and runs again: the same order as one server's lock, kept optimistically."""
        started = time.monotonic()
        if self.db.galera:
            taken = conn.execute(
                update(locks).where(locks.c.name == name).values(seq=locks.c.seq + 1)
            ).rowcount
            found = (name,) if taken == 1 else None
        else:
            found = conn.execute(
                select(locks.c.name).where(locks.c.name == name).with_for_update()
            ).first()
        waited = time.monotonic() - started
        self.lock_stats.waits += 1
        self.lock_stats.wait_s += waited
        self.lock_stats.by_name[name] = self.lock_stats.by_name.get(name, 0.0) + waited
        if found is None:
            raise SchemaError(f"lock row {name!r} is missing from ql_locks: refusing to run")

    @staticmethod
    def _due_filter(tag_sets: Sequence[str], session_id: str) -> list[Any]:
        """Due jobs this node may prepare: idle, not paused nor deleted, its tags match,
        not saturated (a concurrent or broadcast job whose lanes are all busy), and not
        a broadcast lane pinned to another node."""
        return [
            jobs.c.state == JobState.IDLE.value,
            jobs.c.paused.is_(False),
            jobs.c.deleted.is_(False),
            jobs.c.next_fire_at.is_not(None),
            jobs.c.tags.in_(list(tag_sets)),
            jobs.c.saturated.is_(False),
            or_(jobs.c.pinned_session.is_(None), jobs.c.pinned_session == session_id),
        ]

    @staticmethod
    def _prepared_from_row(row: RowMapping) -> Prepared:
        return Prepared(
            job_id=row["id"], name=row["name"], fire_id=row["fire_id"],
            planned_at=utc(row["next_fire_at"]),
            slot_at=utc(row["next_slot_at"] or row["next_fire_at"]),
            attempt=row["next_attempt"], spec=rows.spec_from_row(row),
            parent_id=row["parent_id"], shard=rows.shard_of(row["shard"], row["shard_total"]),
        )

    def _quarantine(
        self, conn: Connection, poisoned: Sequence[tuple[RowMapping, BaseException]], now: datetime
    ) -> None:
        self._quarantine_ids(
            conn, [(r["id"], r["name"], r["fire_id"], error) for r, error in poisoned], now
        )

    def _quarantine_ids(
        self, conn: Connection, poisoned: Sequence[tuple[int, str, str | None, BaseException]],
        now: datetime,
    ) -> None:
        """Jobs the node could not plan (their schedule or stored definition fails):
        paused, with the reason on the job and in its history; the node carries on."""
        for job_id, name, fire_id, error in poisoned:
            reason = f"quarantined: the scheduler could not plan this job ({error!r}); it is paused"
            log.error("job %s %s", name, reason, extra={"action": "quarantined", "job": name})
            transitions.quarantine(conn, job_id=job_id, fire_id=fire_id, reason=reason, now=now)
            lanes.sync(conn, job_id)  # a concurrent or broadcast job's lanes pause too
            conn.execute(insert(runs).prefix_with("IGNORE").values(
                job_id=job_id, job_name=name, fire_id=None, planned_at=rows.to_db(now),
                slot_at=rows.to_db(now), attempt=1, session_id=None, node=self.node_name,
                status=RunStatus.QUARANTINED.value, output="", error=reason[:4000],
            ))

    @staticmethod
    def _orphan_owners() -> Any:
        """Owners of prepared/executing jobs that have no session row (via the owner index)."""
        return (
            select(jobs.c.owner_session)
            .select_from(jobs.outerjoin(sessions, sessions.c.id == jobs.c.owner_session))
            .where(jobs.c.owner_session.is_not(None), sessions.c.id.is_(None))
            .distinct()
        )

    @staticmethod
    def _next_values(plan: Reschedule) -> dict[str, Any]:
        return {
            "next_fire_at": rows.to_db(plan.planned_at),
            "next_slot_at": rows.to_db(plan.slot_at),
            "next_attempt": plan.attempt,
        }

    def _reschedule_values(self, job_id: int, plan: Reschedule) -> dict[str, Any]:
        return {"b_id": job_id, **self._next_values(plan)}

    @staticmethod
    def _reschedule(conn: Connection, values: list[dict[str, Any]]) -> None:
        conn.execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), jobs.c.state == JobState.IDLE.value)
            .values(
                next_fire_at=bindparam("next_fire_at"), next_slot_at=bindparam("next_slot_at"),
                next_attempt=bindparam("next_attempt"),
            ),
            values,
        )

    def _missed_rows(self, job_id: int, name: str, plan: Reschedule) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for i, slot in enumerate(plan.missed):
            error = plan.missed_reason
            if plan.missed_more and i == len(plan.missed) - 1:
                error = f"{error}; and {plan.missed_more} later slot(s) not listed"
            found.append(
                {
                    "job_id": job_id, "job_name": name, "fire_id": None,
                    "planned_at": rows.to_db(slot), "slot_at": rows.to_db(slot), "attempt": 1,
                    "session_id": None, "node": self.node_name,
                    "status": RunStatus.MISSED.value, "output": "", "error": error,
                }
            )
        return found
