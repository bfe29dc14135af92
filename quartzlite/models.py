"""Value objects. Frozen, keyword-only, no I/O; storage maps rows to and from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from quartzlite.enums import (
    AuditSource,
    DeliveryStatus,
    EventType,
    JobState,
    MisfirePolicy,
    OverrunPolicy,
    RecoveryPolicy,
    Role,
    RunStatus,
    TargetKind,
    UpstreamCondition,
)

T = TypeVar("T")

#: The schedule of a job that has no slots of its own: it runs when triggered, by an
#: operator or when one of its upstream jobs ends (``JobSpec.upstream``).
MANUAL_SCHEDULE = "@manual"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What to run and when: the part of a job a user writes.

    Exactly one of ``command`` (run with ``bash -c``) and ``callable``
    (``package.module:function``, called with ``kwargs``) is set.
    """

    name: str
    schedule: str
    timezone: str = "UTC"
    #: No slot before this instant fires (for ``@every``, the slots are ``start_at + k *
    #: period``); None: from now.
    start_at: datetime | None = None
    #: No slot after this instant fires; once past it the job has no next fire.
    end_at: datetime | None = None
    #: The job runs at most this many slots (a slot's retries are the same run); None:
    #: no limit. Counted in ``Job.runs_done``.
    max_runs: int | None = None
    #: Each slot's planned instant is the slot plus a stable offset in [0, jitter_s]
    #: (:func:`quartzlite.schedule.jittered`).
    jitter_s: float = 0.0
    command: str | None = None
    callable: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    max_attempts: int = 1
    retry_backoff_s: float = 1.0
    retry_max_backoff_s: float = 300.0
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_grace_s: float = 60.0
    #: New jobs skip the slots that came due while their own run ran (rows stored before
    #: the field existed were migrated to ``catch_up``, the behaviour they had).
    overrun_policy: OverrunPolicy = OverrunPolicy.SKIP
    recovery_policy: RecoveryPolicy = RecoveryPolicy.RERUN
    priority: int = 0
    tags: tuple[str, ...] = ()
    description: str = ""
    paused: bool = False
    #: Names of the exclusion calendars (:class:`Calendar`) whose excluded times the
    #: job's slots skip (sorted, without repeats).
    calendars: tuple[str, ...] = ()
    #: Names of the jobs whose runs trigger this one (sorted, without repeats): when a
    #: slot of one of them ends as ``upstream_on`` says, this job runs once for that
    #: slot (its planned instant and slot are the upstream run's). A job with upstream
    #: jobs has the schedule ``@manual``.
    upstream: tuple[str, ...] = ()
    upstream_on: UpstreamCondition = UpstreamCondition.SUCCESS
    #: Up to this many runs of the job at once across the cluster, each slot still run
    #: once (1: a run waits for the one before it, the overrun policy deciding about the
    #: slots that came due meanwhile).
    max_concurrency: int = 1
    #: Every live node whose tags match the job's runs each slot: one run per node, its
    #: shard (index and total) given to it (``QUARTZLITE_SHARD_INDEX`` and
    #: ``QUARTZLITE_SHARD_TOTAL``; ``current_run().shard``).
    broadcast: bool = False

    @property
    def lanes(self) -> bool:
        """The job's runs execute on lanes (several at once, or one per node)."""
        return self.max_concurrency > 1 or self.broadcast

    @property
    def target_kind(self) -> TargetKind:
        return TargetKind.SHELL if self.command is not None else TargetKind.PYTHON

    @property
    def manual(self) -> bool:
        """The schedule is ``@manual``: no slots of its own; it runs when triggered."""
        return self.schedule.strip().lower() == MANUAL_SCHEDULE


