"""The compensator: puts right what the database says this node owns but memory does
not know (after a commit of unknown outcome): adopts prepared jobs, recovers runs that
never started."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Compensator(NodeService):
    name = "compensator"

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.compensate_interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if not node.working:
            return None
        owned = node.store.owned(node.session_id)
        with node.owned.mutex:
            known = node.owned.known()
        if all((o.job_id, o.fire_id) in known for o in owned):
            return None
        with node.owned.mutex:
            if node.fenced.is_set() or self.stopping:
                return None
            adopted, recovered = node.store.compensate(
                session_id=node.session_id, in_memory=node.owned.known(), planner=node.planner
            )
            for p in adopted:
                node.owned.prepared[p.job_id] = p
        if adopted or recovered:
            log.warning(
                "compensation: adopted %d prepared job(s), recovered %d run(s) never started",
                len(adopted), recovered, extra={"action": "compensated"},
            )
            node.firer.wake()
        return None
