"""The expirer: expires peers silent for ``session_timeout_s`` (database clock), handing
their prepared jobs back and recovering their runs; only after this node has itself
heartbeated for a whole timeout."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Expirer(NodeService):
    name = "expirer"

    def __init__(self, node: Node) -> None:
        # Scheduled by the watch at the oldest peer's deadline; the interval is a net.
        super().__init__(node, 60.0)

    def run_once(self) -> float | None:
        node = self.node
        if not node.working or node.healthy_since is None:
            return None
        # Judge peers only after heartbeating without a break for a whole timeout:
        # after an outage every node saw, nobody evicts anybody.
        judged = node.clock.monotonic() - node.healthy_since
        if judged < node.config.session_timeout_s:
            return node.config.session_timeout_s - judged
        dead = node.store.expire_sessions(
            session_id=node.session_id, session_timeout_s=node.config.session_timeout_s,
            planner=node.planner,
        )
        if dead:
            node.scanner.wake()
        node.watcher.wake()  # learn the next deadline
        return None