@dataclass(frozen=True, slots=True, kw_only=True)
class CalendarRules:
    """What an exclusion calendar excludes, each in the calendar's timezone: whole local
    days (``dates``: ``YYYY-MM-DD``; ``yearly``: ``MM-DD`` every year; ``ranges``:
    inclusive ``(from, to)`` pairs of ``YYYY-MM-DD``) and the instants whose wall time
    matches a cron or Quartz expression (``windows``), at its precision. Normalised by
    :func:`quartzlite.schedule.calendars.parse_rules` (sorted, without repeats)."""

    dates: tuple[str, ...] = ()
    yearly: tuple[str, ...] = ()
    ranges: tuple[tuple[str, str], ...] = ()
    windows: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Calendar:
    """A named exclusion calendar (Quartz's HolidayCalendar, AnnualCalendar and
    CronCalendar in one): the slots of a job that names it and fall in an excluded
    time are skipped (never fired, never recorded missed)."""

    name: str
    timezone: str = "UTC"
    description: str = ""
    rules: CalendarRules = field(default_factory=CalendarRules)
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as stored: its spec plus the runtime state of the go-crontab design."""

    id: int
    spec: JobSpec
    state: JobState
    deleted: bool
    next_fire_at: datetime | None
    next_slot_at: datetime | None
    next_attempt: int
    owner_session: str | None
    fire_id: str | None
    kill_requested: bool
    #: Why the scheduler quarantined the job (paused it: it could not be planned).
    error: str | None
    prepared_at: datetime | None
    started_at: datetime | None
    last_ended_at: datetime | None
    created_at: datetime
    updated_at: datetime
    #: Slots the job has run to their end (see ``JobSpec.max_runs``); never reset.
    runs_done: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def finished(self) -> bool:
        """Idle, not paused, not deleted, and no next fire: its schedule has no slot
        left (a one-shot ``@at`` that fired), its ``end_at`` passed, or it ran
        ``max_runs`` slots. Derived: the job's state stays ``idle``. A ``@manual`` job
        never has a next fire of its own: it is finished only once it ran ``max_runs``
        slots."""
        spec = self.spec
        if spec.manual and (spec.max_runs is None or self.runs_done < spec.max_runs):
            return False
        return (
            self.state is JobState.IDLE and not self.spec.paused and not self.deleted
            and self.next_fire_at is None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Shard:
    """Which part of a broadcast slot a run is: ``index`` in ``0 .. total - 1``, where
    ``total`` is the number of live nodes that matched the job when the slot fired."""

    index: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One planned execution of a job (one attempt of one slot)."""

    id: int
    job_id: int
    job_name: str
    fire_id: str | None
    planned_at: datetime
    slot_at: datetime
    attempt: int
    started_at: datetime | None
    ended_at: datetime | None
    session_id: str | None
    node: str | None
    status: RunStatus
    exit_code: int | None
    #: The output tail: final once the run ended; while a shell run runs, what its node
    #: has written so far (``NodeConfig.live_output_interval_s``).
    output: str
    error: str | None
    #: The parameters the run's slot was triggered with (None: none); every attempt of
    #: the slot has them.
    params: dict[str, Any] | None = None
    #: The run of an upstream job whose end triggered this run's slot (None: the slot
    #: was not triggered by an upstream job); every attempt of the slot has it.
    upstream_run_id: int | None = None
    #: A broadcast run's shard (None: not a broadcast run).
    shard: Shard | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """A node's liveness row."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    clock_offset_ms: float
    capacity: int
    tags: tuple[str, ...]
    version: str
    running_jobs: tuple[str, ...] = ()
    #: The database server (host:port) the node's heartbeat reached last.
    db_member: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Page(Generic[T]):
    """One page of a listing; ``next_cursor`` is None on the last page."""

    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Token:
    name: str
    role: Role
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One change, or one refused attempt at one. ``token_name`` is who: the API token
    (``source`` api or ui) or the client's actor (cli: ``user@host``; library: what the
    program gave, ``user@host`` by default)."""

    id: int
    at: datetime
    token_name: str
    action: str
    job_name: str | None
    client_address: str | None
    details: dict[str, Any]
    #: Which way the change came: the HTTP API, the dashboard, the CLI or the library.
    source: AuditSource = AuditSource.API


