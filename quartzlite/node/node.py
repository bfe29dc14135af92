"""One scheduler node: its session, its threads (:mod:`quartzlite.node.services`, one
module each), what it owns (:mod:`quartzlite.node.ownership`), and the order it stops in.

Threads (each a :class:`~quartzlite.node.services.base.Service`):

==============  ==========================================================  =========
heartbeat       renew the session by the DB clock in one statement that also  critical
                returns the DB clock (offset); it locks nothing but its row
watchdog        fence when no heartbeat succeeded for ``fence_after_s``        critical
watch           one SELECT per ``poll_interval_s``: schedules the scanner at  critical
                the earliest due job, the expirer at the oldest peer's
                deadline, the compensator on a mismatch
killer          while runs execute, every 0.5 s: kill the ones asked to die
scanner         idle -> prepared under the job lock (look-ahead window), up   critical
                to ``prefetch`` runs not started yet
firer           prepared -> executing up to ``fire_ahead_s`` before due        critical
starter         release fired runs at their instant (one start check); each   critical
                takes one of ``capacity`` places as soon as one is free
spawner         start bash for fired shell runs ahead of their instant, each
                stopped at its gate (at most ``warm_shells``)
shells          one poll over every running shell run: its output, exit,       critical
                timeout and kill; starts the next ready run in the place an
                ended one frees (see :mod:`quartzlite.node.shellwatch`)
output          every ``live_output_interval_s`` while shell runs run: the
                tails that grew since, in one UPDATE of their running rows
                (nothing sent when none grew)
results         executing -> idle in batches; retried until the outcome is    critical
                known
compensator     adopt/recover what the DB says we own but memory does not     critical
expirer         expire peers silent for ``session_timeout_s``                 critical
janitor         prune run history past ``history_retention_s``, hourly
webhooks        fan events out into deliveries, claim the due ones and POST
                them on ``webhook_concurrency`` threads of its own, with its
                own connections (see :mod:`quartzlite.node.services.webhooks`)
==============  ==========================================================  =========

An idle node sends one statement per heartbeat and one per poll (1.5 statements per
second by default), whatever the number of jobs: nothing else polls; each service is
woken at the instant the watch computed for it, or by the events that concern it.
Jobs added or triggered elsewhere are noticed at the next poll.

The process mutex (``Ownership.mutex``) is held around every transaction that changes
what this node owns *and* the matching change of the in-memory sets, so the two
never disagree in a way the compensator could misread.

Capacity is the runs executing at once (shell processes and Python threads). A run's
end frees its place at once, in memory; its result is recorded in a batch after. The
pipeline ahead of the places (prepare, fire, start check) runs in batches, bounded by
``prefetch``; while released runs wait for a place, the node prepares nothing more.

Stop order (SIGTERM/SIGINT): stop scanning, expiring and compensating; hand prepared
jobs back at once; stop firing; let running jobs finish for ``shutdown_grace_s``, then
kill them; record every result; delete the session; stop the heartbeat last.
A second signal kills the running jobs and exits at once.

Fence: no heartbeat for ``fence_after_s`` (or the session is gone): stop preparing
and firing, SIGKILL the process groups of every running job, drop in-memory state,
and exit non-zero (or, with ``rejoin``, wait for the database and join again under a
new session). ``fence_after_s`` < ``session_timeout_s``, so this happens before any
peer may expire the session and run the work elsewhere.
"""

from __future__ import annotations

import collections
import functools
import gc
import logging
import math
import os
import queue
import select
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from quartzlite import __version__
from quartzlite.clock import Clock, SystemClock
from quartzlite.config import NodeConfig
from quartzlite.enums import RunStatus, TargetKind
from quartzlite.errors import SchemaError, StoreError
from quartzlite.executors import RunContext, RunHandle, ShellRun, run_callable, start_shell
from quartzlite.models import Finished, Fired, Outcome, Prepared
from quartzlite.node.guardlink import GuardLink
from quartzlite.node.journal import Journal, JournaledOutcome, orphaned
from quartzlite.node.ownership import Execution, Ownership
from quartzlite.node.planning import SchedulePlanner
from quartzlite.node.services import (
    Compensator,
    Expirer,
    Firer,
    Heartbeat,
    Janitor,
    Killer,
    LiveOutput,
    Results,
    Scanner,
    Spawner,
    Starter,
    Watch,
    Watchdog,
)
from quartzlite.node.services.base import Service
from quartzlite.node.services.webhooks import Webhooks
from quartzlite.node.shellwatch import ShellWatch
from quartzlite.node.stats import NodeStats
from quartzlite.node.workers import WorkerPool
from quartzlite.storage import migrate, safety
from quartzlite.storage.engine import Database
from quartzlite.storage.node import NodeStore, SpecCache

