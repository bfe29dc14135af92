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

from quartzlite.executors import RunContext, RunHandle, ShellRun, Spawned, params_environment
from quartzlite.models import Fired, Prepared


@dataclass(slots=True, eq=False)
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
    #: Set by its worker as the run begins: the monotonic instant, the worker thread's
    #: CPU clock and its reading then, and the process's CPU time (see :meth:`busy`).
    began_mono: float | None = None
    cpu_clock: int = 0
    cpu_began: float = 0.0
    process_began: float = 0.0
    #: Running when the node fenced: its shell group was killed (by the node or its
    #: guard), so an abnormal end is that kill, never the job's failure.
    fence_killed: bool = False
    #: Shell runs: the bash started for it ahead of its instant, waiting at its gate,
    #: until its worker takes it; ``standby_closed`` from then on (or once the run ended
    #: without it): none may be attached any more (see
    #: :class:`~quartzlite.node.services.spawner.Spawner`).
    standby: Spawned | None = None
    standby_closed: bool = False
    #: Shell runs past their gate: the run the shell watch watches (its output so far is
    #: read from here by the live output service).
    shell: ShellRun | None = None
    _environment: dict[str, str] | None = None

    def environment(self) -> dict[str, str]:
        """What a shell run is told of itself (its ``QUARTZLITE_*`` variables, and its
        trigger parameters as ``QUARTZLITE_PARAM_<NAME>``)."""
        if self._environment is None:
            fired = self.fired
            p = fired.prepared
            self._environment = {
                **params_environment(fired.params),
                "QUARTZLITE_JOB": p.name,
                "QUARTZLITE_FIRE_ID": p.fire_id,
                "QUARTZLITE_RUN_ID": str(fired.run_id),
                "QUARTZLITE_PLANNED_AT": p.planned_at.isoformat(),
                "QUARTZLITE_SLOT_AT": p.slot_at.isoformat(),
                "QUARTZLITE_ATTEMPT": str(p.attempt),
            }
            if p.shard is not None:
                self._environment["QUARTZLITE_SHARD_INDEX"] = str(p.shard.index)
                self._environment["QUARTZLITE_SHARD_TOTAL"] = str(p.shard.total)
        return self._environment

    def began(self) -> None:
        """Called by the worker thread that runs it, just before it runs."""
        self.cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        self.cpu_began = time.clock_gettime(self.cpu_clock)
        self.process_began = time.process_time()
        self.began_mono = time.monotonic()

    def busy(self, now: float, after_s: float, long_s: float) -> bool:
        """Not (yet) known to be waiting: begun less than ``after_s`` ago (or not yet
        begun), or its thread (or, while its thread waited, the process: the GIL) computed
        for at least half the time since it began, for less than ``long_s``. A shell run
        whose process has started is not busy, nor a run blocked in a call (the network,
        sleep) while the process idles, nor one busy for long (so no ready run waits
        behind it for more than ``long_s``)."""
        if self.began_mono is None:
            return True
        if self.handle.pgid is not None:
            return False  # a shell run whose process runs: its thread only watches it
        age = now - self.began_mono
        if age < after_s:
            return True
        if age >= long_s:
            return False
        try:
            cpu = time.clock_gettime(self.cpu_clock) - self.cpu_began
        except OSError:  # its thread is gone
            return False
        if cpu >= 0.5 * age:
            return True
        # Its thread barely ran. Blocked in a call, unless the process kept the CPU busy
        # meanwhile: then it most likely waited for the GIL, which another worker
        # would only wait for too.
        return time.process_time() - self.process_began >= 0.5 * age


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
        self._running: set[Execution] = set()

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

    def take(self, *, ended: Execution | None = None, spread: bool = False
             ) -> tuple[Execution, bool] | None:
        """The next ready run, now holding a place (and whether the queue is empty now);
        None when no place is free, nothing is ready, or the node is closed.

        ``ended``: the calling worker's run ended; its place is given up first (one lock
        for both), and the worker goes on with the next run. ``spread``: the caller
        wants a run for *another* worker; granted only while no run holding a place is
        busy (see :meth:`Execution.busy`)."""
        with self._places:
            if ended is not None:
                self._running.discard(ended)
            if self.closed.is_set() or not self._ready or len(self._running) >= self.capacity:
                return None
            if spread and any(e.busy(time.monotonic(), self.SPREAD_AFTER_S, self.SPREAD_LONG_S)
                              for e in self._running):
                return None
            execution = heapq.heappop(self._ready)[3]
            self._running.add(execution)
            execution.submitted = True
            return execution, not self._ready

    #: A run that has held its place this long while neither its thread nor the process
    #: computed for half of that time is waiting (in a call): another worker may start
    #: the next ready run beside it (a shell run, as soon as its process has started). Runs that compute gain nothing from more threads
    #: (they take turns at the GIL), and short runs go one after the other on one
    #: worker: 16 threads taking turns at the GIL around every system call cost a
    #: burst of short Python runs ~6 thread switches a run and twice the time.
    SPREAD_AFTER_S = 0.002
    #: A run computing this long no longer holds back the ready runs behind it.
    SPREAD_LONG_S = 0.02

    def spreadable(self) -> bool:
        """Ready runs wait while a place is free: another worker should start one as soon
        as the runs holding places have had them for SPREAD_AFTER_S."""
        with self._places:
            return (bool(self._ready) and not self.closed.is_set()
                    and len(self._running) < self.capacity)

    @property
    def running(self) -> int:
        """Runs holding a place: handed to a worker, not ended yet."""
        return len(self._running)

    def free(self, execution: Execution) -> None:
        """A run holding a place ended (or was cut short: a Python thread may go on)."""
        with self._places:
            self._running.discard(execution)
