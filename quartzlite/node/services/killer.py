"""The killer: while runs execute, every half second, kills the runs asked to die and
cuts Python runs past their timeout short (their threads are told to stop)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Killer(NodeService):
    name = "killer"

    def __init__(self, node: Node) -> None:
        super().__init__(node, min(0.5, node.config.heartbeat_interval_s))

    def run_once(self) -> float | None:
        node = self.node
        if node.owned.executing and not node.fenced.is_set():
            node.kill_requested_runs()
            node.police_python_runs()
        return None
