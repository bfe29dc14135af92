"""Statuses and policies. Each value is the string stored in the database."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    IDLE = "idle"
    PREPARED = "prepared"
    EXECUTING = "executing"


#: The job state machine of the go-crontab design, written as data. Its edges are the
#: statements of quartzlite.storage.transitions (one per edge, named after it); a test
#: checks the two agree.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.IDLE: frozenset({JobState.PREPARED}),
    JobState.PREPARED: frozenset({JobState.EXECUTING, JobState.IDLE}),
    JobState.EXECUTING: frozenset({JobState.IDLE}),
}


class RunStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    KILLED = "killed"
    ABANDONED = "abandoned"
    MISSED = "missed"
    #: Fired ahead of its instant, but its job was paused or deleted before the instant
    #: came: it never started.
    CANCELLED = "cancelled"
    #: Not a run: the scheduler could not plan the job and paused it (see the job's
    #: ``error``); nothing was started.
    QUARANTINED = "quarantined"

    @property
    def is_final(self) -> bool:
        return self is not RunStatus.RUNNING


RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.TIMED_OUT,
            RunStatus.KILLED,
            RunStatus.ABANDONED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.TIMED_OUT: frozenset(),
    RunStatus.KILLED: frozenset(),
    RunStatus.ABANDONED: frozenset(),
    RunStatus.MISSED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
    RunStatus.QUARANTINED: frozenset(),
}


class MisfirePolicy(StrEnum):
    """What to do with slots found later than the misfire threshold."""

    FIRE_ONCE = "fire_once"  # run once now for all of them; the others are recorded missed
    SKIP = "skip"  # record them all as missed and wait for the next slot


class OverrunPolicy(StrEnum):
    """What to do with the slots that came due while the job's own run was running."""

    SKIP = "skip"  # record them missed; the job goes on at its next slot after the run
    CATCH_UP = "catch_up"  # leave them to the misfire policy: those within the grace run late


class RecoveryPolicy(StrEnum):
    """What to do with a run whose node died while it executed."""

    RERUN = "rerun"  # run the slot again (as the next attempt) on a live node
    SKIP = "skip"  # record it abandoned and move on to the next slot


class UpstreamCondition(StrEnum):
    """When a job with upstream jobs runs: how an upstream's slot must end
    (``ql_jobs.upstream_on``; the outcomes of each are :data:`UPSTREAM_OUTCOMES`)."""

    SUCCESS = "success"  # its run succeeded
    FAILURE = "failure"  # it failed, timed out, was killed, or was abandoned for good
    COMPLETION = "completion"  # any of those: it ended with a final outcome

    def matches(self, status: RunStatus) -> bool:
        """Whether an upstream slot that ended with ``status`` triggers the job."""
        return status in UPSTREAM_OUTCOMES[self]


_FAILED_ENDS = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.KILLED,
                          RunStatus.ABANDONED})

#: The statuses of the run that ends an upstream's slot that trigger a downstream job,
#: by its condition. Only the run that ends the slot counts: a failure that the job
#: retries, or an abandoned run that its recovery policy reruns, is not an end (the
#: slot's next attempt is). ``abandoned`` ends a slot when the job moves on from it
#: (recovery policy ``skip``, or no rerun left): a failure, since the slot did not
#: succeed. ``cancelled`` (never started: the job was paused or deleted), ``missed`` and
#: ``quarantined`` are not runs that ended, and trigger nothing.
UPSTREAM_OUTCOMES: dict[UpstreamCondition, frozenset[RunStatus]] = {
    UpstreamCondition.SUCCESS: frozenset({RunStatus.SUCCEEDED}),
    UpstreamCondition.FAILURE: _FAILED_ENDS,
    UpstreamCondition.COMPLETION: _FAILED_ENDS | {RunStatus.SUCCEEDED},
}


class TargetKind(StrEnum):
    SHELL = "shell"
    PYTHON = "python"


class Role(StrEnum):
    ADMIN = "admin"
    VIEWER = "viewer"


class AuditSource(StrEnum):
    """Which way an audited change came (``ql_audit.source``)."""

    API = "api"  # the HTTP API, with a token
    UI = "ui"  # the dashboard, signed in with a token
    CLI = "cli"  # the ``quartzlite`` command, on the database directly
    LIBRARY = "library"  # SchedulerClient used from Python


class EventType(StrEnum):
    """What a webhook subscription can be told (``ql_events.type``). The run events are
    ``run.`` + the run status they report (storage writes them so, in SQL)."""

    RUN_FAILED = "run.failed"
    RUN_TIMED_OUT = "run.timed_out"
    RUN_ABANDONED = "run.abandoned"
    RUN_MISSED = "run.missed"
    #: A run succeeded after the job's previous finished run failed or timed out.
    RUN_RECOVERED = "run.recovered"
    #: Peers expired a node's session (it stopped heartbeating).
    NODE_EXPIRED = "node.expired"
    #: Sent by ``POST /webhooks/{name}/test`` to that subscription only; not subscribable.
    TEST = "webhook.test"


#: The events a subscription may list.
SUBSCRIBABLE_EVENTS: tuple[EventType, ...] = tuple(e for e in EventType if e is not EventType.TEST)


class DeliveryStatus(StrEnum):
    """One event's delivery to one subscription (``ql_deliveries.status``)."""

    PENDING = "pending"  # due at next_attempt_at (claimed by a node until then)
    PAUSED = "paused"  # its subscription is disabled: waits until it is enabled again
    DELIVERED = "delivered"  # a 2xx answered one attempt
    FAILED = "failed"  # gave up after the last attempt

    @property
    def is_final(self) -> bool:
        return self in (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED)


DELIVERY_TRANSITIONS: dict[DeliveryStatus, frozenset[DeliveryStatus]] = {
    DeliveryStatus.PENDING: frozenset(
        {DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.PAUSED}
    ),
    # An attempt in flight when its subscription was disabled still records its answer.
    DeliveryStatus.PAUSED: frozenset(
        {DeliveryStatus.PENDING, DeliveryStatus.DELIVERED, DeliveryStatus.FAILED}
    ),
    DeliveryStatus.DELIVERED: frozenset(),
    DeliveryStatus.FAILED: frozenset(),
}
