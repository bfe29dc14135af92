"""The node's end of its guard process (:mod:`quartzlite.node.guard`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time


class GuardLink:
    """The node's end of the pipes to its guard process (see :mod:`quartzlite.node.guard`).

    Writes never block: a guard that stops reading (frozen, dead) fills the pipe, and a
    node must not hang on it; :meth:`problem` reports it instead, and the node fences.
    """

    #: A closed link neither reads nor writes (its descriptors' numbers may be reused).
    CLOSED = "the link to the guard is closed"

    #: Pipe buffer asked for, so that a burst of run starts never fills it.
    PIPE_BYTES = 1 << 20

    def __init__(self, fence_after_s: float) -> None:
        self._lock = threading.Lock()
        self.fence_after_s = fence_after_s
        self.proc = subprocess.Popen(
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
        self._runs_lock = threading.Lock()

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
        misses its deadline, so that no Python run outlives the session into a rerun.
        A worker running Python runs one after another tells this once for all of them
        (see ``Node._work``)."""
        with self._runs_lock:  # not send()'s lock: that one is held across a write
            before = self._python_runs
            self._python_runs += 1 if started else -1
            after = self._python_runs
            # Sent under this lock, so a hold and a release racing arrive in order.
            if before == 0 and after > 0:
                self.send(f"hold {os.getpid()}")
            elif before > 0 and after == 0:
                self.send("release")

    def problem(self) -> str | None:
        """Why this node is no longer guarded, if it is not: the guard killed our
        runs (we missed the deadline), died, stopped reading, or stopped answering."""
        with self._lock:
            if self._broken == self.CLOSED:
                return None  # the node closed it: it is going, not unguarded
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
            # Nothing is written from now on: a closed descriptor's number may soon be
            # another pipe's (a bash's gate), and a line must never reach it.
            self._broken = self.CLOSED
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
