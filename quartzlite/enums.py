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


class TargetKind(StrEnum):
    SHELL = "shell"
    PYTHON = "python"


class Role(StrEnum):
    ADMIN = "admin"
    VIEWER = "viewer"
