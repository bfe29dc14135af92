"""The scanner: idle -> prepared under the job lock for the jobs due within the
look-ahead that this node may run, in turns of at most 500, up to ``prefetch`` runs
not started yet, and nothing while released runs wait for a place."""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

from quartzlite.errors import Fenced
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Scanner(NodeService):
    name = "scanner"

    #: Most jobs prepared in one transaction. A large due set is taken in turns, so
    #: peers woken for the same instant share it (and the job lock is held briefly).
    BATCH = 500
    #: Pause between two full batches: a peer waiting for the job lock goes first.
    TURN_S = 0.005

    def __init__(self, node: Node) -> None:
        # Woken by the watch (a job is due within the look-ahead), by results (jobs
        # idle again, a place freed), by hand-backs; the interval is only a safety net.
        super().__init__(node, 60.0)
        #: Numbers this session's prepare batches (fire ids are session:batch:job).
        self._batches = itertools.count(1)

    def run_once(self) -> float | None:
        node = self.node
        if not node.working:
            return None
        # Prepare ahead up to the prefetch, and nothing while due runs wait for a place:
        # a node that cannot start what it holds leaves the rest to its peers.
        free = 0 if node.owned.waiting() else node.config.prefetch - node.owned.unstarted()
        node.scan_blocked = free <= 0
        if free <= 0:
            return None
        with node.owned.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            prefix = f"{node.session_id}:{next(self._batches)}:"
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
                node.owned.prepared[p.job_id] = p
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
