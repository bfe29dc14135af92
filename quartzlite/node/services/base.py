"""Every background thread of a node has this one shape (db-scheduler's
``RunUntilShutdown`` with a ``Waiter``): a named loop around ``run_once()`` that waits
on an event between rounds, wakes early on ``wake()`` or at an instant set with
``schedule()``, honours ``stop()`` within the wait, and reports a crash of a critical
service to the node."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from quartzlite.errors import TransientStoreError

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger(__name__)


class Service:
    """Subclasses implement :meth:`run_once`, returning seconds until the next round
    (None: the default interval)."""

    name = "service"
    critical = True

    def __init__(self, interval_s: float, on_crash: Callable[[Service, BaseException], None]) -> None:
        self.interval_s = interval_s
        self.on_crash = on_crash
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._due = float("inf")  # monotonic instant of the next round asked for
        self._thread: threading.Thread | None = None

    def run_once(self) -> float | None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self.schedule(0.0)

    def schedule(self, delay_s: float) -> None:
        """Run a round in ``delay_s`` seconds (or sooner, if something else asks)."""
        at = time.monotonic() + max(0.0, delay_s)
        if at >= self._due:
            # Due sooner already (read without the lock: a round about to run reads
            # what the caller did before asking).
            return
        with self._lock:
            if at >= self._due:
                return
            self._due = at
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.run_once()
            except TransientStoreError as error:
                # The database is away: try again soon. Fencing, not this loop, decides
                # when being away has lasted too long.
                log.warning(
                    "%s: %s", self.name, error.message,
                    extra={"action": "service_db_error", "service": self.name},
                )
                delay = min(self.interval_s, 0.5)
            except BaseException as error:  # noqa: BLE001 - reported, never swallowed
                if self._stop.is_set():
                    return
                self.on_crash(self, error)
                if self.critical:
                    return
                delay = self.interval_s
            if self._stop.is_set():
                return
            self.schedule(self.interval_s if delay is None else delay)
            self._sleep()

    def _sleep(self) -> None:
        """Wait until the earliest round asked for, or a stop."""
        while not self._stop.is_set():
            with self._lock:
                left = self._due - time.monotonic()
                if left <= 0:
                    self._due = float("inf")
                    self._wake.clear()
                    return
            self._wake.wait(left)
            self._wake.clear()


class NodeService(Service):
    def __init__(self, node: Node, interval_s: float) -> None:
        super().__init__(interval_s, node.on_crash)
        self.node = node
