"""The shell watch: one thread that watches every running shell run of the node to its
end, with one poll over all their pipes and exit watches."""

from __future__ import annotations

import functools
import logging
import math
import os
import select
import threading
import time
from collections.abc import Callable

from quartzlite.enums import RunStatus
from quartzlite.executors import ShellRun
from quartzlite.models import Outcome

log = logging.getLogger("quartzlite.node")

#: Told a watched run's outcome, on the watch's thread.
Ended = Callable[[Outcome], None]


class ShellWatch:
    """Watches shell runs past their gate (see :class:`~quartzlite.executors.ShellRun`)
    and hands each one's outcome to its callback. A worker thread starts a shell run
    (opens its gate) and goes on to the next ready run at once; bash then costs no
    thread: a burst of short shell runs ends on this one thread in batches, where a
    thread per run cost a wake-up and a turn at the GIL each (and 16 threads switching
    took as much of the node's CPU as the runs themselves).

    Kills and timeouts act as in :func:`~quartzlite.executors.run_shell`: a kill asked
    for through a run's handle wakes this thread (``kicked``), a timeout or the end of
    a grace period comes as the poll's timeout. It runs until the node disposes of it:
    runs cut short by a fence or a stop end through here too."""

    def __init__(self, on_crash: Callable[[BaseException], None]) -> None:
        self.on_crash = on_crash
        self._lock = threading.Lock()
        self._new: list[tuple[ShellRun, Ended]] = []
        self._kicked = False
        self._stop = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        #: Runs watched now, and the descriptors each is polled on.
        self._runs: dict[ShellRun, tuple[Ended, list[int]]] = {}
        self._by_fd: dict[int, ShellRun] = {}
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="shells", daemon=True)
        self._thread.start()

    @property
    def watching(self) -> int:
        return len(self._runs)

    def watch(self, run: ShellRun, ended: Ended) -> None:
        """Watch ``run`` (its gate is open) until its end; then ``ended(outcome)``."""
        with self._lock:
            self._new.append((run, ended))
        self._wake()

    def kick(self) -> None:
        """A kill was asked for: look at every run now."""
        with self._lock:
            self._kicked = True
        self._wake()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
        self._wake()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # a wake-up is pending already

    def _loop(self) -> None:
        try:
            self._watch()
        except BaseException as error:  # noqa: BLE001 - reported, never swallowed
            self.on_crash(error)

    def _watch(self) -> None:
        look_at_all = True
        #: The earliest instant (monotonic) a run asked to be looked at again; it may be
        #: early (that run's wait changed), never late.
        next_at: float | None = None
        while True:
            with self._lock:
                if self._stop:
                    return
                new, self._new = self._new, []
                look_at_all = look_at_all or self._kicked or bool(new)
                self._kicked = False
            for run, ended in new:
                self._runs[run] = (ended, [])
                self._sync(run)
            now = time.monotonic()
            if look_at_all or (next_at is not None and now >= next_at):
                next_at = None
                for run in list(self._runs):
                    next_at = _earliest(next_at, self._look(run, now))
            timeout = -1 if next_at is None else max(0, math.ceil((next_at - now) * 1000))
            events = self._poller.poll(timeout)
            now = time.monotonic()
            look_at_all = False
            touched: set[ShellRun] = set()
            for fd, _ in events:
                if fd == self._wake_r:
                    _drain(fd)
                    continue
                polled = self._by_fd.get(fd)
                if polled is not None:
                    self._step(polled, functools.partial(polled.ready, fd))
                    touched.add(polled)
            for run in touched:
                if run in self._runs:
                    next_at = _earliest(next_at, self._look(run, now))

    def _look(self, run: ShellRun, now: float) -> float | None:
        """Act on the run's kill or timeout, end it if it is over: the instant it next
        needs a look (None: when one of its descriptors is ready, or on a kill)."""
        at: float | None = None

        def act() -> None:
            nonlocal at
            wait = run.check(now)
            if run.progress(now):
                self._end(run, run.end())
            elif wait is not None:
                at = now + wait

        self._step(run, act)
        return at

    def _step(self, run: ShellRun, action: Callable[[], None]) -> None:
        """Do ``action`` for ``run``; an error (a bug) ends the run as failed, never the
        watch. Then poll it on the descriptors it has now."""
        try:
            action()
        except Exception as error:
            log.exception("watching a shell run failed")
            if run in self._runs:
                try:
                    run.abort()
                finally:
                    self._end(run, Outcome(status=RunStatus.FAILED,
                                           error=f"executor error: {error!r}"))
            return
        if run in self._runs:
            self._sync(run)

    def _sync(self, run: ShellRun) -> None:
        """Poll ``run`` on the descriptors it holds now (before any closed one's number
        can be polled again under another's name)."""
        ended, registered = self._runs[run]
        now = run.fds()
        for fd in registered:
            if fd not in now:
                self._poller.unregister(fd)
                del self._by_fd[fd]
        for fd in now:
            if fd not in registered:
                self._poller.register(fd, select.POLLIN)
                self._by_fd[fd] = run
        self._runs[run] = (ended, now)

    def _end(self, run: ShellRun, outcome: Outcome) -> None:
        ended, registered = self._runs.pop(run)
        for fd in registered:
            self._poller.unregister(fd)
            self._by_fd.pop(fd, None)
        try:
            ended(outcome)
        except Exception:
            log.exception("recording the end of a shell run failed")


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
