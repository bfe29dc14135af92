r"""Executors: run one attempt of a job and return exactly one :class:`Outcome`, on
every path. They never touch the database.

Shell commands run as ``bash -c`` in a new session (their own process group), so a
timeout, a kill or a fence signals the whole tree: SIGTERM to the group, SIGKILL after
the grace period. When the command ends, stragglers left in its group are killed too,
so no child outlives its run. The command starts only once its process group is known
to the node's guard (see :func:`_gated`), so bash may be started well ahead of the run
(:func:`spawn_shell`; a node starts it as the run is fired) and wait at its gate.
:func:`start_shell` opens the gate and returns the :class:`ShellRun` to watch to its end
(:func:`run_shell` watches one on its own thread, the node's shell watch all of its runs
on one thread). bash is reaped only after its handle has let go of the
group id, so a late kill can never signal a group id reused by another process. The
command sees the node's environment without its ``QUARTZLITE_*`` settings (see
:func:`job_environment`), and its trigger parameters as ``QUARTZLITE_PARAM_<NAME>``
(:func:`params_environment`). Its output so far can be read from any thread while it
runs (:meth:`ShellRun.output_since`): the node writes it to the run's row.

Python callables (``package.module:function``) run on the calling worker thread with
their JSON keyword arguments (the job's kwargs, with the trigger's parameters over
them); :func:`current_run` tells them which run they are (and its ``params``). A
thread cannot be killed: on timeout or kill the node records the run at once (whoever
:meth:`RunHandle.claim`\ s a run first records its one outcome) and sets the callable's
:attr:`RunContext.cancelled` event, so a cooperative callable stops.
"""

from __future__ import annotations

import contextvars
import fcntl
import importlib
import json
import logging
import os
import secrets
import select
import signal
import subprocess
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from quartzlite.enums import RunStatus
from quartzlite.models import Outcome, Shard

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """What a running job may know about itself."""

    job: str
    fire_id: str
    run_id: int
    planned_at: datetime
    slot_at: datetime
    attempt: int
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: The parameters the slot was triggered with ({}: none); the callable got them
    #: merged over the job's kwargs already.
    params: Mapping[str, Any] = field(default_factory=dict)
    #: A broadcast run's shard: its ``index`` and the ``total`` of nodes that run the
    #: slot (None: not a broadcast run).
    shard: Shard | None = None


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "quartzlite_run", default=None
)


def current_run() -> RunContext | None:
    """The run a Python callable is executing for (None outside a run)."""
    return _current.get()


