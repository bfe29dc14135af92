"""Management queries: what the client (library, CLI, HTTP API) does to jobs and runs.

Every write takes the job lock first (``UPDATE ql_locks ... WHERE name='job'``, which
also bumps the lock's version: each node's watch reads it every poll and, when it
moved, reads the exclusion calendars again), so a management write never races a node's prepare or fire, and reads the
job it changes with ``FOR UPDATE``, so it never races a node's result (recorded under
row locks, not the job lock) either. Each is one transaction: on any error nothing is
written. The one
exception is pruning history (:meth:`JobStore.prune_history`): it deletes only rows that
nothing writes any more (finished runs, deleted idle jobs), in short lock-free batches.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.elements import TextClause

from quartzlite.clock import utc
from quartzlite.enums import JobState, RunStatus
from quartzlite.errors import Conflict, NotFound, SchemaError, TransientStoreError, ValidationError
from quartzlite.models import Calendar, Job, JobSpec, Page, Pruned, Reschedule, Run, Session
from quartzlite.storage import dependencies, lanes, rows, transitions
from quartzlite.storage.engine import Database, Tx
from quartzlite.storage.tables import calendars, jobs, locks, requests, runs, sessions

#: Given a spec, the database's now, the slots the job has run (``runs_done``) and the
#: calendars it names (read in the same transaction), where it goes first: its planned
#: instant and slot (None: no next fire, the job is finished).
FirstFire = Callable[[JobSpec, datetime, int, Sequence[Calendar]], Reschedule]

#: The fields whose change plans a job's next fire anew (from now).
TIMING_FIELDS = ("schedule", "timezone", "start_at", "end_at", "max_runs", "jitter_s", "calendars")


def take_job_lock(conn: Connection) -> None:
    """Take the job lock for a management write and bump its version."""
    result = conn.execute(
        update(locks).where(locks.c.name == "job").values(version=locks.c.version + 1)
    )
    if result.rowcount != 1:
        raise SchemaError("the job lock row is missing from ql_locks: run `quartzlite db upgrade`")


#: The most calendars read at once (the table is small: nodes read it whole).
MAX_CALENDARS = 10_000


def read_all(conn: Connection) -> list[Calendar]:
    """Every calendar (one SELECT)."""
    found = conn.execute(
        select(calendars).order_by(calendars.c.name).limit(MAX_CALENDARS)
    ).mappings()
    return [rows.calendar_from_row(r) for r in found]


def read_named(conn: Connection, names: Iterable[str], *, field: str = "calendars") -> list[Calendar]:
    """The calendars named ``names``, in that order; a :class:`ValidationError` naming
    ``field`` when one does not exist."""
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return []
    found = {
        r["name"]: rows.calendar_from_row(r)
        for r in conn.execute(select(calendars).where(calendars.c.name.in_(wanted))).mappings()
    }
    for name in wanted:
        if name not in found:
            raise ValidationError(field, f"unknown calendar {name!r}: create it first")
    return [found[name] for name in wanted]


def db_now(conn: Connection) -> datetime:
    value = conn.execute(select(func.now(6))).scalar_one()
    return utc(value)


#: ``ql_requests.cause`` of a slot made due by a trigger (an upstream job's end writes
#: :data:`quartzlite.storage.dependencies.UPSTREAM_CAUSE`).
TRIGGER_CAUSE = "trigger"


def add_request(
    conn: Connection, *, job_id: int, slot_at: datetime, params: Mapping[str, Any] | None,
    cause: str, upstream_run_id: int | None = None,
) -> None:
    """What the slot ``slot_at`` of the job was asked for with (one row per slot: a later
    request for the same slot replaces it). Written in the transaction that makes the
    slot due; the fire transaction copies ``params`` into the slot's run rows. Taken
    when written: the transaction plans the slot itself (``taken_at``)."""
    values = {
        "params": rows.params_to_db(params), "cause": cause,
        "upstream_run_id": upstream_run_id, "created_at": func.now(6), "taken_at": func.now(6),
    }
    statement = mysql_insert(requests).values(
        job_id=job_id, slot_at=rows.to_db(slot_at), **values
    )
    conn.execute(statement.on_duplicate_key_update(**values))


def encode_cursor(value: str | int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, *, numeric: bool) -> str | int:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        text_ = raw.decode()
        if not text_ or encode_cursor(text_) != cursor:
            raise ValueError(cursor)
        return int(text_) if numeric else text_
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValidationError("cursor", "is not a cursor this server handed out") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFilter:
    state: JobState | None = None
    paused: bool | None = None
    tag: str | None = None
    name_prefix: str | None = None
    #: The status of the job's newest run (by id, under its name); ``never`` for none.
    last_status: str | None = None


#: The ``last_status`` filter's value for jobs with no run yet.
NEVER_RAN = "never"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    job: str | None = None
    status: RunStatus | None = None
    node: str | None = None
    since: datetime | None = None
    until: datetime | None = None


#: Finished runs planned before the cut-off, oldest first (ix_ql_runs_planned).
_PRUNE_RUNS = text(
    "DELETE FROM ql_runs WHERE planned_at < :cutoff AND status <> 'running' "
    "ORDER BY planned_at LIMIT :batch"
)
#: Deleted idle jobs, deleted before the cut-off, with no runs left.
_PRUNE_JOBS = text(
    "DELETE FROM ql_jobs WHERE deleted = 1 AND state = 'idle' AND updated_at < :cutoff "
    "AND NOT EXISTS (SELECT 1 FROM ql_runs WHERE ql_runs.job_id = ql_jobs.id) LIMIT :batch"
)

#: Requests made before the cut-off whose slot the job has left (its run rows hold the
#: parameters and the upstream run), oldest first (ix_ql_requests_created). A pending
#: request (not taken yet) is kept while its job lives (a paused downstream job's wait
#: until it is resumed), and dropped once the job is deleted or gone.
_PRUNE_REQUESTS = text(
    "DELETE FROM ql_requests WHERE created_at < :cutoff AND NOT EXISTS (SELECT 1 FROM ql_jobs "
    "WHERE ql_jobs.id = ql_requests.job_id AND (ql_jobs.next_slot_at = ql_requests.slot_at "
    "OR (ql_requests.taken_at IS NULL AND ql_jobs.deleted = 0))) "
    "ORDER BY created_at LIMIT :batch"
)

#: Audit entries past the audit retention (an index range on recorded_at).
_PRUNE_AUDIT = text(
    "DELETE FROM ql_audit WHERE recorded_at < :cutoff ORDER BY recorded_at LIMIT :batch"
)


class JobStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- history -----------------------------------------------------------------

    #: Rows deleted per statement: each DELETE holds its row locks for milliseconds.
    PRUNE_BATCH = 5000

    def prune_history(
        self, older_than_s: float, *, batch: int = PRUNE_BATCH, stop: threading.Event | None = None
    ) -> Pruned:
        """Delete finished runs planned more than ``older_than_s`` ago (database clock),
        then deleted jobs that are idle, were deleted before the cut-off and have no runs
        left, and trigger requests made before the cut-off whose slot the job has left.
        Autocommitted batches in ``planned_at`` order (an index range, no sort):
        an interrupted pass leaves only whole batches deleted, and the next goes on.
        ``stop`` (a node's fence) ends the pass before its next batch."""
        before = self._cutoff(older_than_s)
        totals = [
            self._delete_batches(statement, before, batch=batch, stop=stop)
            for statement in (_PRUNE_RUNS, _PRUNE_JOBS, _PRUNE_REQUESTS)
        ]
        return Pruned(runs=totals[0], jobs=totals[1], before=before, requests=totals[2])

    def prune_audit(
        self, older_than_s: float, *, batch: int = PRUNE_BATCH, stop: threading.Event | None = None
    ) -> tuple[int, datetime]:
        """Delete audit entries recorded more than ``older_than_s`` ago (database clock),
        in autocommitted batches; (entries deleted, the cut-off)."""
        before = self._cutoff(older_than_s)
        return self._delete_batches(_PRUNE_AUDIT, before, batch=batch, stop=stop), before

    def _cutoff(self, older_than_s: float) -> datetime:
        with self.db.connect() as conn:
            return db_now(conn) - timedelta(seconds=older_than_s)

    def _delete_batches(
        self, statement: TextClause, before: datetime, *, batch: int, stop: threading.Event | None
    ) -> int:
        """Run a ``DELETE ... LIMIT :batch`` until it deletes fewer than ``batch`` rows."""
        params = {"cutoff": rows.to_db(before), "batch": batch}

        def one_batch(conn: Connection) -> int:
            return int(conn.execute(statement, params).rowcount)

        total = 0
        while True:
            if stop is not None and stop.is_set():
                raise TransientStoreError("prune stopped")
            count = self.db.read(one_batch, name="prune", stop=stop)
            total += count
            if count < batch:
                return total

    # -- reads -------------------------------------------------------------------

    def now(self) -> datetime:
        with self.db.connect() as conn:
            return db_now(conn)

    def get(self, name: str) -> Job:
        with self.db.connect() as conn:
            row = self._row(conn, name)
        return rows.job_from_row(row)

    def _row(self, conn: Connection, name: str, *, lock: bool = False) -> RowMapping:
        row = self._find(conn, name, lock=lock)
        if row is None:
            raise NotFound(f"no job named {name!r}", details={"job": name})
        return row

    def list_jobs(self, flt: JobFilter, *, limit: int, cursor: str | None) -> Page[Job]:
        query = select(jobs).where(jobs.c.deleted.is_(False), jobs.c.parent_id.is_(None))
        if flt.state is not None:
            query = query.where(jobs.c.state == flt.state.value)
        if flt.paused is not None:
            query = query.where(jobs.c.paused.is_(flt.paused))
        if flt.tag is not None:
            query = query.where(func.find_in_set(flt.tag, jobs.c.tags) > 0)
        if flt.name_prefix:
            escaped = flt.name_prefix.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")
            query = query.where(jobs.c.active_name.like(escaped + "%"))
        if flt.last_status is not None:
            # One backward dive into ix_ql_runs_job_name per job scanned, in name order.
            newest = (
                select(runs.c.status).where(runs.c.job_name == jobs.c.active_name)
                .order_by(runs.c.id.desc()).limit(1).correlate(jobs).scalar_subquery()
            )
            if flt.last_status == NEVER_RAN:
                query = query.where(newest.is_(None))
            else:
                query = query.where(newest == flt.last_status)
        if cursor is not None:
            query = query.where(jobs.c.active_name > decode_cursor(cursor, numeric=False))
        query = query.order_by(jobs.c.active_name).limit(limit + 1)
        with self.db.connect() as conn:
            found = [rows.job_from_row(r) for r in conn.execute(query).mappings()]
        more = len(found) > limit
        items = found[:limit]
        return Page(items=items, next_cursor=encode_cursor(items[-1].name) if more else None)

    def runs(self, flt: RunFilter, *, limit: int, cursor: str | None) -> Page[Run]:
        query = select(runs)
        if flt.job is not None:
            query = query.where(runs.c.job_name == flt.job)
        if flt.status is not None:
            query = query.where(runs.c.status == flt.status.value)
        if flt.node is not None:
            query = query.where(or_(runs.c.node == flt.node, runs.c.session_id == flt.node))
        if flt.since is not None:
            query = query.where(runs.c.planned_at >= rows.to_db(flt.since))
        if flt.until is not None:
            query = query.where(runs.c.planned_at < rows.to_db(flt.until))
        if cursor is not None:
            query = query.where(runs.c.id < decode_cursor(cursor, numeric=True))
        query = query.order_by(runs.c.id.desc()).limit(limit + 1)
        with self.db.connect() as conn:
            found = [rows.run_from_row(r) for r in conn.execute(query).mappings()]
        more = len(found) > limit
        items = found[:limit]
        return Page(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)

    def last_statuses(self, names: Sequence[str]) -> dict[str, RunStatus]:
        """The status of each named job's newest run (by id); names with no run are
        left out. One backward dive into ix_ql_runs_job_name per name."""
        if not names:
            return {}
        newest = (
            select(func.max(runs.c.id)).where(runs.c.job_name.in_(list(names)))
            .group_by(runs.c.job_name)
        )
        query = select(runs.c.job_name, runs.c.status).where(runs.c.id.in_(newest))
        with self.db.connect() as conn:
            return {name: RunStatus(status) for name, status in conn.execute(query)}

    def get_run(self, run_id: int) -> Run:
        with self.db.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
        if row is None:
            raise NotFound(f"no run with id {run_id}", details={"run": run_id})
        return rows.run_from_row(row)

    def with_last_run(self, name: str) -> tuple[Job, Run | None]:
        """The job and its latest run (not counting missed slots), as of one moment."""
        with self.db.snapshot() as conn:
            job = rows.job_from_row(self._row(conn, name))
            row = (
                conn.execute(
                    select(runs)
                    .where(runs.c.job_id == job.id, runs.c.status != RunStatus.MISSED.value)
                    .order_by(runs.c.planned_at.desc())
                    .limit(1)
                )
                .mappings()
                .first()
            )
        return job, None if row is None else rows.run_from_row(row)

    def downstream(self, name: str) -> list[str]:
        """The names of the live jobs that name job ``name`` upstream, sorted."""
        with self.db.connect() as conn:
            return dependencies.downstream_names(conn, name)

    def sessions(self) -> list[Session]:
        with self.db.connect() as conn:
            return self.sessions_in(conn)

    @staticmethod
    def sessions_in(conn: Connection) -> list[Session]:
        """Every session with the jobs it has executing, read on ``conn``."""
        found = conn.execute(select(sessions).order_by(sessions.c.started_at)).mappings().all()
        running = conn.execute(
            select(jobs.c.owner_session, jobs.c.name).where(jobs.c.state == JobState.EXECUTING.value)
        ).all()
        by_session: dict[str, list[str]] = {}
        for owner, name in running:
            by_session.setdefault(owner, []).append(name)
        return [
            rows.session_from_row(r, tuple(sorted(by_session.get(r["id"], [])))) for r in found
        ]

    # -- writes ------------------------------------------------------------------

    def add(self, spec: JobSpec, planner: FirstFire) -> Job:
        def tx(t: Tx) -> Job:
            take_job_lock(t.conn)
            existing = self._find(t.conn, spec.name, lock=True)
            if existing is not None:
                if t.after_unknown and rows.spec_from_row(existing) == spec:
                    return rows.job_from_row(existing)  # our own earlier commit
                raise Conflict(f"a job named {spec.name!r} exists", details={"job": spec.name})
            job = self._insert(t.conn, spec, planner, read_named(t.conn, spec.calendars))
            dependencies.link(t.conn, name=spec.name, upstream=spec.upstream)
            return job

        return self.db.transaction(tx, name="add_job")

    def add_many(self, specs: Sequence[JobSpec], planner: FirstFire) -> int:
        """Insert many new jobs in one transaction (all or nothing); the bulk path."""

        def tx(t: Tx) -> int:
            take_job_lock(t.conn)
            names = [s.name for s in specs]
            taken: set[str] = set()
            for start in range(0, len(names), 1000):
                chunk = names[start : start + 1000]
                taken.update(
                    r[0]
                    for r in t.conn.execute(
                        select(jobs.c.active_name).where(jobs.c.active_name.in_(chunk))
                    )
                )
            if taken and not t.after_unknown:
                first = sorted(taken)[0]
                raise Conflict(
                    f"{len(taken)} job name(s) exist, e.g. {first!r}", details={"job": first}
                )
            named = {n for s in specs for n in s.calendars}
            known = {
                c.name: c for c in (
                    rows.calendar_from_row(r) for r in t.conn.execute(
                        select(calendars).where(calendars.c.name.in_(sorted(named)))
                    ).mappings()
                )
            } if named else {}
            for index, s in enumerate(specs):
                for name in s.calendars:
                    if name not in known:
                        raise ValidationError(
                            f"jobs[{index}].calendars", f"unknown calendar {name!r}: create it first"
                        )
            now = db_now(t.conn)
            values = [
                self._insert_values(s, planner, now, [known[n] for n in s.calendars])
                for s in specs if s.name not in taken
            ]
            for start in range(0, len(values), 1000):
                t.conn.execute(jobs.insert(), values[start : start + 1000])
            # After the inserts: a job may name another of the same batch upstream.
            for index, s in enumerate(specs):
                if s.upstream and s.name not in taken:
                    dependencies.link(t.conn, name=s.name, upstream=s.upstream,
                                      field=f"jobs[{index}].upstream")
            return len(values)

        return self.db.transaction(tx, name="add_jobs", retry=None)

    def upsert(self, spec: JobSpec, planner: FirstFire) -> tuple[Job, bool]:
        """Create or replace by name. Returns the job and whether anything changed;
        publishing the same definition twice changes nothing (not even updated_at)."""

        def tx(t: Tx) -> tuple[Job, bool]:
            take_job_lock(t.conn)
            existing = self._find(t.conn, spec.name, lock=True)
            named = read_named(t.conn, spec.calendars)
            if existing is None:
                job = self._insert(t.conn, spec, planner, named)
                dependencies.link(t.conn, name=spec.name, upstream=spec.upstream)
                return job, True
            if rows.spec_from_row(existing) == spec:
                return rows.job_from_row(existing), False
            return self._replace(t.conn, existing, spec, planner, named), True

        return self.db.transaction(tx, name="upsert_job")

    def update(
        self, name: str, change: Callable[[JobSpec], JobSpec], planner: FirstFire
    ) -> tuple[Job, bool]:
        """Apply ``change`` (which validates, and may raise) to the stored spec."""

        def tx(t: Tx) -> tuple[Job, bool]:
            take_job_lock(t.conn)
            existing = self._row(t.conn, name, lock=True)
            new = change(rows.spec_from_row(existing))
            named = read_named(t.conn, new.calendars)
            if rows.spec_from_row(existing) == new:
                return rows.job_from_row(existing), False
            return self._replace(t.conn, existing, new, planner, named), True

        return self.db.transaction(tx, name="update_job")

    def delete(self, name: str) -> Job:
        """Mark deleted (history kept); the name becomes free. A prepared job is
        taken back from its node; a run fired ahead of its instant does not start (its
        node checks at the instant); a running one finishes (kill it to stop it)."""

        def tx(t: Tx) -> Job:
            take_job_lock(t.conn)
            existing = self._row(t.conn, name, lock=True)
            dependencies.refuse_delete(t.conn, existing)
            values: dict[str, Any] = {
                "deleted": True,
                "active_name": None,
                "updated_at": func.now(6),
            }
            t.conn.execute(update(jobs).where(jobs.c.id == existing["id"]).values(**values))
            transitions.hand_back(t.conn, jobs.c.id == existing["id"])
            self._lanes_follow(t.conn, existing["id"], hand_back=True)
            if existing["upstream"]:
                # Its upstream jobs may have no live downstream job left; nobody takes
                # the requests they left pending for it.
                dependencies.refresh_has_downstream(t.conn, rows.split_tags(existing["upstream"]))
                dependencies.drop_pending(t.conn, existing["id"])
            return self._by_id(t.conn, existing["id"])

        return self.db.transaction(tx, name="delete_job")

    def trigger(self, name: str, params: Mapping[str, Any] | None = None) -> Job:
        """Due now, as a fresh slot. A prepared job is taken back from its node first.
        ``params`` (validated by the caller): recorded as the slot's request, which the
        fire transaction copies into the slot's run rows."""

        def tx(t: Tx) -> Job:
            take_job_lock(t.conn)
            existing = self._row(t.conn, name, lock=True)
            if existing["state"] == JobState.EXECUTING.value:
                raise Conflict(f"job {name!r} is running", details={"job": name})
            if existing["paused"]:
                raise Conflict(f"job {name!r} is paused: resume it first", details={"job": name})
            now = db_now(t.conn)
            dependencies.release_taken(t.conn, existing)  # the trigger replaces its next fire
            transitions.trigger(t.conn, existing["id"], now)
            if params:
                add_request(t.conn, job_id=existing["id"], slot_at=now, params=params,
                            cause=TRIGGER_CAUSE)
            return self._by_id(t.conn, existing["id"])

        return self.db.transaction(tx, name="trigger_job")

    def request_kill(self, name: str) -> Job:
        def tx(t: Tx) -> Job:
            take_job_lock(t.conn)
            existing = self._row(t.conn, name, lock=True)
            if rows.spec_from_row(existing).lanes:
                # Its runs are its lanes': every one running is killed.
                killed = t.conn.execute(
                    update(jobs)
                    .where(jobs.c.parent_id == existing["id"],
                           jobs.c.state == JobState.EXECUTING.value)
                    .values(kill_requested=True)
                ).rowcount
                if not killed:
                    raise Conflict(f"job {name!r} is not running", details={"job": name})
                return self._by_id(t.conn, existing["id"])
            if existing["state"] != JobState.EXECUTING.value:
                raise Conflict(f"job {name!r} is not running", details={"job": name})
            t.conn.execute(
                update(jobs)
                .where(jobs.c.id == existing["id"], jobs.c.fire_id == existing["fire_id"])
                .values(kill_requested=True)
            )
            return self._by_id(t.conn, existing["id"])

        return self.db.transaction(tx, name="kill_job")

    def set_paused(self, name: str, paused: bool, planner: FirstFire) -> Job:
        """Pause: a prepared job is taken back from its node, a run fired ahead of its
        instant does not start (its node checks at the instant), a running one finishes.
        Resume: the next fire is planned from now; slots while paused are not due."""

        def tx(t: Tx) -> Job:
            take_job_lock(t.conn)
            existing = self._row(t.conn, name, lock=True)
            if bool(existing["paused"]) == paused:
                return rows.job_from_row(existing)
            values: dict[str, Any] = {"paused": paused, "updated_at": func.now(6)}
            if not paused:
                values["error"] = None  # a quarantined job is given another chance
            if not paused and existing["state"] == JobState.IDLE.value:
                dependencies.release_taken(t.conn, existing)  # planned anew below
                spec = rows.spec_from_row(existing)
                values.update(self._first_values(planner(
                    spec, db_now(t.conn), existing["runs_done"], read_named(t.conn, spec.calendars)
                )))
            t.conn.execute(update(jobs).where(jobs.c.id == existing["id"]).values(**values))
            if paused:
                transitions.hand_back(t.conn, jobs.c.id == existing["id"])
            self._lanes_follow(t.conn, existing["id"], hand_back=paused)
            return self._by_id(t.conn, existing["id"])

        return self.db.transaction(tx, name="pause_job" if paused else "resume_job")

    # -- helpers -----------------------------------------------------------------

    def _find(self, conn: Connection, name: str, *, lock: bool = False) -> RowMapping | None:
        """The job named ``name``; with ``lock``, its row locked until the transaction
        ends (a write decides on what it read: a node records a result under row locks,
        not the job lock, and must not change the row between the two)."""
        query = select(jobs).where(jobs.c.active_name == name)
        return conn.execute(query.with_for_update() if lock else query).mappings().first()

    def _by_id(self, conn: Connection, job_id: int) -> Job:
        return rows.job_from_row(conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().one())

    @staticmethod
    def _first_values(plan: Reschedule) -> dict[str, Any]:
        return {
            "next_fire_at": rows.to_db(plan.planned_at),
            "next_slot_at": rows.to_db(plan.slot_at),
            "next_attempt": 1,
        }

    def _insert_values(
        self, spec: JobSpec, planner: FirstFire, now: datetime, named: Sequence[Calendar]
    ) -> dict[str, Any]:
        return {
            **rows.spec_values(spec),
            "active_name": spec.name,
            **transitions.created(),
            **self._first_values(planner(spec, now, 0, named)),
            "created_at": rows.to_db(now),
            "updated_at": rows.to_db(now),
        }

    def _insert(
        self, conn: Connection, spec: JobSpec, planner: FirstFire, named: Sequence[Calendar]
    ) -> Job:
        result = conn.execute(
            jobs.insert().values(**self._insert_values(spec, planner, db_now(conn), named))
        )
        key = result.inserted_primary_key
        assert key is not None
        return self._by_id(conn, int(key[0]))

    @staticmethod
    def _lanes_follow(conn: Connection, job_id: int, *, hand_back: bool) -> None:
        """The job's lanes (a concurrent or broadcast job's) take its definition as it
        is now; with ``hand_back``, a prepared one goes back (it must not run as it was).
        A running one's node sees a pause, a delete or a kill at its start check."""
        lanes.sync(conn, job_id)
        if hand_back:
            transitions.hand_back(conn, jobs.c.parent_id == job_id)

    @staticmethod
    def _refuse_lane_change(conn: Connection, existing: RowMapping, old: JobSpec,
                            spec: JobSpec) -> None:
        """Between one run at a time and lanes (or between concurrent and broadcast), the
        job's runs change hands: only while none is in flight. A job leaving lanes loses
        them (all free)."""
        if old.lanes == spec.lanes and old.broadcast == spec.broadcast:
            return
        found = lanes.lanes_of(conn, [existing["id"]], lock=True)[existing["id"]]
        if existing["state"] != JobState.IDLE.value or any(lanes.busy(lane) for lane in found):
            field = "broadcast" if old.broadcast != spec.broadcast else "max_concurrency"
            raise Conflict(
                f"job {spec.name!r} has a run in flight: {field} can change between one run "
                "at a time and several only while none is (pause the job and wait for its "
                "runs to end)", details={"job": spec.name, "field": field},
            )
        if found:
            conn.execute(delete(jobs).where(jobs.c.parent_id == existing["id"]))

    def _replace(
        self, conn: Connection, existing: RowMapping, spec: JobSpec, planner: FirstFire,
        named: Sequence[Calendar],
    ) -> Job:
        old = rows.spec_from_row(existing)
        self._refuse_lane_change(conn, existing, old, spec)
        values: dict[str, Any] = {**rows.spec_values(spec), "updated_at": func.now(6)}
        if spec.lanes or old.lanes:
            values["saturated"] = False  # the next scan looks at its lanes again
        if not spec.paused:
            values["error"] = None  # a quarantined job is given another chance
        timing_changed = any(getattr(old, f) != getattr(spec, f) for f in TIMING_FIELDS)
        state = existing["state"]
        if state == JobState.PREPARED.value and (timing_changed or spec.paused or old.tags != spec.tags):
            # Its node must not run it as it was: back to the cluster, planned anew.
            transitions.hand_back(conn, jobs.c.id == existing["id"])
            state = JobState.IDLE.value
        if state == JobState.IDLE.value and (timing_changed or (old.paused and not spec.paused)):
            # runs_done is kept: a job that ran max_runs slots stays finished unless
            # max_runs is raised.
            values.update(self._first_values(
                planner(spec, db_now(conn), existing["runs_done"], named)
            ))
            dependencies.release_taken(conn, existing)
        conn.execute(update(jobs).where(jobs.c.id == existing["id"]).values(**values))
        self._lanes_follow(conn, existing["id"], hand_back=(
            timing_changed or spec.paused or old.tags != spec.tags))
        dependencies.link(conn, name=spec.name, upstream=spec.upstream, before=old.upstream,
                          job_id=existing["id"])
        return self._by_id(conn, existing["id"])


__all__ = ["FirstFire", "JobFilter", "JobStore", "RunFilter"]