@dataclass(frozen=True, slots=True, kw_only=True)
class Reschedule:
    """Where a job goes next: its next planned instant (None = never again), the
    schedule slot that instant belongs to, the attempt number, and the slots to record
    as ``missed`` on the way."""

    planned_at: datetime | None
    slot_at: datetime | None
    attempt: int = 1
    missed: tuple[datetime, ...] = ()
    missed_more: int = 0
    missed_reason: str = ""
    #: The slot the job leaves counts as one of its runs (``JobSpec.max_runs``): its
    #: final outcome is recorded and the job moves on to a new slot (or to none).
    counted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """A job this node prepared: it owns the job until it fires or hands it back."""

    job_id: int
    name: str
    fire_id: str
    planned_at: datetime
    slot_at: datetime
    attempt: int
    spec: JobSpec
    #: A lane's (``JobSpec.lanes``): the job's own row, whose id its runs carry (None:
    #: the job's own row is prepared).
    parent_id: int | None = None
    #: A broadcast lane's shard for this slot.
    shard: Shard | None = None

    @property
    def run_job_id(self) -> int:
        """The job id the run rows carry (a lane's runs are its job's)."""
        return self.job_id if self.parent_id is None else self.parent_id


@dataclass(frozen=True, slots=True, kw_only=True)
class Fired:
    """A prepared job whose run row now exists with status running."""

    prepared: Prepared
    run_id: int
    #: The database clock in the fire transaction (before the planned instant when the
    #: run was fired ahead of it).
    fired_at: datetime
    #: The parameters the slot was triggered with (None: none): merged into a callable's
    #: kwargs, exported to a shell run as ``QUARTZLITE_PARAM_<NAME>``.
    params: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What an executor produced for one run; exactly one per run."""

    status: RunStatus
    exit_code: int | None = None
    output: str = ""
    error: str | None = None
    #: False when the run never began (killed or abandoned before it started; a shell
    #: run killed before its bash passed its gate): it then records no start.
    began: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """An outcome with the run it belongs to, on its way to the results transaction."""

    fired: Fired
    outcome: Outcome
    ended_at: datetime
    #: When the node released the run to its worker (database clock); None if it
    #: never started (killed, paused or deleted while it waited for its instant).
    started_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Pruned:
    """What one pass of pruning history deleted, and its cut-off (database clock)."""

    runs: int
    jobs: int
    before: datetime
    #: Trigger requests (ql_requests) whose slot the job has left.
    requests: int = 0
    #: Webhook events (ql_events) that happened before the cut-off.
    events: int = 0
    #: Their deliveries (ql_deliveries), whatever their status.
    deliveries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UiSession:
    """A signed-in browser of the dashboard: its token, its form (CSRF) token, and
    when it signed in."""

    token: Token
    csrf: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningRun:
    """A run executing now, with the instant its job row says it started."""

    run: Run
    started_at: datetime | None
    kill_requested: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivityMinute:
    """The runs planned in one minute that started: how many, how many started more
    than a second late, and their mean and largest lateness (ms)."""

    start: datetime
    fires: int
    late: int
    mean_ms: float | None
    max_ms: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiredNode:
    """A node whose session expired recently, seen through the runs it left abandoned."""

    node: str
    at: datetime
    abandoned: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Overview:
    """What the dashboard's first page shows, read at ``now`` (the database's clock)."""

    now: datetime
    sessions: list[Session]
    running: list[RunningRun]
    problems: list[Run]
    missed: list[Run]
    missed_count: int
    expired: list[ExpiredNode]
    activity: list[ActivityMinute]


@dataclass(frozen=True, slots=True, kw_only=True)
class Webhook:
    """A webhook subscription: where to POST which events. Its secret (which signs every
    delivery) is shown once, when it is created, and is not part of this value."""

    id: int
    name: str
    url: str
    events: tuple[EventType, ...]
    #: Only events of jobs whose name starts with this (None: any job).
    job_prefix: str | None
    #: Only events of jobs having this tag (None: any job).
    tag: str | None
    enabled: bool
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One event's delivery to one subscription: the delivery log's entry. ``id`` is
    the delivery id sent in ``X-Quartzlite-Delivery``, the same on every attempt."""

    id: int
    webhook: str
    event_id: int
    event: EventType
    occurred_at: datetime
    job_name: str | None
    run_id: int | None
    status: DeliveryStatus
    #: Attempts started so far (an attempt whose node died counts).
    attempts: int
    #: When the next attempt is due (pending), or the claim of the one in flight ends.
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedDelivery:
    """A delivery a node claimed for one attempt (number ``attempt``): what to POST
    where, signed with ``secret``."""

    id: int
    attempt: int
    url: str
    secret: str
    event: EventType
    #: The JSON body, exactly as sent (and signed).
    body: str
