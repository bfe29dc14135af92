r"""Executors: run one attempt of a job and return exactly one :class:`Outcome`, on
every path. They never touch the database.

Shell commands run as ``bash -c`` in a new session (their own process group), so a
timeout, a kill or a fence signals the whole tree: SIGTERM to the group, SIGKILL after
the grace period. When the command ends, stragglers left in its group are killed too,
so no child outlives its run. The command starts only once its process group is known
to the node's guard (see :func:`_gated`). bash is reaped only after its handle has let go of the
group id, so a late kill can never signal a group id reused by another process. The
command sees the node's environment without its ``QUARTZLITE_*`` settings (see
:func:`job_environment`).

Python callables (``package.module:function``) run on the calling worker thread with
their JSON keyword arguments; :func:`current_run` tells them which run they are. A
thread cannot be killed: on timeout or kill the node records the run at once (whoever
:meth:`RunHandle.claim`\ s a run first records its one outcome) and sets the callable's
:attr:`RunContext.cancelled` event, so a cooperative callable stops.
"""

from __future__ import annotations

import contextvars
import fcntl
import importlib
import logging
import os
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
from quartzlite.models import Outcome

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


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "quartzlite_run", default=None
)


def current_run() -> RunContext | None:
    """The run a Python callable is executing for (None outside a run)."""
    return _current.get()


class RunHandle:
    """Control of one running attempt: kill it (gracefully or at once)."""

    def __init__(self, on_group: Callable[[int, bool], None] | None = None) -> None:
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


def _gated(command: str) -> str:
    """``command`` behind a gate: bash first reads a line from its standard input, a pipe
    the node writes once the process group is registered with its guard. A node that
    dies in between (SIGKILL right after the fork) closes the pipe, bash reads
    end-of-file and exits: no command runs unguarded, orphaned, beside the rerun a peer
    will start. The command then reads from /dev/null. (The gate is standard input, not
    a descriptor passed on: with one passed, Python 3.11 closes the child's other
    descriptors by listing /proc/self/fd, and reaping each such child cost the node
    ~0.3 ms of CPU invalidating those /proc entries.)"""
    return f"read -r _ || exit 125\nexec </dev/null\n{command}"


