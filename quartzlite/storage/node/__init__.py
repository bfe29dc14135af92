"""The node's SQL: sessions, heartbeat, prepare, fire, results, hand back, expiry and
compensation (go-crontab's threads), each one short transaction under the named lock
rows: the session lock before the job lock, always. Results are the exception: they
lock only their own executing jobs' rows (``FOR UPDATE``, in id order), and every other
writer of an executing job's row reads it ``FOR UPDATE`` under the job lock, so the
two never decide on a stale read; a result never waits for the job lock.

"Exactly once" lives here as database invariants: every transition is a guarded
statement of :mod:`quartzlite.storage.transitions`, checked against the state, owner and
fire id read under the job lock (or that row's lock), and the run row's UNIQUE
(job_id, planned_at) refuses a second run of a slot. Nothing here spawns a
process, sleeps or waits on anything but the database while it holds a lock row.
Each method is idempotent, so the retry loop may run it again after a commit of
unknown outcome.
"""

from __future__ import annotations

from quartzlite.storage.node.base import (
    Beat,
    Completed,
    LockStats,
    Owned,
    Planner,
    Scan,
    SpecCache,
    StartCheck,
    Watch,
)
from quartzlite.storage.node.firing import Firing
from quartzlite.storage.node.output import LiveOutput, LiveTail
from quartzlite.storage.node.recovery import Recovery
from quartzlite.storage.node.results import Results
from quartzlite.storage.node.scanning import Scanning
from quartzlite.storage.node.sessions import Sessions


class NodeStore(Sessions, Scanning, Firing, Results, Recovery, LiveOutput):
    """The node's SQL, one part per concern (sessions, scanning, firing, results,
    recovery, live output); see the module docstring."""


__all__ = ["Beat", "Completed", "LiveTail", "LockStats", "NodeStore", "Owned", "Planner", "Scan",
           "SpecCache", "StartCheck",
           "Watch"]
