"""The node's worker threads: where runs execute."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("quartzlite.node")


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
            except BaseException:
                log.exception("worker task failed")
            with self._lock:
                self._idle += 1


#: Upper bounds (seconds) of the fire-lateness histogram's buckets.
LATENESS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
