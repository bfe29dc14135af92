"""The node's SQL: sessions, heartbeat, prepare, fire, results, hand back, expiry and
compensation (go-crontab's threads), each one short transaction under the named lock
rows: the session lock before the job lock, always.

"Exactly once" lives here as database invariants: every transition is checked
against the state, owner and fire id read under the job lock, and the run row's
UNIQUE (job_id, planned_at) refuses a second run of a slot. Nothing here spawns a
process, sleeps or waits on anything but the database while it holds a lock row.
Each method is idempotent, so the retry loop may run it again after a commit of
unknown outcome.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import and_, bindparam, delete, func, insert, literal, or_, select, text, update
from sqlalchemy.engine import Connection, RowMapping

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.errors import Fenced, SchemaError
from quartzlite.models import Finished, Fired, JobSpec, Prepared, Reschedule
from quartzlite.storage import rows, transitions
from quartzlite.storage.batch import update_from_rows
from quartzlite.storage.engine import Database, RetryPolicy, Tx
from quartzlite.storage.jobs import db_now
from quartzlite.storage.tables import jobs, locks, runs, sessions

log = logging.getLogger(__name__)


class Planner(Protocol):
    """The node's scheduling decisions, called inside transactions (pure functions)."""

    def misfire(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule:
        """A job found with slot ``slot_at`` later than its misfire grace."""

    def after_run(self, spec: JobSpec, finished: Finished, now: datetime) -> Reschedule:
        """Where a job goes once a run ended (retry, next slot, misfire of passed slots,
        or, for a run its node gave up, a rerun or the recovery policy)."""

    def recover(
        self, spec: JobSpec, slot_at: datetime, attempt: int, now: datetime
    ) -> Reschedule:
        """Where a job goes when its run was abandoned (its node died)."""

    def skip(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule:
        """The next slot after ``slot_at``, which must not run (it already ran)."""


@dataclass(slots=True)
class LockStats:
    """Time spent waiting for lock rows, for metrics."""

    waits: int = 0
    wait_s: float = 0.0
    by_name: dict[str, float] = field(default_factory=dict)


_SPEC_COLUMNS = [
    jobs.c.id, jobs.c.name, jobs.c.schedule, jobs.c.timezone, jobs.c.target_kind,
    jobs.c.command, jobs.c.callable, jobs.c.kwargs, jobs.c.timeout_s, jobs.c.max_attempts,
    jobs.c.retry_backoff_s, jobs.c.retry_max_backoff_s, jobs.c.misfire_policy,
    jobs.c.misfire_grace_s, jobs.c.recovery_policy, jobs.c.priority, jobs.c.tags,
    jobs.c.description, jobs.c.paused, jobs.c.deleted, jobs.c.state, jobs.c.next_fire_at,
    jobs.c.next_slot_at, jobs.c.next_attempt, jobs.c.owner_session, jobs.c.fire_id,
]


#: What the fire transaction re-checks of each job (it has the spec in memory already).
_FIRE_COLUMNS = [
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


class NodeStore:
    """``stop``: when set (the node fenced), every retry loop here gives up and no
    transaction commits, except :meth:`complete`'s (outcomes are facts)."""

    def __init__(self, db: Database, *, node_name: str, stop: threading.Event | None = None) -> None:
        self.db = db
        self.node_name = node_name
        self.stop = stop
        self.lock_stats = LockStats()

    # -- locks -------------------------------------------------------------------

    def lock(self, conn: Connection, name: str) -> None:
        """``SELECT ... FOR UPDATE`` on a named lock row; a missing row is fatal."""
        started = time.monotonic()
        found = conn.execute(
            select(locks.c.name).where(locks.c.name == name).with_for_update()
        ).first()
        waited = time.monotonic() - started
        self.lock_stats.waits += 1
        self.lock_stats.wait_s += waited
        self.lock_stats.by_name[name] = self.lock_stats.by_name.get(name, 0.0) + waited
        if found is None:
            raise SchemaError(f"lock row {name!r} is missing from ql_locks: refusing to run")

    # -- sessions ----------------------------------------------------------------

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
                    version=version,
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
            "capacity = capacity + 0 * LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)) "
            "WHERE id = :me"
        )

        def run(conn: Connection) -> Beat:
            before = local_now()
            result = conn.execute(statement, {"offset": clock_offset_ms, "me": session_id})
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
        poll interval: the oldest peer heartbeat, orphaned and owned job counts, and the
        earliest due job this node may run. Every part is an index lookup: the cost does not grow with the
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
        owned = (
            select(func.count())
            .select_from(jobs)
            .where(jobs.c.owner_session == session_id, jobs.c.state != JobState.IDLE.value)
            .scalar_subquery()
        )
        earliest = select(func.min(jobs.c.next_fire_at)).where(*self._due_filter(tag_sets)).scalar_subquery()
        query = select(func.now(6), peers, orphans, owned, earliest)

        def run(conn: Connection) -> Watch:
            now, oldest, orphaned, mine, due = conn.execute(query).one()
            return Watch(
                db_now=utc(now),
                oldest_peer_heartbeat=None if oldest is None else utc(oldest),
                orphaned_jobs=int(orphaned or 0), owned_jobs=int(mine or 0),
                earliest_due=None if due is None else utc(due),
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
            return True

        return self.db.transaction(tx, name="delete_session", stop=self.stop)

    # -- scan and prepare --------------------------------------------------------

    @staticmethod
    def _due_filter(tag_sets: Sequence[str]) -> list[Any]:
        return [
            jobs.c.state == JobState.IDLE.value,
            jobs.c.paused.is_(False),
            jobs.c.deleted.is_(False),
            jobs.c.next_fire_at.is_not(None),
            jobs.c.tags.in_(list(tag_sets)),
        ]

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
            found = t.conn.execute(
                select(*_SPEC_COLUMNS)
                .where(*self._due_filter(tag_sets), jobs.c.next_fire_at <= rows.to_db(horizon))
                .order_by(jobs.c.priority.desc(), jobs.c.next_fire_at)
                .limit(limit)
            ).mappings().all()
            result: list[Prepared] = []
            moved: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            poisoned: list[tuple[RowMapping, BaseException]] = []
            for row in found:
                try:
                    spec = rows.spec_from_row(row)
                    planned_at = utc(row["next_fire_at"])
                    slot_at = utc(row["next_slot_at"] or row["next_fire_at"])
                    attempt = row["next_attempt"]
                    if attempt == 1 and planned_at < now - timedelta(seconds=spec.misfire_grace_s):
                        plan = planner.misfire(spec, slot_at, now)
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
            select(*_SPEC_COLUMNS).where(
                jobs.c.owner_session == session_id,
                jobs.c.state == JobState.PREPARED.value,
                jobs.c.fire_id.like(fire_prefix.replace("%", r"\%").replace("_", r"\_") + "%"),
            )
        ).mappings().all()
        return [self._prepared_from_row(r) for r in found if r["id"] not in known]

    @staticmethod
    def _prepared_from_row(row: RowMapping) -> Prepared:
        return Prepared(
            job_id=row["id"], name=row["name"], fire_id=row["fire_id"],
            planned_at=utc(row["next_fire_at"]),
            slot_at=utc(row["next_slot_at"] or row["next_fire_at"]),
            attempt=row["next_attempt"], spec=rows.spec_from_row(row),
        )

    # -- fire --------------------------------------------------------------------

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
                select(*_FIRE_COLUMNS).where(jobs.c.id.in_([p.job_id for p in due]))
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
        its result writes when it did."""
        source = select(
            jobs.c.id, jobs.c.name, jobs.c.fire_id, jobs.c.next_fire_at,
            func.coalesce(jobs.c.next_slot_at, jobs.c.next_fire_at), jobs.c.next_attempt,
            literal(session_id), literal(self.node_name), literal(RunStatus.RUNNING.value),
        ).where(
            jobs.c.id.in_([p.job_id for p in to_fire]),
            jobs.c.fire_id.in_([p.fire_id for p in to_fire]),
            jobs.c.state == JobState.EXECUTING.value,
        )
        conn.execute(
            insert(runs).prefix_with("IGNORE").from_select(
                ["job_id", "job_name", "fire_id", "planned_at", "slot_at", "attempt",
                 "session_id", "node", "status"],
                source,
            )
        )

    @staticmethod
    def _match_runs(
        conn: Connection, to_fire: Sequence[Prepared], now: datetime
    ) -> tuple[list[Fired], list[Prepared]]:
        """Each fired job's run row: ours (fired), or another fire's (a duplicate slot)."""
        stored = {
            (r["job_id"], utc(r["planned_at"])): r
            for r in conn.execute(
                select(runs.c.id, runs.c.job_id, runs.c.planned_at, runs.c.fire_id).where(
                    runs.c.job_id.in_([p.job_id for p in to_fire]),
                    runs.c.planned_at.in_({rows.to_db(p.planned_at) for p in to_fire}),
                )
            ).mappings()
        }
        fired: list[Fired] = []
        duplicates: list[Prepared] = []
        for p in to_fire:
            run = stored.get((p.job_id, p.planned_at))
            if run is None or run["fire_id"] != p.fire_id:
                duplicates.append(p)
            else:
                fired.append(Fired(prepared=p, run_id=run["id"], fired_at=now))
        return fired, duplicates

    def _refuse_duplicates(
        self, conn: Connection, duplicates: Sequence[Prepared], planner: Planner, now: datetime
    ) -> None:
        """The slot already has a run (the UNIQUE key refused ours): never run it again;
        move the job on to its next slot."""
        for p in duplicates:
            log.warning(
                "slot %s of job %s already ran; skipping it", p.planned_at.isoformat(), p.name,
                extra={"action": "duplicate_refused", "job": p.name},
            )
            try:
                plan = planner.skip(p.spec, p.planned_at, now)
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                self._quarantine_ids(conn, [(p.job_id, p.name, p.fire_id, error)], now)
                continue
            transitions.refuse_duplicate(
                conn, job_id=p.job_id, fire_id=p.fire_id, planned_at=plan.planned_at,
                slot_at=plan.slot_at, attempt=plan.attempt,
            )

    def start_check(self, session_id: str, items: Sequence[Prepared]) -> StartCheck:
        """At the instant of runs fired ahead of it: the database clock, and those whose
        job was paused, deleted or asked to die since (or is no longer this fire of
        ours). One autocommitted consistent read that locks nothing and returns only
        the exceptions (usually none)."""
        anchor = select(literal(1).label("one")).subquery("anchor")
        changed = and_(
            jobs.c.id.in_([p.job_id for p in items]),
            or_(
                jobs.c.paused.is_(True), jobs.c.deleted.is_(True),
                jobs.c.kill_requested.is_(True), jobs.c.state != JobState.EXECUTING.value,
                jobs.c.owner_session != session_id,
                jobs.c.fire_id.not_in([p.fire_id for p in items]),
            ),
        )
        query = select(
            func.now(6), jobs.c.id, jobs.c.state, jobs.c.owner_session, jobs.c.fire_id,
            jobs.c.paused, jobs.c.deleted, jobs.c.kill_requested,
        ).select_from(anchor.outerjoin(jobs, changed))
        fire_ids = {p.job_id: p.fire_id for p in items}

        def run(conn: Connection) -> StartCheck:
            found = conn.execute(query).all()
            stopped: dict[int, str] = {}
            for _now, job_id, state, owner, fire_id, paused, deleted, kill in found:
                if job_id is None:
                    continue
                if (state != JobState.EXECUTING.value or owner != session_id
                        or fire_id != fire_ids.get(job_id)):
                    stopped[job_id] = "moved"
                elif kill:
                    stopped[job_id] = "kill"
                elif deleted:
                    stopped[job_id] = "deleted"
                elif paused:
                    stopped[job_id] = "paused"
            return StartCheck(db_now=utc(found[0][0]), stopped=stopped)

        return self.db.read(run, retry=RetryPolicy(deadline_s=0), name="start_check")

    # -- results -----------------------------------------------------------------

    def complete(
        self, *, session_id: str, finished: Sequence[Finished], planner: Planner, stop: Any = None
    ) -> Completed:
        """executing -> idle and the run row completed, for a batch of results.
        Retried until the outcome is known; rows whose fire id moved on are left alone
        (we already recorded them, or we were evicted and a peer recovered them)."""

        def tx(t: Tx) -> Completed:
            self.lock(t.conn, "job")
            now = db_now(t.conn)
            current = {
                r["id"]: r
                for r in t.conn.execute(
                    select(*_SPEC_COLUMNS).where(
                        jobs.c.id.in_([f.fired.prepared.job_id for f in finished])
                    )
                ).mappings()
            }
            run_values: list[dict[str, Any]] = []
            job_values: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            poisoned: list[tuple[RowMapping, BaseException]] = []
            for item in finished:
                p = item.fired.prepared
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
                if (
                    row is None
                    or row["state"] != JobState.EXECUTING.value
                    or row["fire_id"] != p.fire_id
                    or row["owner_session"] != session_id
                ):
                    continue
                try:
                    spec = rows.spec_from_row(row)
                    plan = planner.after_run(spec, item, now)
                except Exception as error:  # noqa: BLE001 - one job never stops a node
                    poisoned.append((row, error))
                    continue
                missed.extend(self._missed_rows(p.job_id, spec.name, plan))
                job_values.append(
                    {
                        "id": p.job_id, "fire_id": p.fire_id,
                        "last_ended_at": rows.to_db(item.ended_at),
                        **self._next_values(plan),
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
            self._quarantine(t.conn, poisoned, now)
            upcoming = [v["next_fire_at"] for v in job_values if v["next_fire_at"] is not None]
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
                r["id"]: rows.spec_from_row(r)
                for r in conn.execute(
                    select(*_SPEC_COLUMNS).where(jobs.c.id.in_({e.job_id for e in entries}))
                ).mappings()
            }
        finished: list[Finished] = []
        for e in entries:
            spec = found.get(e.job_id)
            if spec is None:
                continue
            prepared = Prepared(job_id=e.job_id, name=e.name, fire_id=e.fire_id, planned_at=e.planned_at,
                                slot_at=e.slot_at, attempt=e.attempt, spec=spec)
            finished.append(Finished(
                fired=Fired(prepared=prepared, run_id=e.run_id, fired_at=e.fired_at),
                outcome=e.outcome, ended_at=e.ended_at, started_at=e.started_at,
            ))
        return finished

    # -- hand back, kill, compensation, expiry ---------------------------------------

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
                select(*_SPEC_COLUMNS).where(
                    jobs.c.owner_session == session_id, jobs.c.state != JobState.IDLE.value
                )
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
                .union_all(self._orphan_owners().limit(1))
            ).first()
        if hint is None:
            return []

        def tx(t: Tx) -> list[str]:
            self.lock(t.conn, "session")
            self.lock(t.conn, "job")
            now = db_now(t.conn)
            cutoff = now - timedelta(seconds=session_timeout_s)
            dead = [
                r[0]
                for r in t.conn.execute(
                    select(sessions.c.id).where(
                        sessions.c.heartbeat_at < rows.to_db(cutoff), sessions.c.id != session_id
                    )
                )
            ]
            # Jobs owned by a session row that no longer exists (deleted by hand, say)
            # are recovered the same way.
            dead += [r[0] for r in t.conn.execute(self._orphan_owners().limit(100))]
            if not dead:
                return []
            owned = t.conn.execute(
                select(*_SPEC_COLUMNS).where(
                    jobs.c.owner_session.in_(dead), jobs.c.state != JobState.IDLE.value
                )
            ).mappings().all()
            prepared = [r["id"] for r in owned if r["state"] == JobState.PREPARED.value]
            if prepared:
                transitions.hand_back(t.conn, jobs.c.id.in_(prepared))
            executing = [r for r in owned if r["state"] == JobState.EXECUTING.value]
            if executing:
                self._recover(t.conn, executing, now, planner, reason="its node's session expired")
            t.conn.execute(delete(sessions).where(sessions.c.id.in_(dead)))
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
        job on per its recovery policy (rerun the slot, or skip to the next)."""
        poisoned: list[tuple[RowMapping, BaseException]] = []
        for row in executing:
            try:
                spec = rows.spec_from_row(row)
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                poisoned.append((row, error))
                continue
            run = conn.execute(
                select(runs.c.id, runs.c.slot_at, runs.c.attempt, runs.c.planned_at).where(
                    runs.c.job_id == row["id"], runs.c.fire_id == row["fire_id"]
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
            try:
                plan = planner.recover(spec, slot_at, attempt, now)
            except Exception as error:  # noqa: BLE001 - one job never stops a node
                poisoned.append((row, error))
                continue
            missed = self._missed_rows(row["id"], spec.name, plan)
            if missed:
                conn.execute(insert(runs).prefix_with("IGNORE"), missed)
            transitions.abandon(conn, job_id=row["id"], fire_id=row["fire_id"],
                                planned_at=plan.planned_at, slot_at=plan.slot_at, attempt=plan.attempt)
        self._quarantine(conn, poisoned, now)

    # -- quarantine ----------------------------------------------------------------

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
            conn.execute(insert(runs).prefix_with("IGNORE").values(
                job_id=job_id, job_name=name, fire_id=None, planned_at=rows.to_db(now),
                slot_at=rows.to_db(now), attempt=1, session_id=None, node=self.node_name,
                status=RunStatus.QUARANTINED.value, output="", error=reason[:4000],
            ))

    # -- helpers -----------------------------------------------------------------

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



__all__ = ["Beat", "Completed", "LockStats", "NodeStore", "Owned", "Planner", "Scan", "Watch"]
