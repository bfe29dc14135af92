"""quartzlite: a Quartz-style clustered job scheduler for Python on MySQL alone.

The names below load lazily, so that light entry points (the node's guard process)
do not import the database stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "SchedulerClient": "quartzlite.client",
    "JobState": "quartzlite.enums",
    "MisfirePolicy": "quartzlite.enums",
    "OverrunPolicy": "quartzlite.enums",
    "RecoveryPolicy": "quartzlite.enums",
    "RunStatus": "quartzlite.enums",
    "Conflict": "quartzlite.errors",
    "NotFound": "quartzlite.errors",
    "QuartzliteError": "quartzlite.errors",
    "TransientStoreError": "quartzlite.errors",
    "ValidationError": "quartzlite.errors",
    "Job": "quartzlite.models",
    "JobSpec": "quartzlite.models",
    "Run": "quartzlite.models",
    "Session": "quartzlite.models",
}

if TYPE_CHECKING:
    from quartzlite.client import SchedulerClient
    from quartzlite.enums import JobState, MisfirePolicy, OverrunPolicy, RecoveryPolicy, RunStatus
    from quartzlite.errors import (
        Conflict,
        NotFound,
        QuartzliteError,
        TransientStoreError,
        ValidationError,
    )
    from quartzlite.models import Job, JobSpec, Run, Session


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'quartzlite' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Conflict",
    "Job",
    "JobSpec",
    "JobState",
    "MisfirePolicy",
    "NotFound",
    "OverrunPolicy",
    "QuartzliteError",
    "RecoveryPolicy",
    "Run",
    "RunStatus",
    "SchedulerClient",
    "Session",
    "TransientStoreError",
    "ValidationError",
]
