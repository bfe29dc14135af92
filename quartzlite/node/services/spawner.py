"""The spawner: starts bash for fired shell runs ahead of their instant, each stopped at
its gate, so that bash's start-up is off the run's start."""

from __future__ import annotations

import heapq
import itertools
import logging
import resource
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from quartzlite.executors import Spawned, discard, spawn_shell
from quartzlite.node.ownership import Execution
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


def standby_limit(warm_shells: int, capacity: int) -> int:
    """``warm_shells``, within the file descriptors this process may open: each bash at
    its gate holds two (its gate, its output), and the node keeps room for its running
    shell runs (their output, exit watch and gate: three each) and its own (connections,
    journal, guard)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return warm_shells
    return max(0, min(warm_shells, (soft - 3 * capacity - 256) // 2))


class Spawner(NodeService):
    """Starts bash for each fired shell run, earliest first, while fewer than ``limit``
    wait at their gate. A bash at its gate runs nothing: the gate opens at the run's
    start, after the guard knows its process group, exactly as for a bash started then
    (see :func:`quartzlite.executors.start_shell`). One never used (the run
    was killed, paused or cancelled before it started, or the node fenced) is
    discarded as its run ends; if the node dies, its gates close with it and every
    waiting bash exits without running its command. A run started before its bash is
    ready starts one of its own (a run fired late, or beyond the limit)."""

    name = "spawner"
    critical = False  # without it, every bash starts at its run's start

    def __init__(self, node: Node) -> None:
        super().__init__(node, 60.0)
        self.limit = standby_limit(node.config.warm_shells, node.config.capacity)
        self._lock = threading.Lock()
        self._waiting: list[tuple[datetime, int, int, Execution]] = []
        self._order = itertools.count()
        #: Bash processes started (or being started) and not taken or discarded yet.
        self._held = 0

    def add(self, executions: Sequence[Execution]) -> None:
        """Fired runs (called under the mutex after the fire commit)."""
        if self.limit == 0:
            return
        shell = [e for e in executions if e.context is None]
        if not shell:
            return
        with self._lock:
            for e in shell:
                p = e.fired.prepared
                heapq.heappush(self._waiting,
                               (p.planned_at, -p.spec.priority, next(self._order), e))
        self.wake()

    def run_once(self) -> float | None:
        node = self.node
        while not self.stopping and not node.fenced.is_set():
            with self._lock:
                if self._held >= self.limit or not self._waiting:
                    return None
                execution = heapq.heappop(self._waiting)[3]
                if execution.standby_closed:
                    continue
                self._held += 1
            command = execution.fired.prepared.spec.command
            assert command is not None
            try:
                spawned = spawn_shell(command, execution.environment())
            except OSError as error:
                with self._lock:
                    self._held -= 1
                log.warning("could not start bash ahead of a run (%s): it starts at the run",
                            error, extra={"action": "spawn_ahead_failed"})
                return 1.0
            with self._lock:
                late = execution.standby_closed
                if not late:
                    execution.standby = spawned
            if late:  # its run began (or ended) meanwhile, without it
                self._drop(spawned)
        return None

    def take(self, execution: Execution) -> Spawned | None:
        """The run's bash, if one waits at its gate; none will be attached from now on."""
        with self._lock:
            execution.standby_closed = True
            spawned, execution.standby = execution.standby, None
            more = spawned is not None and bool(self._waiting)
            if spawned is not None:
                self._held -= 1
        if more:
            self.wake()  # room for one more
        return spawned

    def give_up(self, execution: Execution) -> None:
        """The run ended without its bash (or never had one): end it, unused."""
        spawned = self.take(execution)
        if spawned is not None:
            discard(spawned)

    def _drop(self, spawned: Spawned) -> None:
        discard(spawned)
        with self._lock:
            self._held -= 1
