"""The watchdog: fences the node when no heartbeat succeeded for ``fence_after_s``, or
when its guard died, stopped reading or stopped answering."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Watchdog(NodeService):
    name = "watchdog"

    def __init__(self, node: Node) -> None:
        super().__init__(node, min(0.1, node.config.heartbeat_interval_s / 4))

    def run_once(self) -> float | None:
        node = self.node
        silent = node.clock.monotonic() - node.last_beat_mono
        if silent > node.config.fence_after_s and not node.fenced.is_set():
            node.fence(f"no heartbeat reached the database for {silent:.1f}s "
                       f"(fence_after_s={node.config.fence_after_s:g})")
        node.check_guard()  # a node without a live guard is not running
        return None
