"""The firer: prepared -> executing, with the run rows, up to ``fire_ahead_s`` before
the instant, in one transaction per batch due together."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from quartzlite.node.ownership import Execution
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Firer(NodeService):
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
        snapshot = list(node.owned.prepared.values())
        if not snapshot:
            return None
        ahead = node.config.effective_fire_ahead_s
        earliest = min(p.planned_at for p in snapshot)
        wait = (earliest - node.db_now()).total_seconds() - ahead
        if wait > self.BATCH_WINDOW_S:
            return min(wait, self.interval_s)
        with node.owned.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            horizon = node.db_now() + timedelta(seconds=ahead + self.BATCH_WINDOW_S)
            due = sorted(
                (p for p in node.owned.prepared.values() if p.planned_at <= horizon),
                key=lambda p: (p.planned_at, -p.spec.priority),
            )[: self.MAX_BATCH]
            if not due:
                return 0.0
            began = time.monotonic()
            fired, lost = node.store.fire(
                session_id=node.session_id, items=due, planner=node.planner, ahead_s=ahead
            )
            log.debug(
                "fired %d of %d due (planned %s, %.1f ms ahead, tx %.1f ms)",
                len(fired), len(due), due[0].planned_at.isoformat(),
                (due[0].planned_at - node.db_now()).total_seconds() * 1000,
                (time.monotonic() - began) * 1000, extra={"action": "fired"},
            )
            for job_id in lost:
                node.owned.prepared.pop(job_id, None)
            started: list[Execution] = []
            for f in fired:
                node.owned.prepared.pop(f.prepared.job_id, None)
                if node.fenced.is_set():
                    continue
                started.append(node.start_execution(f))
                node.stats.fires += 1
            node.spawner.add(started)
            node.starter.add(started)
        if lost:
            node.scanner.wake()
        if len(fired) + len(lost) < len(due):
            return 0.001  # some were not due yet by the database clock
        return 0.0
