"""The live output service: while shell runs run, their output tails go to their run rows,
so that the API shows what a run has printed so far."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from quartzlite.errors import TransientStoreError
from quartzlite.node.ownership import Execution
from quartzlite.node.services.base import NodeService
from quartzlite.storage.node import LiveTail

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class LiveOutput(NodeService):
    """Every ``live_output_interval_s``: the output tails (at most ``output_limit_bytes``,
    as the final output) of the running shell runs that printed something since the
    last flush, written in one statement for all of them (guarded by the run's status
    and fire id: a finished run's final output is never overwritten). Nothing is sent
    when no run printed anything, and the service sleeps while no shell run runs. It
    holds neither the node's mutex nor a lock row, and reads each run's output through
    :meth:`~quartzlite.executors.ShellRun.output_since` (a copy under a short lock). A
    failed flush is not retried: the next one writes the output again. Stops at the
    fence. Not critical: without it, output appears when the run ends."""

    name = "output"
    critical = False
    #: Seconds between two looks while no shell run runs (``track`` wakes it).
    IDLE_S = 3600.0

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.live_output_interval_s)
        self._lock = threading.Lock()
        #: Running shell runs -> bytes of their output received when last written.
        self._runs: dict[Execution, int] = {}
        #: Flushes that wrote something, and the run tails they wrote (for metrics, tests).
        self.flushes = 0
        self.tails_written = 0

    def track(self, execution: Execution) -> None:
        """A shell run is past its gate (``execution.shell`` is set): write its output
        while it runs. Dropped once the run is done."""
        with self._lock:
            first = not self._runs
            self._runs[execution] = 0
        if first:
            self.schedule(self.interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return self.IDLE_S
        with self._lock:
            for ended in [e for e in self._runs if e.done.is_set()]:
                del self._runs[ended]
            running = list(self._runs.items())
        if not running:
            return self.IDLE_S
        tails: list[LiveTail] = []
        seen: list[tuple[Execution, int]] = []
        for execution, written in running:
            shell = execution.shell
            found = None if shell is None else shell.output_since(written)
            if found is None:
                continue
            received, text = found
            p = execution.fired.prepared
            tails.append(LiveTail(run_id=execution.fired.run_id, fire_id=p.fire_id, output=text))
            seen.append((execution, received))
        if not tails:
            return None
        try:
            node.store.write_output(tails)
        except TransientStoreError as error:
            log.debug("live output not written (%s): the next flush tries again", error.message,
                      extra={"action": "live_output_failed"})
            return None
        self.flushes += 1
        self.tails_written += len(tails)
        with self._lock:
            for execution, received in seen:
                if execution in self._runs:
                    self._runs[execution] = received
        return None
