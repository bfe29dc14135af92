"""quartzlite: a Quartz-style clustered job scheduler for Python on MySQL alone."""

from __future__ import annotations

from quartzlite.client import SchedulerClient
from quartzlite.enums import JobState, MisfirePolicy, RecoveryPolicy, RunStatus
from quartzlite.errors import (
    Conflict,
    NotFound,
    QuartzliteError,
    TransientStoreError,
    ValidationError,
)
from quartzlite.models import Job, JobSpec, Run, Session

__version__ = "0.1.0"

__all__ = [
    "Conflict",
    "Job",
    "JobSpec",
    "JobState",
    "MisfirePolicy",
    "NotFound",
    "QuartzliteError",
    "RecoveryPolicy",
    "Run",
    "RunStatus",
    "SchedulerClient",
    "Session",
    "TransientStoreError",
    "ValidationError",
]