def job_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a shell job: this process's environment without any
    ``QUARTZLITE_*`` variable (the node's own settings: the database URL and its password,
    tokens), then ``extra`` (the run's ``QUARTZLITE_JOB``, ``QUARTZLITE_RUN_ID``, ...)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("QUARTZLITE_")}
    return {**inherited, **extra}


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
        body = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            return f"[... {self.dropped} earlier bytes dropped ...]\n{body}"
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


def run_shell(
    command: str,
    *,
    env: Mapping[str, str],
    timeout_s: float | None,
    kill_grace_s: float,
    output_limit: int,
    handle: RunHandle,
) -> Outcome:
    """Run ``command`` as ``bash -c`` in its own process group, behind the gate, and
    watch it to its end (or its timeout, or a kill); see the module doc."""
    go_read, go_write = os.pipe()
    go_read = _above_stdio(go_read)
    try:
        # subprocess, not os.posix_spawn: that one keeps the GIL while the child execs,
        # and with 16 runs starting at once the node's other threads waited (a burst of
        # shell runs started later, though each spawn cost the node less CPU).
        proc = subprocess.Popen(
            ["bash", "-c", _gated(command)],
            stdin=go_read,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=job_environment(env),
            close_fds=True,
        )
    except OSError as error:
        os.close(go_write)
        return Outcome(status=RunStatus.FAILED, error=f"could not start bash: {error}")
    finally:
        os.close(go_read)
    _open_gate(proc.pid, go_write, handle)
    tail = _Tail(output_limit)
    try:
        why, reason = _watch(proc, handle, tail, timeout_s, kill_grace_s)
    finally:
        _let_go(proc, handle)
    code = proc.returncode
    output = tail.text()
    if why is not None:
        return Outcome(status=why, exit_code=code, output=output, error=reason)
    if code == 0:
        return Outcome(status=RunStatus.SUCCEEDED, exit_code=0, output=output)
    failure = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return Outcome(status=RunStatus.FAILED, exit_code=code, output=output, error=failure)


def _open_gate(pid: int, go_write: int, handle: RunHandle) -> None:
    """Make the new group known (to the handle, then the guard), then let bash run the
    command, unless a forced kill came first."""
    with handle._lock:
        handle.pgid = pid
        force = handle.force
    if handle.on_group is not None:
        handle.on_group(pid, True)  # the guard knows the group before it runs
    if force:
        _signal_group(pid, signal.SIGKILL)
    else:
        try:
            os.write(go_write, b"go\n")
        except OSError:
            pass  # bash is gone already
    os.close(go_write)


def _watch(proc: subprocess.Popen[bytes], handle: RunHandle, tail: _Tail,
           timeout_s: float | None, kill_grace_s: float) -> tuple[RunStatus | None, str | None]:
    """Collect the output until bash has exited, signalling its group on a kill or at
    the timeout (SIGTERM, SIGKILL after the grace period); then kill what it left behind
    and drain the pipe. Returns why it was stopped (None: it ended by itself)."""
    pid = proc.pid
    assert proc.stdout is not None
    out_r = proc.stdout.fileno()
    # poll, not select: a busy node has descriptors above select's FD_SETSIZE (1024).
    # bash's exit is watched through a pidfd in the same poll: the run ends the moment
    # bash does (a pipe closed a moment before bash is reapable cost a 50 ms nap).
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    exit_fd = _exit_watch(pid)
    if exit_fd is not None:
        poller.register(exit_fd, select.POLLIN)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    terminated_at: float | None = None
    why: RunStatus | None = None
    reason: str | None = None
    open_pipe = True
    try:
        while True:
            if why is None and handle.kill_requested:
                why, reason = RunStatus.KILLED, handle.reason
            elif why is None and deadline is not None and time.monotonic() >= deadline:
                why, reason = RunStatus.TIMED_OUT, f"timed out after {timeout_s:g}s"
            if why is not None and terminated_at is None:
                terminated_at = time.monotonic()
                _signal_group(pid, signal.SIGKILL if handle.force else signal.SIGTERM)
            if terminated_at is not None and time.monotonic() - terminated_at >= kill_grace_s:
                _signal_group(pid, signal.SIGKILL)
            if handle.force:
                _signal_group(pid, signal.SIGKILL)
            ready = {fd for fd, _ in poller.poll(50)}
            if out_r in ready:
                data = os.read(out_r, 65536)
                if data:
                    tail.add(data)
                else:
                    open_pipe = False
                    poller.unregister(out_r)
            if (exit_fd is None or exit_fd in ready or not open_pipe) and _exited(pid):
                break
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    if why is None and handle.kill_requested:  # a forced kill that ended bash at once
        why, reason = RunStatus.KILLED, handle.reason
    # bash is gone: kill what it left behind in its group, then drain the pipe.
    _signal_group(pid, signal.SIGKILL)
    drain = select.poll()
    drain.register(out_r, select.POLLIN)
    while open_pipe:
        if not drain.poll(200):
            break
        data = os.read(out_r, 65536)
        if not data:
            break
        tail.add(data)
    return why, reason


def _let_go(proc: subprocess.Popen[bytes], handle: RunHandle) -> None:
    """bash, not reaped yet, still holds the group id: kill the group (bash too, if an
    error got us here), let go of the id, and only then reap bash."""
    assert proc.stdout is not None
    proc.stdout.close()
    pid = proc.pid
    _signal_group(pid, signal.SIGKILL)
    with handle._lock:
        handle.pgid = None
    if handle.on_group is not None:
        handle.on_group(pid, False)
    proc.wait()


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