log = logging.getLogger("quartzlite.node")
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_FENCED = 3
EXIT_FORCED = 4


class NodeState(StrEnum):
    """A node's life: each step only ever moves forward (FENCED may follow STOPPING)."""

    #: Registering its session.
    STARTING = "starting"
    #: Scanning, firing, executing, judging peers.
    RUNNING = "running"
    #: Asked to stop: prepared jobs handed back, running jobs given their grace.
    STOPPING = "stopping"
    #: Lost the database or its guard: running shell jobs killed, nothing written but
    #: the outcomes already known, until its session may expire.
    FENCED = "fenced"
    #: Gone: nothing of it runs.
    STOPPED = "stopped"


class StopRequest:
    """How a node is asked to stop (by a signal: level 1 = gracefully, 2 = now), and how
    its main thread is woken (a signal, a fence, a crashed service).

    Lock-free on the signal's side. A handler runs on the main thread between two
    bytecodes, possibly while that thread is inside a wait holding the wait's own lock:
    ``threading.Event.set()`` there deadlocks the main thread for good (it happened: a
    node went on running jobs, deaf to SIGTERM). A handler only bumps ``level`` and
    writes a byte to a pipe; the main thread sleeps in ``poll`` on that pipe."""

    def __init__(self) -> None:
        self.level = 0
        read, write = os.pipe()
        for fd in (read, write):
            os.set_blocking(fd, False)
        # Unbuffered file objects: no lock on the handler's side, and the descriptors
        # close only once nothing can write to them any more.
        self._read = open(read, "rb", buffering=0)  # lives as long as the request
        self._write = open(write, "wb", buffering=0)
        self._poll = select.poll()
        self._poll.register(read, select.POLLIN)

    def request(self) -> None:
        """One more stop request (what a signal handler calls, and nothing else)."""
        self.level += 1
        self.wake()

    def wake(self) -> None:
        """Wake the main thread now (from any thread, or a signal handler)."""
        try:
            self._write.write(b"\0")  # None when the pipe is full: it wakes anyway
        except OSError:
            pass

    def wait(self, timeout_s: float) -> None:
        """On the main thread: sleep until woken, or for ``timeout_s``."""
        try:
            if self._poll.poll(math.ceil(max(0.0, timeout_s) * 1000)):
                while self._read.read(4096):
                    pass
        except OSError:
            pass


def tune_interpreter() -> None:
    """For a node process: everything allocated so far (imports, SQLAlchemy's statement
    caches, the services) moved out of the cyclic collector's reach, so that a full
    collection no longer walks it (one took ~100 ms with the GIL held, every few
    seconds under a steady load: late starts for every run due then)."""
    gc.collect()
    gc.freeze()


def tag_sets(tags: tuple[str, ...]) -> list[str]:
    """Every stored job-tag value this node may run: each subset of its tags, joined
    the way storage joins them (sorted, comma-separated; '' = any node)."""
    ordered = sorted(set(tags))
    found: list[str] = []
    for mask in range(1 << len(ordered)):
        found.append(",".join(t for i, t in enumerate(ordered) if mask & (1 << i)))
    return found


