"""What a node owns, in memory: its prepared jobs, its fired runs, and which of those
hold one of the node's places (capacity)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from quartzlite.executors import RunContext, RunHandle
from quartzlite.models import Fired, Prepared


@dataclass(slots=True)
class Execution:
    """One fired run on this node, from its fire until its result is recorded."""

    fired: Fired
    handle: RunHandle
    #: Python runs only: what the callable sees, and when it times out (monotonic).
    context: RunContext | None = None
    deadline: float | None = None
    #: When the run started: the database clock at its start check (or fire), moved
    #: on by the time it then waited for a free place (capacity).
    started_at: datetime | None = None
    #: Monotonic instant of the start check that released it (it may wait for a place).
    released_mono: float = 0.0
    #: Set when the executing thread is done with it (a Python thread may never be).
    done: threading.Event = field(default_factory=threading.Event)
    #: Set once its outcome is handed over (journaled and queued for the database), by
    #: whoever recorded it: its worker, the killer, the starter or the fence. ``done``
    #: comes first (the worker sets it, then records): waiting for ``done`` alone, a
    #: fenced node once exited before the outcome of a run it had just killed was even
    #: queued, and the run stayed ``running``.
    recorded: threading.Event = field(default_factory=threading.Event)
    #: Handed to a worker thread (it may have started).
    submitted: bool = False
    #: Running when the node fenced: its shell group was killed (by the node or its
    #: guard), so an abnormal end is that kill, never the job's failure.
    fence_killed: bool = False


class Ownership:
    """What this node owns, by job id: its prepared jobs and its fired runs (``executing``
    until their result is recorded), behind ``mutex``, the process mutex. The mutex is
    held around every transaction that changes what the node owns *and* the matching
    change here, so the two never disagree in a way the compensator could misread.

    And the node's places (``capacity``): a run whose instant has come is *released*; it
    waits in the ready queue (highest priority, then earliest, first) until a place is
    free, and holds it until it ends. Nothing takes a place once ``closed`` is set (the
    node fenced)."""

    def __init__(self, capacity: int, closed: threading.Event) -> None:
        self.capacity = capacity
        self.closed = closed
        self.mutex = threading.RLock()
        self.prepared: dict[int, Prepared] = {}
        self.executing: dict[int, Execution] = {}
        self._places = threading.Lock()
        self._ready: list[tuple[int, datetime, int, Execution]] = []
        self._order = itertools.count()
        #: Runs holding a place: handed to a worker, not ended yet.
        self.running = 0

    def count(self) -> int:
        """Jobs this node owns (prepared or executing), as the database should count them."""
        return len(self.prepared) + len(self.executing)

    def known(self) -> set[tuple[int, str]]:
        """(job id, fire id) of everything this node owns."""
        found = {(p.job_id, p.fire_id) for p in list(self.prepared.values())}
        found.update((e.fired.prepared.job_id, e.fired.prepared.fire_id)
                     for e in list(self.executing.values()))
        return found

    def unstarted(self) -> int:
        """Runs held ahead of their start: prepared, or fired and not handed to a worker."""
        return len(self.prepared) + sum(1 for e in list(self.executing.values()) if not e.submitted)

    def waiting(self) -> int:
        """Runs released (due, checked) that wait for a place."""
        with self._places:
            return len(self._ready)

    def release(self, executions: Sequence[Execution]) -> None:
        now = time.monotonic()
        with self._places:
            for e in executions:
                e.released_mono = now
                p = e.fired.prepared
                heapq.heappush(self._ready, (-p.spec.priority, p.planned_at, next(self._order), e))

    def take(self, *, free: bool = False) -> tuple[Execution, bool] | None:
        """The next ready run, now holding a place (and whether the queue is empty now);
        None when no place is free, nothing is ready, or the node is closed. ``free``:
        first give up a place (a worker's run ended: one lock for both)."""
        with self._places:
            if free:
                self.running -= 1
            if self.closed.is_set() or not self._ready or self.running >= self.capacity:
                return None
            execution = heapq.heappop(self._ready)[3]
            self.running += 1
            execution.submitted = True
            return execution, not self._ready

    def free(self) -> None:
        """A run holding a place ended (or was cut short: a Python thread may go on)."""
        with self._places:
            self.running -= 1