class RunHandle:
    """Control of one running attempt: kill it (gracefully or at once)."""

    def __init__(self, on_group: Callable[[int, bool], None] | None = None,
                 on_kill: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._kill = threading.Event()
        self.reason: str | None = None
        self.force = False
        #: The process group of the running command; None before it starts and once
        #: its run has ended (the id may then belong to another process).
        self.pgid: int | None = None
        self._claimed = False
        #: Told (pgid, True) when a process group starts and (pgid, False) when it is gone.
        self.on_group = on_group
        #: Told when a kill is asked for (after the signal, if forced): wakes the watcher.
        self.on_kill = on_kill

    def kill(self, reason: str, *, force: bool = False) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self.force = self.force or force
            self._kill.set()  # before the signal: the runner reports the run killed
            # Under the lock: the runner clears pgid (under it too) before it lets go of
            # the group, so only a group this run still holds is signalled.
            if force and self.pgid is not None:
                _signal_group(self.pgid, signal.SIGKILL)
        if self.on_kill is not None:
            self.on_kill()

    @property
    def kill_requested(self) -> bool:
        return self._kill.is_set()

    def claim(self) -> bool:
        """True for the first caller only: that one records the run's outcome."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def wait_kill(self, timeout: float) -> bool:
        return self._kill.wait(timeout)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid: int) -> bool:
    """True once ``pid`` has exited, without reaping it: while it is an unreaped zombie
    its pid, which is its process group id, cannot be given to another process."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _gated(command: str, key: str) -> str:
    """``command`` behind a gate: bash first reads a line from its standard input, a pipe
    the node writes once the process group is registered with its guard, and goes on
    only if the line is ``key``, this bash's own random word. A node that dies in
    between (SIGKILL right after the fork) closes the pipe, bash reads end-of-file and
    exits 125: no command runs unguarded, orphaned, beside the rerun a peer will start.
    Any other line (none should ever come) makes it exit 124, its command unrun. The
    command then reads from /dev/null. (The gate is standard input, not a descriptor
    passed on: with one passed, Python 3.11 closes the child's other descriptors by
    listing /proc/self/fd, and reaping each such child cost the node ~0.3 ms of CPU
    invalidating those /proc entries.) Past the gate, bash writes one byte, ``BEGAN``, to
    its output before the command: a run killed before that byte came never began
    (:attr:`ShellRun.began`), and claims no start."""
    return (f'read -r _gate || exit 125\n[ "$_gate" = {key} ] || exit 124\nunset _gate\n'
            f"exec </dev/null\nprintf '\\001'\n{command}")


def job_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a shell job: this process's environment without any
    ``QUARTZLITE_*`` variable (the node's own settings: the database URL and its password,
    tokens), then ``extra`` (the run's ``QUARTZLITE_JOB``, ``QUARTZLITE_RUN_ID``, ...)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("QUARTZLITE_")}
    return {**inherited, **extra}


#: The prefix of the environment variables that carry a shell run's parameters.
PARAM_PREFIX = "QUARTZLITE_PARAM_"


def params_environment(params: Mapping[str, Any] | None) -> dict[str, str]:
    """A run's trigger parameters as environment variables: ``QUARTZLITE_PARAM_<NAME>``
    (the name upper-cased); a string as it is, null as the empty string, anything else
    (numbers, booleans) in its JSON spelling (``true``, ``3``, ``1.5``)."""
    found: dict[str, str] = {}
    for key, value in (params or {}).items():
        if isinstance(value, str):
            text = value
        elif value is None:
            text = ""
        else:
            text = json.dumps(value)
        found[PARAM_PREFIX + key.upper()] = text
    return found


class _Tail:
    """The last ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        while self.size > self.limit and self.chunks:
            first = self.chunks[0]
            excess = self.size - self.limit
            if len(first) <= excess:
                self.chunks.popleft()
                self.size -= len(first)
                self.dropped += len(first)
            else:
                self.chunks[0] = first[excess:]
                self.size -= excess
                self.dropped += excess

    def text(self) -> str:
        return self.render(b"".join(self.chunks), self.dropped)

    @staticmethod
    def render(data: bytes, dropped: int) -> str:
        """The tail as text: ``data`` (its bytes) after ``dropped`` earlier bytes."""
        body = data.decode("utf-8", errors="replace")
        if dropped:
            return f"[... {dropped} earlier bytes dropped ...]\n{body}"
        return body


def _above_stdio(fd: int) -> int:
    """``fd``, or a close-on-exec copy of it above the standard descriptors: a node started
    with stdin or stdout closed gets pipes numbered 0-2, and the child's standard
    descriptors must not be set up from each other (every shell run failed so, when
    the gate was a descriptor of its own)."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), or None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:  # an older kernel
        return None
    return fd


@dataclass(slots=True, eq=False)
class Spawned:
    """A bash started for one run, waiting at its gate: it runs nothing until the gate
    opens (:func:`run_shell`), and exits the moment the gate's write end closes
    (:func:`discard`, or this process's death)."""

    proc: subprocess.Popen[bytes]
    go_write: int
    #: The line that opens its gate.
    key: str


def spawn_shell(command: str, env: Mapping[str, str]) -> Spawned:
    """Start bash for ``command`` in a new session, stopped at its gate (raises OSError)."""
    go_read, go_write = os.pipe()
    go_read = _above_stdio(go_read)
    key = secrets.token_hex(8)
    try:
        # subprocess, not os.posix_spawn: that one keeps the GIL while the child execs,
        # and with 16 runs starting at once the node's other threads waited (a burst of
        # shell runs started later, though each spawn cost the node less CPU).
        proc = subprocess.Popen(
            ["bash", "-c", _gated(command, key)],
            stdin=go_read,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=job_environment(env),
            close_fds=True,
        )
    except OSError:
        os.close(go_write)
        raise
    finally:
        os.close(go_read)
    return Spawned(proc=proc, go_write=go_write, key=key)


def discard(spawned: Spawned) -> int:
    """End a bash whose gate never opened (its command never ran) and reap it: its exit
    status."""
    os.close(_gate_fd(spawned))  # it reads end-of-file and exits 125
    _signal_group(spawned.proc.pid, signal.SIGKILL)  # unreaped, the id is still its own
    assert spawned.proc.stdout is not None
    spawned.proc.stdout.close()
    return spawned.proc.wait()


def start_shell(
    command: str,
    *,
    env: Mapping[str, str],
    timeout_s: float | None,
    kill_grace_s: float,
    output_limit: int,
    handle: RunHandle,
    spawned: Spawned | None = None,
) -> ShellRun | Outcome:
    """Start ``command`` as ``bash -c`` in its own process group, behind the gate, and
    open the gate: the run to watch to its end, or the outcome of a bash that could not
    start. ``spawned``: the bash started for this run ahead of its instant, if any (one
    that has exited in the meantime is discarded, and a new one started)."""
    if spawned is not None and _exited(spawned.proc.pid):
        code = discard(spawned)
        log.warning("the bash started ahead of this run exited at its gate (status %d), "
                    "its command unrun: the run starts a new one", code,
                    extra={"action": "gate_exited"})
        spawned = None
    if spawned is None:
        try:
            spawned = spawn_shell(command, env)
        except OSError as error:
            return Outcome(status=RunStatus.FAILED, error=f"could not start bash: {error}")
    _open_gate(spawned, handle)
    return ShellRun(spawned.proc, handle, timeout_s=timeout_s, kill_grace_s=kill_grace_s,
                    output_limit=output_limit)


def run_shell(
    command: str,
    *,
    env: Mapping[str, str],
    timeout_s: float | None,
    kill_grace_s: float,
    output_limit: int,
    handle: RunHandle,
    spawned: Spawned | None = None,
) -> Outcome:
    """Run ``command`` (see :func:`start_shell`) and watch it to its end, or its timeout,
    or a kill, on this thread."""
    run = start_shell(command, env=env, timeout_s=timeout_s, kill_grace_s=kill_grace_s,
                      output_limit=output_limit, handle=handle, spawned=spawned)
    if isinstance(run, Outcome):
        return run
    try:
        while True:
            poller = select.poll()
            for fd in run.fds():
                poller.register(fd, select.POLLIN)
            wait = run.check(time.monotonic())
            if run.progress(time.monotonic()):
                return run.end()
            timeout = run.POLL_S if wait is None else min(run.POLL_S, wait)
            for fd, _ in poller.poll(max(0, int(timeout * 1000))):
                run.ready(fd)
            if run.progress(time.monotonic()):
                return run.end()
    except BaseException:
        run.abort()
        raise


_gates = threading.Lock()

#: The byte bash writes to its output once past its gate (see :func:`_gated`).
BEGAN = b"\x01"


def _gate_fd(spawned: Spawned) -> int:
    """The gate's write end, once: the caller closes it (a closed descriptor's number
    may be another's by now, and a line written to it could open another bash's gate)."""
    with _gates:
        fd, spawned.go_write = spawned.go_write, -1
    if fd < 0:
        raise RuntimeError(f"the gate of bash {spawned.proc.pid} was used twice")
    return fd


def _open_gate(spawned: Spawned, handle: RunHandle) -> None:
    """Make the new group known (to the handle, then the guard), then let bash run the
    command, unless a forced kill came first."""
    pid, go_write = spawned.proc.pid, _gate_fd(spawned)
    with handle._lock:
        handle.pgid = pid
        force = handle.force
    if handle.on_group is not None:
        handle.on_group(pid, True)  # the guard knows the group before it runs
    if force:
        _signal_group(pid, signal.SIGKILL)
    else:
        try:
            os.write(go_write, spawned.key.encode() + b"\n")
        except OSError:
            pass  # bash is gone already
    os.close(go_write)


class ShellRun:
    """A bash past its gate, watched to its end by whoever polls its descriptors
    (:meth:`fds`): :func:`run_shell` for one run on its own thread, the node's shell
    watch for all of its runs on one thread. It collects the output, signals the group
    on a kill or at the timeout (SIGTERM, SIGKILL after the grace period), and once bash
    has exited kills what it left behind in its group and drains the pipe (for at most
    ``DRAIN_S``: a process that left the group may hold it open). bash is reaped only
    after the handle has let go of its group id (:meth:`end`)."""

    #: Most seconds between two looks at a run without an exit watch (Linux < 5.3),
    #: and at a kill asked for without a wake-up.
    POLL_S = 0.05
    #: Most seconds the output pipe is read after bash has exited.
    DRAIN_S = 0.2

    def __init__(self, proc: subprocess.Popen[bytes], handle: RunHandle, *,
                 timeout_s: float | None, kill_grace_s: float, output_limit: int) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        self.handle = handle
        self.timeout_s = timeout_s
        self.kill_grace_s = kill_grace_s
        self.tail = _Tail(output_limit)
        #: Bytes of output received so far (the tail keeps the last ``output_limit``);
        #: both guarded by ``_output_lock`` for readers on other threads
        #: (:meth:`output_since`).
        self.received = 0
        self._output_lock = threading.Lock()
        self.out_fd: int | None = proc.stdout.fileno()
        # bash's exit is watched through a pidfd beside the pipe: the run ends the moment
        # bash does (a pipe closed a moment before bash is reapable cost a 50 ms nap).
        self.exit_fd = _exit_watch(self.pid)
        self.exit_seen = False
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.terminated_at: float | None = None
        self.why: RunStatus | None = None
        self.reason: str | None = None
        #: When bash was found gone (monotonic); the pipe is drained from then on.
        self.exited_at: float | None = None
        #: bash passed its gate (its first output byte, ``BEGAN``, came): the command began.
        self.began = False

    def fds(self) -> list[int]:
        """The descriptors to poll for reading now."""
        found = [] if self.out_fd is None else [self.out_fd]
        if self.exit_fd is not None:
            found.append(self.exit_fd)
        return found

    def ready(self, fd: int) -> None:
        """``fd`` (one of :meth:`fds`) polled readable."""
        if fd == self.out_fd:
            data = os.read(fd, 65536)
            if not data:
                self.out_fd = None  # end of file: bash and its group are done with it
                return
            if not self.began:
                self.began = True
                data = data.removeprefix(BEGAN)
            if data:
                with self._output_lock:
                    self.tail.add(data)
                    self.received += len(data)
        elif fd == self.exit_fd:
            self.exit_seen = True

    def output_since(self, seen: int) -> tuple[int, str] | None:
        """The output tail so far, from any thread: (bytes received, the tail as text)
        when more than ``seen`` bytes have been received, else None. The bytes are
        copied under the lock and decoded outside it (the watching thread never waits
        for a decode)."""
        with self._output_lock:
            if self.received == seen:
                return None
            received, data, dropped = self.received, b"".join(self.tail.chunks), self.tail.dropped
        return received, _Tail.render(data, dropped)

    def check(self, now: float) -> float | None:
        """Act on a kill asked for and on the timeout; seconds until this run next
        needs a look (None: only when a descriptor is ready, or a kill is asked for)."""
        handle = self.handle
        if self.exited_at is not None:
            return max(0.0, self.exited_at + self.DRAIN_S - now)
        if self.why is None and handle.kill_requested:
            self.why, self.reason = RunStatus.KILLED, handle.reason
        elif self.why is None and self.deadline is not None and now >= self.deadline:
            self.why, self.reason = RunStatus.TIMED_OUT, f"timed out after {self.timeout_s:g}s"
        if self.why is not None and self.terminated_at is None:
            self.terminated_at = now
            _signal_group(self.pid, signal.SIGKILL if handle.force else signal.SIGTERM)
        if handle.force or (self.terminated_at is not None
                            and now - self.terminated_at >= self.kill_grace_s):
            _signal_group(self.pid, signal.SIGKILL)
        waits = [self.POLL_S] if self.exit_fd is None else []
        if self.terminated_at is not None:
            waits.append(max(0.0, self.terminated_at + self.kill_grace_s - now) or self.POLL_S)
        elif self.deadline is not None:
            waits.append(max(0.0, self.deadline - now))
        return min(waits) if waits else None

    def progress(self, now: float) -> bool:
        """True once the run is over (bash gone, its pipe drained): call :meth:`end`."""
        if self.exited_at is None:
            if not (self.exit_fd is None or self.exit_seen or self.out_fd is None):
                return False
            if not _exited(self.pid):
                return False
            self.exited_at = now
            if self.exit_fd is not None:
                os.close(self.exit_fd)
                self.exit_fd = None
            if self.why is None and self.handle.kill_requested:  # a forced kill ended it at once
                self.why, self.reason = RunStatus.KILLED, self.handle.reason
            # bash is gone: kill what it left behind in its group, then drain the pipe.
            _signal_group(self.pid, signal.SIGKILL)
        return self.out_fd is None or now - self.exited_at >= self.DRAIN_S

    def end(self) -> Outcome:
        """Let go of the group, reap bash: the run's outcome."""
        self._let_go()
        code = self.proc.returncode
        output = self.tail.text()
        if not self.began:  # bash never passed its gate: the command did not run
            if self.why is not None:
                return Outcome(status=self.why, exit_code=code, output=output, began=False,
                               error=f"{self.reason} (before it started)")
            return Outcome(status=RunStatus.FAILED, exit_code=code, output=output, began=False,
                           error=f"bash ended at its gate (status {code}), its command unrun")
        if self.why is not None:
            return Outcome(status=self.why, exit_code=code, output=output, error=self.reason)
        if code == 0:
            return Outcome(status=RunStatus.SUCCEEDED, exit_code=0, output=output)
        failure = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return Outcome(status=RunStatus.FAILED, exit_code=code, output=output, error=failure)

    def abort(self) -> None:
        """An error got the watcher here: kill the group (bash too), let go, reap."""
        if self.exit_fd is not None:
            os.close(self.exit_fd)
            self.exit_fd = None
        self._let_go()

    def _let_go(self) -> None:
        """bash, not reaped yet, still holds the group id: kill the group (bash too, if an
        error got us here), let go of the id, and only then reap bash."""
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.out_fd = None
        _signal_group(self.pid, signal.SIGKILL)
        with self.handle._lock:
            self.handle.pgid = None
        if self.handle.on_group is not None:
            self.handle.on_group(self.pid, False)
        self.proc.wait()


def resolve(target: str) -> Callable[..., Any]:
    module_name, _, attr_path = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj  # type: ignore[no-any-return]


def run_callable(
    target: str,
    kwargs: Mapping[str, Any],
    *,
    context: RunContext,
    output_limit: int,
) -> Outcome:
    """Call ``target(**kwargs)`` on this thread; an import or call error is a failed
    run, never an exception. Timeouts and kills are the caller's (see the module doc)."""
    token = _current.set(context)
    try:
        value = resolve(target)(**kwargs)
        text = "" if value is None else repr(value)
        return Outcome(status=RunStatus.SUCCEEDED, output=text[-output_limit:])
    except BaseException as error:  # noqa: BLE001 - a job's error is a failed run
        trace = traceback.format_exc()
        return Outcome(
            status=RunStatus.FAILED,
            output=trace[-output_limit:],
            error=f"{type(error).__name__}: {error}"[:2000],
        )
    finally:
        _current.reset(token)