class Node:
    #: Worker threads started with the node (at most; capacity if smaller).
    PRESTARTED_WORKERS = 1024

    def __init__(self, config: NodeConfig, *, clock: Clock | None = None,
                 stop_request: StopRequest | None = None,
                 on_started: Callable[[Node], None] | None = None) -> None:
        if len(config.tags) > 8:
            raise SchemaError("a node may have at most 8 tags")
        self.config = config
        self.on_started = on_started
        self.clock = clock or SystemClock(config.clock_skew_s)
        self.stop_request = stop_request or StopRequest()
        self.session_id = uuid.uuid4().hex
        self.pid = os.getpid()
        self.node_name = f"{config.host}:{self.pid}"
        self.stats = NodeStats()
        io_timeout = config.lock_wait_timeout_s + 2
        # A silent node's connections die (and its locks go) once its session could be
        # expired: a node frozen inside a locked transaction cannot stall the cluster.
        idle_timeout = max(2, math.ceil(config.session_timeout_s))
        self.db = Database(
            config.database_url, lock_wait_timeout_s=config.lock_wait_timeout_s,
            io_timeout_s=io_timeout, pool_size=6, idle_timeout_s=idle_timeout,
            on_error=self._db_error,
        )
        # The heartbeat has a pool of its own with short timeouts, so that it never
        # queues behind the other threads and a blackholed connection fails fast.
        self.hb_db = Database(
            config.database_url, lock_wait_timeout_s=config.lock_wait_timeout_s,
            io_timeout_s=max(1.0, min(config.heartbeat_interval_s * 2, config.fence_after_s / 2)),
            pool_size=1, idle_timeout_s=idle_timeout, on_error=self._db_error,
        )
        #: Where the node is in its life (see :class:`NodeState`).
        self.state = NodeState.STARTING
        #: The fence's signal, set as the state becomes FENCED: every retry loop but the
        #: results' waits on it.
        self.fenced = threading.Event()
        #: Set when the node gives up recording outcomes (it is exiting).
        self.results_stop = threading.Event()
        # Every retry loop but the results' stops at the fence: a fenced node writes
        # nothing but outcomes.
        #: Job definitions read, shared by the stores that read them (scan, results).
        self.specs = SpecCache()
        self.store = NodeStore(self.db, node_name=self.node_name, stop=self.fenced,
                               specs=self.specs)
        self.hb_store = NodeStore(self.hb_db, node_name=self.node_name, stop=self.fenced)
        # Results have a pool of their own with short timeouts too: a results
        # transaction stuck on a dead (blackholed) connection must give up within
        # seconds and try a new one, or a fenced node's outcomes miss their window before
        # the session may expire. Its lock waits end first (1 s), on the server's side.
        self.results_db = Database(
            config.database_url, lock_wait_timeout_s=1,
            io_timeout_s=max(1.5, min(3.0, config.fence_after_s / 2)),
            pool_size=2, idle_timeout_s=idle_timeout, on_error=self._db_error,
        )
        self.results_store = NodeStore(self.results_db, node_name=self.node_name,
                                       specs=self.specs)
        # Webhook deliveries have a pool of their own: a burst of them never takes a
        # connection the scheduler's threads wait for.
        self.webhooks_db = Database(
            config.database_url, lock_wait_timeout_s=config.lock_wait_timeout_s,
            io_timeout_s=io_timeout, pool_size=2, idle_timeout_s=idle_timeout,
            on_error=self._db_error,
        )
        self.journal: Journal | None = None
        self.planner = SchedulePlanner()
        self.tag_sets = tag_sets(config.tags)
        self.owned = Ownership(config.capacity, self.fenced)
        self.results: queue.SimpleQueue[Finished] = queue.SimpleQueue()
        self.fence_reason = ""
        #: Held while fencing marks the running executions, and while a result is
        #: judged against that mark (a guard's kill is not the job's failure).
        self._fence_lock = threading.RLock()
        self._starts_lock = threading.Lock()
        #: Run ids started here, oldest first (see :meth:`_first_start`).
        self._starts: collections.OrderedDict[int, None] = collections.OrderedDict()
        #: Python runs still executing when the fenced node gave up waiting for them.
        self.unkillable_left = 0
        self.crashed: tuple[str, BaseException] | None = None
        self.guard: GuardLink | None = None
        self.offset_s = 0.0
        self.last_beat_mono = self.clock.monotonic()
        self.healthy_since: float | None = None
        self.workers = WorkerPool("run")
        self.heartbeat = Heartbeat(self)
        self.watchdog = Watchdog(self)
        self.watcher = Watch(self)
        self.killer = Killer(self)
        self.scanner = Scanner(self)
        self.firer = Firer(self)
        self.starter = Starter(self)
        self.spawner = Spawner(self)
        self.shells = ShellWatch(self._shells_crashed)
        self.results_service = Results(self)
        self.compensator = Compensator(self)
        self.expirer = Expirer(self)
        self.janitor = Janitor(self)
        self.webhooks = Webhooks(self)
        self.services: list[Service] = [
            self.heartbeat, self.watchdog, self.watcher, self.killer, self.scanner, self.firer,
            self.starter, self.spawner, self.results_service, self.compensator, self.expirer, self.janitor,
        ]
        self.services.append(self.webhooks)
        #: Writes running shell runs' output so far (None: ``live_output_interval_s`` 0).
        self.live_output = LiveOutput(self) if config.live_output_interval_s > 0 else None
        if self.live_output is not None:
            self.services.append(self.live_output)
        #: The scanner stopped because the node was full: results wake it at once.
        self.scan_blocked = False

    # -- what others may ask -------------------------------------------------------------

    @property
    def prepared(self) -> dict[int, Prepared]:
        return self.owned.prepared

    @property
    def executing(self) -> dict[int, Execution]:
        return self.owned.executing

    @property
    def running(self) -> int:
        """Runs holding one of the node's places now."""
        return self.owned.running

    @property
    def working(self) -> bool:
        """Scanning, firing and judging peers: neither stopping nor fenced (services run
        from RUNNING on; a test may drive one before)."""
        return self.state in (NodeState.STARTING, NodeState.RUNNING) and not self.fenced.is_set()

    def is_live(self) -> bool:
        """True while the session is registered, renewed and not fenced."""
        return (
            self.state in (NodeState.RUNNING, NodeState.STOPPING)
            and not self.fenced.is_set()
            and self.healthy_since is not None
            and self.clock.monotonic() - self.last_beat_mono < self.config.fence_after_s
        )

    def heartbeat_age_s(self) -> float:
        return self.clock.monotonic() - self.last_beat_mono

    def poke(self) -> None:
        """A job was added, triggered or changed in this process (``quartzlite serve``):
        run the watch now instead of at the next poll."""
        if self.working:
            self.watcher.wake()

    # -- time ------------------------------------------------------------------------

    def db_now(self) -> datetime:
        """Our estimate of the database clock."""
        return self.clock.now() + timedelta(seconds=self.offset_s)

    def _db_error(self, code: int | None) -> None:
        self.stats.db_errors += 1

    # -- life ------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (0), fenced (3), forced (4) or broken (1/2)."""
        try:
            migrate.check_ready(self.db)
            safety.check_database(self.db, safety.Timing(
                heartbeat_interval_s=self.config.heartbeat_interval_s,
                fence_after_s=self.config.fence_after_s,
                session_timeout_s=self.config.session_timeout_s,
            ))
            self._replay_journals()
            started = self.store.register(
                session_id=self.session_id, host=self.config.host, pid=self.pid,
                capacity=self.config.capacity, tags=self.config.tags, version=__version__,
            )
            # Build the start check's statement now rather than at the first instant.
            self.store.start_check(self.session_id, [])
        except SchemaError as error:
            log.error("refusing to start: %s", error.message, extra={"action": "schema_error"})
            self._dispose()
            return EXIT_CONFIG
        except StoreError as error:
            log.error("cannot start: %s", error.message, extra={"action": "start_failed"})
            self._dispose()
            return EXIT_ERROR
        self.offset_s = (started - self.clock.now()).total_seconds()
        self.last_beat_mono = self.clock.monotonic()
        try:
            self.journal = Journal(self.config.journal_dir, self.session_id)
        except OSError as error:
            log.error("cannot open the outcome journal in %s: %s", self.config.journal_dir, error,
                      extra={"action": "start_failed"})
            self._dispose()
            return EXIT_ERROR
        self.guard = GuardLink(self.config.fence_after_s)
        log.info(
            "node %s started: session %s, capacity %d, tags %s",
            self.node_name, self.session_id, self.config.capacity,
            ",".join(self.config.tags) or "-",
            extra={"action": "node_started", "session": self.session_id},
        )
        self.workers.start(min(self.config.capacity, self.PRESTARTED_WORKERS))
        tune_interpreter()
        self.state = NodeState.RUNNING
        self.shells.start()
        for service in self.services:
            service.start()
        if self.on_started is not None:
            self.on_started(self)
        try:
            return self._main_loop()
        except Exception as error:
            # Whatever went wrong, runs must not be killed as failures on the way out:
            # fence (every running run is judged abandoned), record what is known.
            log.exception("the node's main loop failed", extra={"action": "node_error"})
            self.fence(f"unexpected error in the node: {error!r}")
            try:
                self._after_fence()
            except Exception:
                log.exception("recording outcomes after the error failed")
            return EXIT_ERROR
        finally:
            self.state = NodeState.STOPPED
            self._dispose()

    def _main_loop(self) -> int:
        while True:
            if self.stop_request.level >= 2:
                return self._force_stop()
            if self.fenced.is_set():
                return self._after_fence()
            if self.crashed is not None:
                name, error = self.crashed
                self.fence(f"critical service {name} crashed: {error!r}")
                self._after_fence()
                return EXIT_ERROR
            if self.stop_request.level == 1 and self.state is NodeState.RUNNING:
                return self._graceful_stop()
            self.stop_request.wait(0.1)

    def _shells_crashed(self, error: BaseException) -> None:
        log.error("the shell watch crashed", exc_info=error,
                  extra={"action": "service_crashed", "service": "shells"})
        if self.crashed is None:
            self.crashed = ("shells", error)
            self.stop_request.wake()

    def on_crash(self, service: Service, error: BaseException) -> None:
        log.error(
            "service %s crashed", service.name, exc_info=error,
            extra={"action": "service_crashed", "service": service.name},
        )
        if service.critical and self.crashed is None:
            self.crashed = (service.name, error)
            self.stop_request.wake()

    def fence(self, reason: str) -> None:
        """Stop everything this node does for the cluster but record outcomes, and
        kill its shell children now."""
        with self._fence_lock:
            if self.fenced.is_set():
                return
            self.fence_reason = reason
            self.state = NodeState.FENCED
            self.fenced.set()
            for service in (self.watcher, self.scanner, self.firer, self.starter,
                            self.spawner, self.compensator, self.expirer, self.janitor, self.killer,
                            self.webhooks,
                            *([self.live_output] if self.live_output is not None else [])):
                service.stop()
            # Every run not yet judged is marked (one the guard just killed has ended
            # already); only runs still going are killed: an ended run's group is gone,
            # and its id may be someone else's by now.
            executions = []
            for execution in list(self.owned.executing.values()):
                execution.fence_killed = True
                if not execution.done.is_set():
                    executions.append(execution)
                    if execution.context is None:
                        execution.handle.kill(self.FENCE_KILL, force=True)
        if self.guard is not None:
            self.guard.send("kill")
        running = sum(1 for e in executions if e.submitted)
        log.error(
            "FENCED: %s; killed %d running job(s) and dropped %d prepared; outcomes already "
            "known are still recorded, the rest is a peer's once this session expires",
            reason, running, len(self.owned.prepared),
            extra={"action": "fenced", "session": self.session_id},
        )
        self.stop_request.wake()

    #: Why a fence kills the running shell jobs (and how their runs are told apart).
    FENCE_KILL = "node fenced"

    def check_guard(self) -> None:
        """Fence if the guard says this node is no longer guarded."""
        if self.guard is None:
            return
        with self._fence_lock:
            if self.fenced.is_set():
                return
            problem = self.guard.problem()
            if problem is not None:
                self.fence(problem)

    def end_other_connections(self) -> None:
        """Fenced: end, on the server, every connection of this node but the results'
        (main pool, heartbeat). A transaction of its own stuck on a link that went dead
        (a partition) would otherwise hold the job lock until the server times it out,
        and the outcomes the fenced node must record would wait behind it, past the
        session's expiry (the soak found a finished run rerun so). Nothing else of this
        node may commit after a fence anyway. Raises StoreError if the database does not
        answer (the results service tries again with its next round)."""
        threads = self.db.server_threads() + self.hb_db.server_threads()
        ended = self.results_db.end_threads(threads)
        log.warning("fenced: ended %d other connection(s) of this node on the server", ended,
                    extra={"action": "fence_connections_ended"})

    def _replay_journals(self) -> None:
        """Record the outcomes that nodes gone from this machine wrote to their journal
        but not to the database (a fence, a crash), before registering: the slots they
        ran must not run again."""
        with orphaned(self.config.journal_dir) as found:
            for path, entries in found:
                by_session: dict[str, list[JournaledOutcome]] = {}
                for entry in entries:
                    by_session.setdefault(entry.session_id, []).append(entry)
                for session_id, items in by_session.items():
                    finished = self.store.journaled(items)
                    if finished:
                        self.results_store.complete(session_id=session_id, finished=finished,
                                            planner=self.planner, stop=self.results_stop)
                    log.warning(
                        "recorded %d outcome(s) from the journal %s of session %s",
                        len(finished), path.name, session_id,
                        extra={"action": "journal_replayed", "session": session_id},
                    )

    def _after_fence(self) -> int:
        """Fenced: everything is stopped but the results. Outcomes are facts, so the
        node still records them, until a peer may expire its session (the run rows
        refuse them after that); what is left then is in the journal, for the next
        node on this machine (a restart, a rejoin) to record before it registers."""
        for service in self.services:
            if service is not self.results_service:
                service.stop()
        self.starter.join(2)  # nothing is handed to a worker any more
        deadline = time.monotonic() + self.config.kill_grace_s
        for execution in list(self.owned.executing.values()):
            # Shell runs end once their group is killed.
            if execution.context is None and execution.submitted:
                execution.done.wait(max(0.0, deadline - time.monotonic()))
        for execution in list(self.owned.executing.values()):
            if not execution.submitted:
                # Released by the start check perhaps, but never handed to a worker.
                execution.done.set()
                self.finish(execution, Outcome(
                    status=RunStatus.ABANDONED, began=False,
                    error=f"never started: its node fenced ({self.fence_reason})",
                ))
        self.owned.prepared.clear()
        expiry = self.config.session_timeout_s - (self.clock.monotonic() - self.last_beat_mono)
        deadline = time.monotonic() + max(1.0, expiry)
        # Python runs end only with this process: it must be gone before a peer may
        # expire the session (the database stamped our last beat before we saw it commit,
        # so leave a beat's margin) and rerun them.
        python_deadline = time.monotonic() + expiry - self.config.heartbeat_interval_s
        while time.monotonic() < deadline and self.stop_request.level < 2:
            if time.monotonic() >= python_deadline and any(
                e.context is not None and not e.done.is_set()
                for e in list(self.owned.executing.values())
            ):
                break
            pending = self.journal.pending if self.journal is not None else 0
            if pending == 0 and self.results.empty() and all(
                e.recorded.is_set() for e in list(self.owned.executing.values())
            ):
                break
            self.stop_request.wait(0.1)
        self.unkillable_left = sum(
            1 for e in list(self.owned.executing.values()) if not e.done.is_set())
        left = self.journal.pending if self.journal is not None else 0
        if left:
            log.warning("%d outcome(s) not recorded yet: left in the journal %s",
                        left, self.journal.path if self.journal else "-",
                        extra={"action": "journal_left"})
        self.results_stop.set()
        self.results_service.stop()
        self.owned.executing.clear()
        return EXIT_FENCED

    def _force_stop(self) -> int:
        log.warning("second signal: killing running jobs and exiting now",
                    extra={"action": "forced_stop"})
        self.fenced.set()
        for service in self.services:
            service.stop()
        for execution in list(self.owned.executing.values()):
            execution.handle.kill("node stopped at once (second signal)", force=True)
        if self.guard is not None:
            self.guard.send("kill")
        return EXIT_FORCED

    def _graceful_stop(self) -> int:
        self.state = NodeState.STOPPING
        log.info("stopping: handing back prepared jobs, waiting for running ones",
                 extra={"action": "stopping"})
        for service in (self.watcher, self.scanner, self.compensator, self.expirer, self.janitor,
                        self.webhooks):
            service.stop()
        with self.owned.mutex:
            self.firer.stop()
            try:
                handed = self.store.hand_back(self.session_id)
            except StoreError as error:
                log.warning("could not hand back prepared jobs: %s", error.message)
                handed = 0
            self.owned.prepared.clear()
        log.info("handed back %d prepared job(s)", handed, extra={"action": "handed_back"})
        deadline = time.monotonic() + self.config.shutdown_grace_s
        while self.owned.executing and time.monotonic() < deadline:
            if self.stop_request.level >= 2 or self.fenced.is_set():
                return self._force_stop() if self.stop_request.level >= 2 else self._after_fence()
            self.stop_request.wait(0.1)
        if self.owned.executing:
            log.warning("shutdown grace over: killing %d running job(s)", len(self.owned.executing),
                        extra={"action": "shutdown_kill"})
            for execution in list(self.owned.executing.values()):
                execution.handle.kill("node shut down before the run ended")
            deadline = time.monotonic() + self.config.kill_grace_s + 5
            while self.owned.executing and time.monotonic() < deadline:
                if self.stop_request.level >= 2:
                    return self._force_stop()
                self.stop_request.wait(0.1)
        self.results_service.stop()
        self.results_service.join(5)
        self.results_service.drain()
        self.results_stop.set()
        self.watchdog.stop()
        try:
            deleted = self.store.delete_session(self.session_id)
        except StoreError as error:
            log.warning("could not delete session: %s", error.message)
            deleted = False
        self.heartbeat.stop()
        self.heartbeat.join(5)
        log.info("stopped%s", "" if deleted else " (session left to expire: it still owns jobs)",
                 extra={"action": "stopped"})
        return EXIT_OK

    def _dispose(self) -> None:
        self.results_stop.set()
        for service in self.services:
            service.stop()
        self.shells.stop()
        self.shells.join(5)  # no run ends (telling the guard) once the guard is closed
        if self.guard is not None:
            # Whatever still runs now must not outlive the node.
            self.guard.close(kill=bool(self.owned.executing) or self.fenced.is_set())
        if self.journal is not None:
            self.journal.close(delete=True)  # kept if it holds unrecorded outcomes
        self.dispose_pools()

    def dispose_pools(self) -> None:
        """Close the node's connection pools (main, heartbeat, results, webhooks)."""
        for db in (self.db, self.hb_db, self.results_db, self.webhooks_db):
            db.dispose()

    # -- execution ---------------------------------------------------------------------

    def start_execution(self, fired: Fired) -> Execution:
        """Called under the mutex after the fire commit: the run is ours; the starter
        hands it to a worker thread at its instant."""
        p = fired.prepared
        handle = RunHandle(on_group=self.guard.group if self.guard is not None else None)
        execution = Execution(fired=fired, handle=handle)
        if p.spec.target_kind is TargetKind.SHELL:
            handle.on_kill = self.shells.kick
        else:
            execution.context = RunContext(
                job=p.name, fire_id=p.fire_id, run_id=fired.run_id,
                planned_at=p.planned_at, slot_at=p.slot_at, attempt=p.attempt,
                params=dict(fired.params or {}), shard=p.shard,
            )
        self.owned.executing[p.job_id] = execution
        return execution

    def release(self, executions: Sequence[Execution]) -> None:
        """Runs whose instant has come and whose start check passed: each starts as
        soon as a place is free (at once, below capacity)."""
        self.owned.release(executions)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand ready runs to other workers while places are free and the runs already
        holding one have been at it a moment (see :meth:`Ownership.take`); the starter
        calls again while runs wait, so a place is never left idle for long."""
        while (execution := self._take(spread=True)) is not None:
            self.workers.submit(functools.partial(self._work, execution))
        if self.owned.spreadable():  # declined for now: look again in a moment
            self.starter.schedule(self.owned.SPREAD_AFTER_S)

    def _take(self, *, ended: Execution | None = None, spread: bool = False) -> Execution | None:
        """The next ready run, now holding a place (its start moved on by its wait)."""
        taken = self.owned.take(ended=ended, spread=spread)
        if taken is None:
            return None
        execution, drained = taken
        waited = time.monotonic() - execution.released_mono
        if execution.started_at is not None and waited > 0.001:
            execution.started_at += timedelta(seconds=waited)
        if not drained:  # more wait: the starter sees whether another worker should help
            self.starter.schedule(self.owned.SPREAD_AFTER_S)
        elif self.scan_blocked:
            self.scanner.wake()
        return execution

    def _work(self, execution: Execution | None) -> None:
        """A worker thread: run this, then, in the place it frees, the next ready run
        (no hand-over to another thread between two runs).

        The guard holds the node's pid while this thread runs Python runs: told before
        the first of them starts, and once this thread has none left to run (not twice
        for each of a series of short runs: that cost a third of a burst's time)."""
        guarded = False
        try:
            while execution is not None:
                python = execution.context is not None
                if self.guard is not None and python != guarded:
                    self.guard.python_run(python)
                    guarded = python
                try:
                    held = self._execute(execution)
                except Exception:  # a bug must not leak the place
                    log.exception("recording the end of a run failed")
                    held = True
                execution = self._take(ended=execution if held else None)
        finally:
            if guarded and self.guard is not None:
                self.guard.python_run(False)

    def _mark_started(self, execution: Execution) -> None:
        timeout = execution.fired.prepared.spec.timeout_s
        if timeout is not None and execution.context is not None:
            execution.deadline = time.monotonic() + timeout
        self.stats.lateness.observe((self.db_now() - execution.fired.prepared.planned_at).total_seconds())

    #: How many started run ids a node remembers (see :meth:`_first_start`).
    STARTS_REMEMBERED = 65_536

    def _first_start(self, execution: Execution) -> bool:
        """A last check before a run starts: this node never starts a run id twice.
        Nothing should ever ask it to; if something does, that is a bug, reported
        loudly, and the second start is refused (its place given back, nothing
        recorded: the first start records the run's outcome)."""
        run_id = execution.fired.run_id
        with self._starts_lock:
            first = run_id not in self._starts
            if first:
                self._starts[run_id] = None
                if len(self._starts) > self.STARTS_REMEMBERED:
                    self._starts.popitem(last=False)
        if not first:
            log.error("BUG: run %d of job %s was about to start a second time on this node; "
                      "refused", run_id, execution.fired.prepared.name, stack_info=True,
                      extra={"action": "second_start", "job": execution.fired.prepared.name})
            self.owned.free(execution)
        return first

    def _execute(self, execution: Execution) -> bool:
        """Run a Python run to its end here, or start a shell run (the shell watch sees it
        to its end: :meth:`_shell_ended`). Whether the caller still holds the run's place:
        it does once it has recorded the run's outcome (the killer may have recorded a
        Python run cut short, and freed the place); a shell run keeps it until it ends."""
        if not self._first_start(execution):
            return False
        execution.began()
        p = execution.fired.prepared
        spec = p.spec
        try:
            if self.fenced.is_set():
                outcome = Outcome(status=RunStatus.ABANDONED, began=False,
                                  error=f"never started: its node fenced ({self.fence_reason})")
            elif execution.handle.kill_requested:
                outcome = Outcome(
                    status=RunStatus.KILLED, began=False,
                    error=f"{execution.handle.reason} (before it started)",
                )
            elif spec.target_kind is TargetKind.SHELL:
                self._mark_started(execution)
                assert spec.command is not None
                started = start_shell(
                    spec.command,
                    env=execution.environment(),
                    timeout_s=spec.timeout_s,
                    kill_grace_s=self.config.kill_grace_s,
                    output_limit=self.config.output_limit_bytes,
                    handle=execution.handle,
                    spawned=self.spawner.take(execution),
                )
                if isinstance(started, ShellRun):
                    execution.shell = started
                    self.shells.watch(started, functools.partial(self._shell_ended, execution))
                    if self.live_output is not None:
                        self.live_output.track(execution)
                    return False
                outcome = started
            else:
                assert spec.callable is not None
                assert execution.context is not None
                self._mark_started(execution)  # the guard holds us already (see _work)
                params = execution.context.params
                outcome = run_callable(
                    spec.callable, {**spec.kwargs, **params} if params else spec.kwargs,
                    context=execution.context, output_limit=self.config.output_limit_bytes,
                )
        except BaseException as error:  # noqa: BLE001 - exactly one result per run
            outcome = Outcome(status=RunStatus.FAILED, error=f"executor error: {error!r}")
        execution.done.set()
        return self.finish(execution, outcome, by_worker=True)

    def _shell_ended(self, execution: Execution, outcome: Outcome) -> None:
        """On the shell watch's thread: a shell run ended. Record it, and start the next
        ready run in the place it frees: a shell run whose bash waits at its gate right
        here (opening a gate is quick), anything else on a worker thread."""
        execution.done.set()
        ended = execution if self.finish(execution, outcome, by_worker=True) else None
        while (following := self._take(ended=ended)) is not None:
            ended = None
            if following.context is not None or following.standby is None:
                self.workers.submit(functools.partial(self._work, following))
                return
            try:
                if self._execute(following):  # it ended at once (killed before it started)
                    ended = following
            except Exception:  # a bug must not leak the place
                log.exception("recording the end of a run failed")
                ended = following

    def finish(self, execution: Execution, outcome: Outcome, *, by_worker: bool = False) -> bool:
        """Record a run's outcome, once: the first to claim the run wins (its worker,
        or the killer for a Python run that timed out or was killed). Even a fenced
        node records outcomes: they are facts. A shell run that ended abnormally
        because the node fenced (or its guard killed it) is recorded ``abandoned``,
        never as the job's failure: its outcome is unknown, its recovery policy
        applies."""
        if not execution.handle.claim():
            return False
        if execution.context is None:
            self.spawner.give_up(execution)  # a bash started ahead, unused: it ran nothing
        if execution.submitted and not by_worker:
            # Its place is free at once (a Python run cut short may go on in its
            # thread, unwatched: it holds no place). A worker frees its own place as
            # it takes the next run.
            self.owned.free(execution)
            self._dispatch()
        if execution.context is None and outcome.status is not RunStatus.SUCCEEDED:
            self.check_guard()  # a guard kill is reported before the run can end of it
        with self._fence_lock:
            fence_killed = execution.fence_killed
        if fence_killed and execution.context is None and (
            (outcome.status is RunStatus.KILLED and execution.handle.reason == self.FENCE_KILL)
            or (outcome.status is RunStatus.FAILED and (outcome.exit_code or 0) < 0)
        ):
            outcome = Outcome(
                status=RunStatus.ABANDONED, exit_code=outcome.exit_code, output=outcome.output,
                error=f"killed when its node fenced ({self.fence_reason}); recovery policy applies",
                began=outcome.began,
            )
        if not outcome.began:
            execution.started_at = None  # it never started: no row claims it did
        ended = self.db_now()  # our estimate of the database clock; the start was its reading
        if execution.started_at is not None and ended < execution.started_at:
            ended = execution.started_at
        finished = Finished(fired=execution.fired, outcome=outcome, ended_at=ended,
                            started_at=execution.started_at)
        if self.journal is not None:
            self.journal.outcome(finished)
        self.results.put(finished)
        execution.recorded.set()
        self.results_service.queued()
        return True

    def police_python_runs(self) -> None:
        """Python threads cannot be killed: a run past its timeout or asked to die is
        recorded now, and its callable is told through ``context.cancelled``."""
        now = time.monotonic()
        for execution in list(self.owned.executing.values()):
            if execution.context is None or execution.done.is_set():
                continue
            if execution.handle.kill_requested:
                outcome = Outcome(status=RunStatus.KILLED, error=execution.handle.reason)
            elif execution.deadline is not None and now >= execution.deadline:
                timeout = execution.fired.prepared.spec.timeout_s or 0.0
                outcome = Outcome(status=RunStatus.TIMED_OUT, error=f"timed out after {timeout:g}s")
            else:
                continue
            execution.context.cancelled.set()
            self.finish(execution, outcome)

    def kill_requested_runs(self) -> None:
        for job_id, fire_id in self.store.kill_requests(self.session_id):
            execution = self.owned.executing.get(job_id)
            if execution is not None and execution.fired.prepared.fire_id == fire_id:
                if not execution.handle.kill_requested:
                    log.info("killing run of job %s on request", execution.fired.prepared.name,
                             extra={"action": "kill", "job": execution.fired.prepared.name})
                execution.handle.kill("killed on request")
