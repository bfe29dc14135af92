"""The heartbeat: renews the session by the database clock, in one statement that also
returns that clock (our offset); it locks nothing but its own row. A node whose beats
fail for ``fence_after_s`` fences (see the watchdog)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from quartzlite.errors import QuartzliteError
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Heartbeat(NodeService):
    name = "heartbeat"

    #: After a failed heartbeat, try again this soon (a short outage ends unnoticed).
    RETRY_S = 0.25

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.heartbeat_interval_s)

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return None
        sent_mono = node.clock.monotonic()
        silent = sent_mono - node.last_beat_mono
        if silent > node.config.fence_after_s:
            # Frozen past the deadline (the watchdog may not have run yet): the guard
            # has killed our runs; a beat now would hide that.
            node.fence(f"no heartbeat reached the database for {silent:.1f}s "
                       f"(fence_after_s={node.config.fence_after_s:g})")
            return None
        sent_real = time.monotonic()
        try:
            beat = node.hb_store.heartbeat(node.session_id, node.offset_s * 1000, node.clock.now)
        except QuartzliteError as error:
            node.healthy_since = None
            log.warning("heartbeat failed: %s", error.message, extra={"action": "heartbeat_failed"})
            return self.RETRY_S
        if not beat.alive:
            node.fence("our session is gone: peers expired it")
            return None
        if beat.db_now is not None:
            node.offset_s = (beat.db_now - beat.local_mid).total_seconds()
        # Count from when we sent it: the database stamped it no earlier than that.
        node.last_beat_mono = sent_mono
        if node.guard is not None:
            node.guard.beat(sent_real)
        if node.healthy_since is None:
            node.healthy_since = sent_mono
        return max(0.0, self.interval_s - (node.clock.monotonic() - sent_mono))
