"""One scheduler node: its session, its threads, its in-memory prepared and executing
sets, and the order it stops in.

Threads (each a :class:`Service`):

==============  ==========================================================  =========
heartbeat       renew the session by the DB clock in one statement that also  critical
                returns the DB clock (offset); it locks nothing but its row
watchdog        fence when no heartbeat succeeded for ``fence_after_s``        critical
watch           one SELECT per ``poll_interval_s``: schedules the scanner at  critical
                the earliest due job, the expirer at the oldest peer's
                deadline, the compensator on a mismatch
killer          while runs execute, every 0.5 s: kill the ones asked to die
scanner         idle -> prepared under the job lock (look-ahead window)       critical
firer           prepared -> executing up to ``fire_ahead_s`` before due        critical
starter         hand each fired run to a worker thread at its instant         critical
results         executing -> idle in batches; retried until the outcome is    critical
                known
compensator     adopt/recover what the DB says we own but memory does not     critical
expirer         expire peers silent for ``session_timeout_s``                 critical
janitor         prune run history past ``history_retention_s``, hourly
==============  ==========================================================  =========

An idle node sends one statement per heartbeat and one per poll (1.5 statements per
second by default), whatever the number of jobs: nothing else polls; each service is
woken at the instant the watch computed for it, or by the events that concern it.
Jobs added or triggered elsewhere are noticed at the next poll.

The process mutex (``Node.mutex``) is held around every transaction that changes
what this node owns *and* the matching change of the in-memory sets, so the two
never disagree in a way the compensator could misread.

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

import bisect
import fcntl
import heapq
import itertools
import logging
import math
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType

from quartzlite import __version__
from quartzlite.clock import Clock, SystemClock
from quartzlite.config import NodeConfig
from quartzlite.enums import RunStatus, TargetKind
from quartzlite.errors import Fenced, QuartzliteError, SchemaError, StoreError, TransientStoreError
from quartzlite.executors import RunContext, RunHandle, run_callable, run_shell
from quartzlite.models import Finished, Fired, Outcome, Prepared
from quartzlite.node.journal import Journal, JournaledOutcome, orphaned
from quartzlite.node.planning import SchedulePlanner
from quartzlite.node.service import Service
from quartzlite.storage import migrate
from quartzlite.storage.engine import Database
from quartzlite.storage.jobs import JobStore
from quartzlite.storage.node import NodeStore

log = logging.getLogger("quartzlite.node")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_FENCED = 3
EXIT_FORCED = 4


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


@dataclass(slots=True)
class Execution:
    fired: Fired
    handle: RunHandle
    #: Python runs only: what the callable sees, and when it times out (monotonic).
    context: RunContext | None = None
    deadline: float | None = None
    #: When the starter released the run to a worker (database clock), once it has.
    started_at: datetime | None = None
    #: Set when the executing thread is done with it (a Python thread may never be).
    done: threading.Event = field(default_factory=threading.Event)
    #: Handed to a worker thread (it may have started).
    submitted: bool = False
    #: Running when the node fenced: its shell group was killed (by the node or its
    #: guard), so an abnormal end is that kill, never the job's failure.
    fence_killed: bool = False


class WorkerPool:
    """Daemon worker threads, reused. Unlike ThreadPoolExecutor's, they never keep the
    process from exiting (a Python callable may hang forever), and they are never
    capped: capacity bounds the runs. A run goes to an idle worker when there is one,
    else to a new one. ``start(n)`` starts n idle workers up front, so a burst of runs
    costs queue puts, not thread starts (1,000 thread starts took ~170 ms on the
    firer's path)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def start(self, count: int) -> None:
        with self._lock:
            self._idle += count
        for _ in range(count):
            self._spawn()

    def submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # an idle worker will take it
        self._queue.put(work)
        if spawn:
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            self._started += 1
            number = self._started
        threading.Thread(target=self._work, name=f"{self.name}-{number}", daemon=True).start()

    def _work(self) -> None:
        while True:
            work = self._queue.get()
            try:
                work()
            except BaseException:  # noqa: BLE001 - a worker outlives any one task
                log.exception("worker task failed")
            with self._lock:
                self._idle += 1


#: Upper bounds (seconds) of the fire-lateness histogram's buckets.
LATENESS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class Histogram:
    """Counts of observations per bucket (fixed upper bounds) and their sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self.bounds) + 1)  # the last bucket is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative counts ``[(upper bound, count <= bound), ..., (inf, total)]`` and
        the sum of all observations."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


@dataclass(slots=True)
class NodeStats:
    """Counters for logs and metrics."""

    fires: int = 0
    runs_by_status: dict[str, int] = field(default_factory=dict)
    lateness: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS))
    db_errors: int = 0


def tag_sets(tags: tuple[str, ...]) -> list[str]:
    """Every stored job-tag value this node may run: each subset of its tags, joined
    the way storage joins them (sorted, comma-separated; '' = any node)."""
    ordered = sorted(set(tags))
    found: list[str] = []
    for mask in range(1 << len(ordered)):
        found.append(",".join(t for i, t in enumerate(ordered) if mask & (1 << i)))
    return found


class GuardLink:
    """The node's end of the pipes to its guard process (see :mod:`quartzlite.node.guard`).

    Writes never block: a guard that stops reading (frozen, dead) fills the pipe, and a
    node must not hang on it; :meth:`problem` reports it instead, and the node fences.
    """

    #: Pipe buffer asked for, so that a burst of run starts never fills it.
    PIPE_BYTES = 1 << 20

    def __init__(self, fence_after_s: float) -> None:
        self._lock = threading.Lock()
        self.fence_after_s = fence_after_s
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "quartzlite.node.guard", repr(fence_after_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self._out = self.proc.stdin.fileno()
        self._in = self.proc.stdout.fileno()
        for fd in (self._out, self._in):
            os.set_blocking(fd, False)
        try:
            fcntl.fcntl(self._out, fcntl.F_SETPIPE_SZ, self.PIPE_BYTES)
        except OSError:
            pass  # the default 64 KiB still holds thousands of messages
        self._buffer = b""
        self._broken: str | None = None
        #: Monotonic instant of the oldest beat the guard has not answered yet.
        self._unanswered_since: float | None = None
        self.killed = 0
        self._python_runs = 0

    def send(self, line: str) -> None:
        data = line.encode() + b"\n"
        with self._lock:
            if self._broken is not None:
                return
            try:
                os.write(self._out, data)  # < PIPE_BUF: all or nothing
            except BlockingIOError:
                self._broken = "the guard process stopped reading its pipe"
            except OSError as error:
                self._broken = f"the pipe to the guard process broke ({error})"

    def beat(self, sent: float) -> None:
        with self._lock:
            if self._unanswered_since is None:
                self._unanswered_since = time.monotonic()
        self.send(f"beat {sent!r}")

    def group(self, pgid: int, started: bool) -> None:
        self.send(f"{'add' if started else 'del'} {pgid}")

    def python_run(self, started: bool) -> None:
        """A Python run starts or ends. A thread cannot be killed, only its process: while
        any runs, the guard holds this node's pid and SIGKILLs the node itself when it
        misses its deadline, so that no Python run outlives the session into a rerun."""
        with self._lock:
            before = self._python_runs
            self._python_runs += 1 if started else -1
            after = self._python_runs
        if before == 0 and after > 0:
            self.send(f"hold {os.getpid()}")
        elif before > 0 and after == 0:
            self.send("release")

    def problem(self) -> str | None:
        """Why this node is no longer guarded, if it is not: the guard killed our
        runs (we missed the deadline), died, stopped reading, or stopped answering."""
        with self._lock:
            while True:
                try:
                    data = os.read(self._in, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                if not data:
                    break
                self._buffer += data
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                word, _, arg = line.decode(errors="replace").partition(" ")
                if word == "ok":
                    self._unanswered_since = None
                elif word == "killed" and arg.isdigit():
                    self.killed += int(arg)
            if self.killed:
                return (f"the guard killed {self.killed} running job(s): this node missed its "
                        f"heartbeat deadline (frozen or starved for fence_after_s)")
            code = self.proc.poll()
            if code is not None:
                return f"the guard process died (exit status {code})"
            if self._broken is not None:
                return self._broken
            if (self._unanswered_since is not None
                    and time.monotonic() - self._unanswered_since > self.fence_after_s):
                return (f"the guard process has not answered for "
                        f"{time.monotonic() - self._unanswered_since:.1f}s")
            return None

    def close(self, *, kill: bool = False) -> None:
        self.send("kill" if kill else "exit")
        with self._lock:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        # Poll with an Event's wait rather than Popen.wait(timeout), which sleeps with
        # clock_nanosleep: that fails (EINVAL) under libfaketime faking the wall clock.
        pause = threading.Event()
        deadline = time.monotonic() + 5
        while self.proc.poll() is None and time.monotonic() < deadline:
            pause.wait(0.01)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


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
        self.fenced = threading.Event()
        #: Set when the node gives up recording outcomes (it is exiting).
        self.results_stop = threading.Event()
        # Every retry loop but the results' stops at the fence: a fenced node writes
        # nothing but outcomes.
        self.store = NodeStore(self.db, node_name=self.node_name, stop=self.fenced)
        self.hb_store = NodeStore(self.hb_db, node_name=self.node_name, stop=self.fenced)
        self.journal: Journal | None = None
        self.planner = SchedulePlanner()
        self.tag_sets = tag_sets(config.tags)
        self.mutex = threading.RLock()
        self.prepared: dict[int, Prepared] = {}
        self.executing: dict[int, Execution] = {}
        self.results: queue.Queue[Finished] = queue.Queue()
        self.fence_reason = ""
        #: Held while fencing marks the running executions, and while a result is
        #: judged against that mark (a guard's kill is not the job's failure).
        self._fence_lock = threading.RLock()
        #: Python runs still executing when the fenced node gave up waiting for them.
        self.unkillable_left = 0
        self.stopping = False
        self.done = threading.Event()
        self.crashed: tuple[str, BaseException] | None = None
        self.guard: GuardLink | None = None
        self.offset_s = 0.0
        self.last_beat_mono = self.clock.monotonic()
        self.healthy_since: float | None = None
        self._batches = itertools.count(1)
        self.workers = WorkerPool("run")
        self.heartbeat = _Heartbeat(self)
        self.watchdog = _Watchdog(self)
        self.watcher = _Watch(self)
        self.killer = _Killer(self)
        self.scanner = _Scanner(self)
        self.firer = _Firer(self)
        self.starter = _Starter(self)
        self.results_service = _Results(self)
        self.compensator = _Compensator(self)
        self.expirer = _Expirer(self)
        self.janitor = _Janitor(self)
        self.services: list[Service] = [
            self.heartbeat, self.watchdog, self.watcher, self.killer, self.scanner, self.firer,
            self.starter, self.results_service, self.compensator, self.expirer, self.janitor,
        ]
        #: The scanner stopped because the node was full: results wake it at once.
        self.scan_blocked = False

    # -- what others may ask -------------------------------------------------------------

    def is_live(self) -> bool:
        """True while the session is registered, renewed and not fenced."""
        return (
            not self.fenced.is_set()
            and not self.done.is_set()
            and self.healthy_since is not None
            and self.clock.monotonic() - self.last_beat_mono < self.config.fence_after_s
        )

    def heartbeat_age_s(self) -> float:
        return self.clock.monotonic() - self.last_beat_mono

    def poke(self) -> None:
        """A job was added, triggered or changed in this process (``quartzlite serve``):
        run the watch now instead of at the next poll."""
        if not self.fenced.is_set() and not self.stopping:
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
        for service in self.services:
            service.start()
        if self.on_started is not None:
            self.on_started(self)
        try:
            return self._main_loop()
        except Exception as error:  # noqa: BLE001 - a bug must not leave runs unjudged
            # Whatever went wrong, runs must not be killed as failures on the way out:
            # fence (every running run is judged abandoned), record what is known.
            log.exception("the node's main loop failed", extra={"action": "node_error"})
            self.fence(f"unexpected error in the node: {error!r}")
            try:
                self._after_fence()
            except Exception:  # noqa: BLE001
                log.exception("recording outcomes after the error failed")
            return EXIT_ERROR
        finally:
            self.done.set()
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
            if self.stop_request.level == 1 and not self.stopping:
                return self._graceful_stop()
            self.stop_request.wait(0.1)

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
            self.fenced.set()
            for service in (self.watcher, self.scanner, self.firer, self.starter,
                            self.compensator, self.expirer, self.janitor, self.killer):
                service.stop()
            # Every run not yet judged is marked (one the guard just killed has ended
            # already); only runs still going are killed: an ended run's group is gone,
            # and its id may be someone else's by now.
            executions = []
            for execution in self.executing.values():
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
            reason, running, len(self.prepared),
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
                        self.store.complete(session_id=session_id, finished=finished,
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
        for execution in list(self.executing.values()):
            # Shell runs end once their group is killed.
            if execution.context is None and execution.submitted:
                execution.done.wait(max(0.0, deadline - time.monotonic()))
        for execution in list(self.executing.values()):
            if not execution.submitted:
                # Released by the start check perhaps, but never handed to a worker.
                execution.started_at = None
                execution.done.set()
                self.finish(execution, Outcome(
                    status=RunStatus.ABANDONED,
                    error=f"never started: its node fenced ({self.fence_reason})",
                ))
        self.prepared.clear()
        expiry = self.config.session_timeout_s - (self.clock.monotonic() - self.last_beat_mono)
        deadline = time.monotonic() + max(1.0, expiry)
        # Python runs end only with this process: it must be gone before a peer may
        # expire the session (the database stamped our last beat before we saw it commit,
        # so leave a beat's margin) and rerun them.
        python_deadline = time.monotonic() + expiry - self.config.heartbeat_interval_s
        while time.monotonic() < deadline and self.stop_request.level < 2:
            if time.monotonic() >= python_deadline and any(
                e.context is not None and not e.done.is_set() for e in self.executing.values()
            ):
                break
            pending = self.journal.pending if self.journal is not None else 0
            if pending == 0 and self.results.empty() and all(
                e.done.is_set() for e in self.executing.values()
            ):
                break
            self.stop_request.wait(0.1)
        self.unkillable_left = sum(1 for e in self.executing.values() if not e.done.is_set())
        left = self.journal.pending if self.journal is not None else 0
        if left:
            log.warning("%d outcome(s) not recorded yet: left in the journal %s",
                        left, self.journal.path if self.journal else "-",
                        extra={"action": "journal_left"})
        self.results_stop.set()
        self.results_service.stop()
        self.executing.clear()
        return EXIT_FENCED

    def _force_stop(self) -> int:
        log.warning("second signal: killing running jobs and exiting now",
                    extra={"action": "forced_stop"})
        self.fenced.set()
        for service in self.services:
            service.stop()
        for execution in list(self.executing.values()):
            execution.handle.kill("node stopped at once (second signal)", force=True)
        if self.guard is not None:
            self.guard.send("kill")
        return EXIT_FORCED

    def _graceful_stop(self) -> int:
        self.stopping = True
        log.info("stopping: handing back prepared jobs, waiting for running ones",
                 extra={"action": "stopping"})
        for service in (self.watcher, self.scanner, self.compensator, self.expirer, self.janitor):
            service.stop()
        with self.mutex:
            self.firer.stop()
            try:
                handed = self.store.hand_back(self.session_id)
            except StoreError as error:
                log.warning("could not hand back prepared jobs: %s", error.message)
                handed = 0
            self.prepared.clear()
        log.info("handed back %d prepared job(s)", handed, extra={"action": "handed_back"})
        deadline = time.monotonic() + self.config.shutdown_grace_s
        while self.executing and time.monotonic() < deadline:
            if self.stop_request.level >= 2 or self.fenced.is_set():
                return self._force_stop() if self.stop_request.level >= 2 else self._after_fence()
            self.stop_request.wait(0.1)
        if self.executing:
            log.warning("shutdown grace over: killing %d running job(s)", len(self.executing),
                        extra={"action": "shutdown_kill"})
            for execution in list(self.executing.values()):
                execution.handle.kill("node shut down before the run ended")
            deadline = time.monotonic() + self.config.kill_grace_s + 5
            while self.executing and time.monotonic() < deadline:
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
        if self.guard is not None:
            # Whatever still runs now must not outlive the node.
            self.guard.close(kill=bool(self.executing) or self.fenced.is_set())
        if self.journal is not None:
            self.journal.close(delete=True)  # kept if it holds unrecorded outcomes
        self.db.dispose()
        self.hb_db.dispose()

    # -- execution ---------------------------------------------------------------------

    def start_execution(self, fired: Fired) -> Execution:
        """Called under the mutex after the fire commit: the run is ours; the starter
        hands it to a worker thread at its instant."""
        p = fired.prepared
        handle = RunHandle(on_group=self.guard.group if self.guard is not None else None)
        execution = Execution(fired=fired, handle=handle)
        if p.spec.target_kind is TargetKind.PYTHON:
            execution.context = RunContext(
                job=p.name, fire_id=p.fire_id, run_id=fired.run_id,
                planned_at=p.fire_at, slot_at=p.slot_at, attempt=p.attempt,
            )
        self.executing[p.job_id] = execution
        return execution

    def submit(self, execution: Execution) -> None:
        execution.submitted = True
        self.workers.submit(lambda: self._execute(execution))

    def _mark_started(self, execution: Execution) -> None:
        timeout = execution.fired.prepared.spec.timeout_s
        if timeout is not None and execution.context is not None:
            execution.deadline = time.monotonic() + timeout
        self.stats.lateness.observe((self.db_now() - execution.fired.prepared.fire_at).total_seconds())

    def _execute(self, execution: Execution) -> None:
        fired = execution.fired
        p = fired.prepared
        spec = p.spec
        try:
            if self.fenced.is_set():
                execution.started_at = None
                outcome = Outcome(status=RunStatus.ABANDONED,
                                  error=f"never started: its node fenced ({self.fence_reason})")
            elif execution.handle.kill_requested:
                execution.started_at = None
                outcome = Outcome(
                    status=RunStatus.KILLED, error=f"{execution.handle.reason} (before it started)",
                )
            elif spec.target_kind is TargetKind.SHELL:
                self._mark_started(execution)
                assert spec.command is not None
                outcome = run_shell(
                    spec.command,
                    env={
                        "QUARTZLITE_JOB": p.name,
                        "QUARTZLITE_FIRE_ID": p.fire_id,
                        "QUARTZLITE_RUN_ID": str(fired.run_id),
                        "QUARTZLITE_PLANNED_AT": p.fire_at.isoformat(),
                        "QUARTZLITE_SLOT_AT": p.slot_at.isoformat(),
                        "QUARTZLITE_ATTEMPT": str(p.attempt),
                    },
                    timeout_s=spec.timeout_s,
                    kill_grace_s=self.config.kill_grace_s,
                    output_limit=self.config.output_limit_bytes,
                    handle=execution.handle,
                )
            else:
                assert spec.callable is not None
                assert execution.context is not None
                self._mark_started(execution)
                if self.guard is not None:
                    self.guard.python_run(True)
                try:
                    outcome = run_callable(
                        spec.callable, spec.kwargs, context=execution.context,
                        output_limit=self.config.output_limit_bytes,
                    )
                finally:
                    if self.guard is not None:
                        self.guard.python_run(False)
        except BaseException as error:  # noqa: BLE001 - exactly one result per run
            outcome = Outcome(status=RunStatus.FAILED, error=f"executor error: {error!r}")
        finally:
            execution.done.set()
        self.finish(execution, outcome)

    def finish(self, execution: Execution, outcome: Outcome) -> None:
        """Record a run's outcome, once: the first to claim the run wins (its worker,
        or the killer for a Python run that timed out or was killed). Even a fenced
        node records outcomes: they are facts. A shell run that ended abnormally
        because the node fenced (or its guard killed it) is recorded ``abandoned``,
        never as the job's failure: its outcome is unknown, its recovery policy
        applies."""
        if not execution.handle.claim():
            return
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
            )
        ended = self.db_now()  # our estimate of the database clock; the start was its reading
        if execution.started_at is not None and ended < execution.started_at:
            ended = execution.started_at
        finished = Finished(fired=execution.fired, outcome=outcome, ended_at=ended,
                            started_at=execution.started_at)
        if self.journal is not None:
            self.journal.outcome(finished)
        self.results.put(finished)
        self.results_service.wake()

    def police_python_runs(self) -> None:
        """Python threads cannot be killed: a run past its timeout or asked to die is
        recorded now, and its callable is told through ``context.cancelled``."""
        now = time.monotonic()
        for execution in list(self.executing.values()):
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
            execution = self.executing.get(job_id)
            if execution is not None and execution.fired.prepared.fire_id == fire_id:
                if not execution.handle.kill_requested:
                    log.info("killing run of job %s on request", execution.fired.prepared.name,
                             extra={"action": "kill", "job": execution.fired.prepared.name})
                execution.handle.kill("killed on request")


class _NodeService(Service):
    def __init__(self, node: Node, interval_s: float) -> None:
        super().__init__(interval_s, node.on_crash)
        self.node = node


class _Heartbeat(_NodeService):
    name = "heartbeat"

    #: After a failed heartbeat, try again this soon (a short outage ends unnoticed).
    RETRY_S = 0.25

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.heartbeat_interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return None
        sent_mono = node.clock.monotonic()
        silent = sent_mono - node.last_beat_mono
        if silent > node.config.fence_after_s:
            # Frozen past the deadline (the watchdog may not have run yet): the guard
            # has killed our runs; a beat now would hide that.
            node.fence(f"no heartbeat reached the database for {silent:.1f}s "
                       f"(fence_after_s={node.config.fence_after_s:g})")
            return None
        sent_real = time.monotonic()
        try:
            beat = node.hb_store.heartbeat(node.session_id, node.offset_s * 1000, node.clock.now)
        except QuartzliteError as error:
            node.healthy_since = None
            log.warning("heartbeat failed: %s", error.message, extra={"action": "heartbeat_failed"})
            return self.RETRY_S
        if not beat.alive:
            node.fence("our session is gone: peers expired it")
            return None
        if beat.db_now is not None:
            node.offset_s = (beat.db_now - beat.local_mid).total_seconds()
        # Count from when we sent it: the database stamped it no earlier than that.
        node.last_beat_mono = sent_mono
        if node.guard is not None:
            node.guard.beat(sent_real)
        if node.healthy_since is None:
            node.healthy_since = sent_mono
        return max(0.0, self.interval_s - (node.clock.monotonic() - sent_mono))


class _Watch(_NodeService):
    name = "watch"

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.poll_interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set() or node.stopping:
            return None
        seen = node.store.watch(node.session_id, node.tag_sets)
        config = node.config
        if seen.earliest_due is not None:
            node.scanner.schedule(
                (seen.earliest_due - seen.db_now).total_seconds() - config.look_ahead_s
            )
        if seen.orphaned_jobs:
            node.expirer.wake()
        elif seen.oldest_peer_heartbeat is not None:
            deadline = seen.oldest_peer_heartbeat + timedelta(seconds=config.session_timeout_s)
            node.expirer.schedule((deadline - seen.db_now).total_seconds() + 0.005)
        if seen.owned_jobs != len(node.prepared) + len(node.executing):
            node.compensator.schedule(0.2)  # a transition may be committing right now
        return None


class _Killer(_NodeService):
    name = "killer"

    def __init__(self, node: Node) -> None:
        super().__init__(node, min(0.5, node.config.heartbeat_interval_s))

    def run_once(self) -> float | None:
        node = self.node
        if node.executing and not node.fenced.is_set():
            node.kill_requested_runs()
            node.police_python_runs()
        return None


class _Watchdog(_NodeService):
    name = "watchdog"

    def __init__(self, node: Node) -> None:
        super().__init__(node, min(0.1, node.config.heartbeat_interval_s / 4))

    def run_once(self) -> float | None:
        node = self.node
        silent = node.clock.monotonic() - node.last_beat_mono
        if silent > node.config.fence_after_s and not node.fenced.is_set():
            node.fence(f"no heartbeat reached the database for {silent:.1f}s "
                       f"(fence_after_s={node.config.fence_after_s:g})")
        node.check_guard()  # a node without a live guard is not running
        return None


class _Scanner(_NodeService):
    name = "scanner"

    #: Most jobs prepared in one transaction. A large due set is taken in turns, so
    #: peers woken for the same instant share it (and the job lock is held briefly).
    BATCH = 500
    #: Pause between two full batches: a peer waiting for the job lock goes first.
    TURN_S = 0.005

    def __init__(self, node: Node) -> None:
        # Woken by the watch (a job is due within the look-ahead), by results (capacity
        # freed, jobs rescheduled), by hand-backs; the interval is only a safety net.
        super().__init__(node, 60.0)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set() or node.stopping:
            return None
        free = node.config.capacity - len(node.prepared) - len(node.executing)
        node.scan_blocked = free <= 0
        if free <= 0:
            return None
        with node.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            prefix = f"{node.session_id}:{next(node._batches)}:"
            try:
                scan = node.store.prepare_due(
                    session_id=node.session_id, fire_prefix=prefix,
                    limit=min(free, self.BATCH),
                    tag_sets=node.tag_sets, look_ahead_s=node.config.look_ahead_s,
                    planner=node.planner,
                )
            except Fenced as error:
                node.fence(error.message)
                return None
            for p in scan.prepared:
                node.prepared[p.job_id] = p
        if scan.prepared:
            log.debug("prepared %d job(s)", len(scan.prepared), extra={"action": "prepared"})
            node.firer.wake()
        if len(scan.prepared) >= free:
            node.scan_blocked = True
            return 0.0
        if len(scan.prepared) >= self.BATCH:
            return self.TURN_S
        if scan.next_due is not None:
            return max(0.0, (scan.next_due - scan.db_now).total_seconds() - node.config.look_ahead_s)
        return None


class _Firer(_NodeService):
    name = "firer"

    #: Jobs due within this many seconds of the earliest are fired in the same batch.
    BATCH_WINDOW_S = 0.002
    #: Most jobs fired in one transaction (chunking a burst further measured slower:
    #: run start-up then competes with the next chunk's transaction for the CPU).
    MAX_BATCH = 1000

    def __init__(self, node: Node) -> None:
        super().__init__(node, 1.0)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return None
        snapshot = list(node.prepared.values())
        if not snapshot:
            return None
        ahead = node.config.effective_fire_ahead_s
        earliest = min(p.fire_at for p in snapshot)
        wait = (earliest - node.db_now()).total_seconds() - ahead
        if wait > self.BATCH_WINDOW_S:
            return min(wait, self.interval_s)
        with node.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            horizon = node.db_now() + timedelta(seconds=ahead + self.BATCH_WINDOW_S)
            due = sorted(
                (p for p in node.prepared.values() if p.fire_at <= horizon),
                key=lambda p: (p.fire_at, -p.spec.priority),
            )[: self.MAX_BATCH]
            if not due:
                return 0.0
            began = time.monotonic()
            fired, lost = node.store.fire(
                session_id=node.session_id, items=due, planner=node.planner, ahead_s=ahead
            )
            log.debug(
                "fired %d of %d due (planned %s, %.1f ms ahead, tx %.1f ms)",
                len(fired), len(due), due[0].fire_at.isoformat(),
                (due[0].fire_at - node.db_now()).total_seconds() * 1000,
                (time.monotonic() - began) * 1000, extra={"action": "fired"},
            )
            for job_id in lost:
                node.prepared.pop(job_id, None)
            started: list[Execution] = []
            for f in fired:
                node.prepared.pop(f.prepared.job_id, None)
                if node.fenced.is_set():
                    continue
                started.append(node.start_execution(f))
                node.stats.fires += 1
            node.starter.add(started)
        if lost:
            node.scanner.wake()
        if len(fired) + len(lost) < len(due):
            return 0.001  # some were not due yet by the database clock
        return 0.0


class _Starter(_NodeService):
    """Releases fired runs to worker threads at their planned instant, highest priority
    first. A run fired ahead of its instant is released only after a start check at
    the instant (one lock-free read for all runs due together): by the database clock
    the instant has come, and the job was not paused, deleted or asked to die in the
    meantime; those never start (recorded ``cancelled`` or ``killed``, with no
    ``started_at``). One thread releasing runs through the pool's queue wakes one
    worker per run, where a thousand workers each timing their own wait measured ~3x
    slower (they all wake at once and fight for the GIL)."""

    name = "starter"

    #: After a failed start check, check again this soon.
    RETRY_S = 0.25

    #: Why a run fired ahead did not start -> its outcome.
    STOPPED: dict[str, tuple[RunStatus, str]] = {
        "kill": (RunStatus.KILLED, "killed on request (before it started)"),
        "paused": (RunStatus.CANCELLED, "the job was paused before the run's instant"),
        "deleted": (RunStatus.CANCELLED, "the job was deleted before the run's instant"),
        "moved": (RunStatus.CANCELLED, "the job is no longer this node's fire"),
    }

    def __init__(self, node: Node) -> None:
        super().__init__(node, 60.0)
        self._heap_lock = threading.Lock()
        self._waiting: list[tuple[datetime, int, int, Execution]] = []
        self._order = itertools.count()

    def add(self, executions: Sequence[Execution]) -> None:
        if not executions:
            return
        with self._heap_lock:
            for e in executions:
                self._push(e)
        self.wake()

    def _push(self, e: Execution) -> None:
        p = e.fired.prepared
        heapq.heappush(self._waiting, (p.fire_at, -p.spec.priority, next(self._order), e))

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return None
        now = node.db_now()
        due: list[Execution] = []
        with self._heap_lock:
            while self._waiting and self._waiting[0][0] <= now:
                due.append(heapq.heappop(self._waiting)[3])
        release: list[Execution] = []
        ahead: list[Execution] = []
        for e in due:
            if e.fired.prepared.fire_at <= e.fired.fired_at:
                # Fired at or after its instant: the fire transaction was its check.
                e.started_at = e.fired.fired_at
                release.append(e)
            elif e.handle.kill_requested:
                self._not_started(e, "kill")
            else:
                ahead.append(e)
        held = 0.0
        if ahead:
            checked, held = self._check(ahead)
            release.extend(checked)
        for e in release:
            if node.fenced.is_set():
                return None
            node.submit(e)
        with self._heap_lock:
            following = self._waiting[0][0] if self._waiting else None
        if following is None:
            return None
        return max(held, (following - node.db_now()).total_seconds())

    def _check(self, ahead: list[Execution]) -> tuple[list[Execution], float]:
        """The start check: the runs to release now, and how long until the database
        clock reaches the instant of those put back (it lagged our estimate)."""
        node = self.node
        try:
            check = node.store.start_check(node.session_id, [e.fired.prepared for e in ahead])
        except TransientStoreError as error:
            # Never start unchecked: the database may be gone for good, and then a
            # peer will run these once this node has fenced. Try again shortly; they
            # start (late) when it answers, or never if the node fences first.
            log.warning("start check failed (%s): %d run(s) wait for the database",
                        error.message, len(ahead), extra={"action": "start_check_failed"})
            with self._heap_lock:
                for e in ahead:
                    self._push(e)
            return [], self.RETRY_S
        release: list[Execution] = []
        held = 0.0
        for e in ahead:
            p = e.fired.prepared
            why = check.stopped.get(p.job_id)
            if why is not None:
                self._not_started(e, why)
            elif p.fire_at > check.db_now:  # our clock estimate ran ahead of the database's
                held = max(held, (p.fire_at - check.db_now).total_seconds())
                with self._heap_lock:
                    self._push(e)
            else:
                e.started_at = check.db_now
                release.append(e)
        return release, held

    def _not_started(self, execution: Execution, why: str) -> None:
        status, reason = self.STOPPED[why]
        if why == "kill" and execution.handle.reason:
            reason = f"{execution.handle.reason} (before it started)"
        execution.done.set()  # never submitted: no worker will set it
        log.info("run of job %s not started: %s", execution.fired.prepared.name, reason,
                 extra={"action": "not_started", "job": execution.fired.prepared.name})
        self.node.finish(execution, Outcome(status=status, error=reason))


class _Results(_NodeService):
    name = "results"

    #: Results wait this long for company before they are recorded: runs that end
    #: together share one transaction (and one re-prepare), instead of one each.
    LINGER_S = 0.02

    def __init__(self, node: Node) -> None:
        super().__init__(node, 1.0)
        self._first_seen: float | None = None

    def run_once(self) -> float | None:
        node = self.node
        if node.results.empty():
            return None
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = now
        waited = now - self._first_seen
        if waited < self.LINGER_S and node.results.qsize() < node.config.result_batch:
            return self.LINGER_S - waited
        self._first_seen = None
        return self._record()

    def drain(self) -> None:
        """Record whatever is left (the last step of a graceful stop)."""
        while not self.node.results.empty():
            try:
                self._record()
            except TransientStoreError as error:
                log.error("could not record results: %s", error.message)
                return

    def _record(self) -> float | None:
        node = self.node
        batch: list[Finished] = []
        while len(batch) < node.config.result_batch:
            try:
                batch.append(node.results.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return None
        with node.mutex:
            try:
                done = node.store.complete(
                    session_id=node.session_id, finished=batch, planner=node.planner,
                    stop=node.results_stop,
                )
            except TransientStoreError:
                for item in batch:  # outcomes are facts: keep them until recorded
                    node.results.put(item)
                raise
            if node.journal is not None:
                node.journal.recorded([item.fired.run_id for item in batch])
            for item in batch:
                job_id = item.fired.prepared.job_id
                current = node.executing.get(job_id)
                if current is not None and current.fired.run_id == item.fired.run_id:
                    del node.executing[job_id]
                status = item.outcome.status.value
                node.stats.runs_by_status[status] = node.stats.runs_by_status.get(status, 0) + 1
        if node.scan_blocked:
            node.scanner.wake()
        if done.next_due is not None:
            # Not at once: results that follow within a moment join the same prepare.
            node.scanner.schedule(max(
                self.LINGER_S,
                (done.next_due - done.db_now).total_seconds() - node.config.look_ahead_s,
            ))
        return 0.0 if not node.results.empty() else None


class _Compensator(_NodeService):
    name = "compensator"

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.compensate_interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set() or node.stopping:
            return None
        owned = node.store.owned(node.session_id)
        with node.mutex:
            known = self._known()
        if all((o.job_id, o.fire_id) in known for o in owned):
            return None
        with node.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            adopted, recovered = node.store.compensate(
                session_id=node.session_id, in_memory=self._known(), planner=node.planner
            )
            for p in adopted:
                node.prepared[p.job_id] = p
        if adopted or recovered:
            log.warning(
                "compensation: adopted %d prepared job(s), recovered %d run(s) never started",
                len(adopted), recovered, extra={"action": "compensated"},
            )
            node.firer.wake()
        return None

    def _known(self) -> set[tuple[int, str]]:
        node = self.node
        known = {(p.job_id, p.fire_id) for p in node.prepared.values()}
        known.update(
            (e.fired.prepared.job_id, e.fired.prepared.fire_id) for e in node.executing.values()
        )
        return known


class _Janitor(_NodeService):
    """Prunes run history past ``history_retention_s``: a minute after start, then hourly
    (two cheap statements when there is nothing to delete). Not critical: a failed pass
    is logged and tried again at the next."""

    name = "janitor"
    critical = False
    #: The first pass, a minute after start (not in a restart's busiest moments).
    FIRST_S = 60.0
    EVERY_S = 3600.0

    def __init__(self, node: Node) -> None:
        super().__init__(node, self.EVERY_S)
        self._first = True

    def run_once(self) -> float | None:
        node = self.node
        if self._first:
            self._first = False
            return self.FIRST_S
        if node.fenced.is_set() or node.stopping or not node.config.history_retention_s:
            return None
        pruned = JobStore(node.db).prune_history(node.config.history_retention_s, stop=node.fenced)
        if pruned.runs or pruned.jobs:
            log.info(
                "pruned history before %s: %d run(s), %d deleted job(s)",
                pruned.before.isoformat(), pruned.runs, pruned.jobs,
                extra={"action": "history_pruned"},
            )
        return None


class _Expirer(_NodeService):
    name = "expirer"

    def __init__(self, node: Node) -> None:
        # Scheduled by the watch at the oldest peer's deadline; the interval is a net.
        super().__init__(node, 60.0)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set() or node.stopping or node.healthy_since is None:
            return None
        # Judge peers only after heartbeating without a break for a whole timeout:
        # after an outage every node saw, nobody evicts anybody.
        judged = node.clock.monotonic() - node.healthy_since
        if judged < node.config.session_timeout_s:
            return node.config.session_timeout_s - judged
        dead = node.store.expire_sessions(
            session_id=node.session_id, session_timeout_s=node.config.session_timeout_s,
            planner=node.planner,
        )
        if dead:
            node.scanner.wake()
        node.watcher.wake()  # learn the next deadline
        return None


def _wait_for_database(config: NodeConfig, stop: StopRequest) -> bool:
    db = Database(config.database_url, io_timeout_s=2)
    try:
        while stop.level == 0:
            try:
                migrate.check_ready(db)
                return True
            except StoreError as error:
                log.info("waiting for the database to rejoin: %s", error.message,
                         extra={"action": "rejoin_wait"})
            stop.wait(1.0)
        return False
    finally:
        db.dispose()


def run_node(
    config: NodeConfig,
    *,
    clock: Clock | None = None,
    on_started: Callable[[Node], None] | None = None,
    stop: StopRequest | None = None,
) -> int:
    """Run a node in this process (signal handlers on the main thread) until it stops;
    returns the exit code. ``on_started`` is called with each new Node once its
    session is registered (again after a rejoin)."""
    stop = stop or StopRequest()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.request()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        node = Node(config, clock=clock, stop_request=stop, on_started=on_started)
        code = node.run()
        if code == EXIT_FENCED:
            log.error("node fenced: %s", node.fence_reason, extra={"action": "exit_fenced"})
            if config.rejoin and node.unkillable_left:
                # Threads cannot be killed; only this process's exit ends them. Joining
                # again beside them could overlap with a peer's rerun.
                log.error("not rejoining: %d Python run(s) of the fenced session still "
                          "execute; exiting so that they end", node.unkillable_left,
                          extra={"action": "no_rejoin"})
                return code
            if config.rejoin and stop.level == 0 and _wait_for_database(config, stop):
                log.info("rejoining under a new session", extra={"action": "rejoin"})
                continue
        return code
