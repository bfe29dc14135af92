"""The watch: one lock-free SELECT per ``poll_interval_s`` that schedules the scanner at
the earliest due job, the expirer at the oldest peer's deadline, and the compensator
when what the database says we own and what memory holds disagree; and, when the job
lock's version moved (a management write: jobs or calendars), reads the exclusion
calendars again (one SELECT of a small table) and swaps them into the planner. It also
schedules the webhooks thread when a delivery is due or an event waits for its fan-out."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Watch(NodeService):
    name = "watch"

    def __init__(self, node: Node) -> None:
        super().__init__(node, node.config.poll_interval_s)
        #: The job lock's version the planner's calendars were read at (None: not yet).
        self.calendars_version: int | None = None

    def run_once(self) -> float | None:
        node = self.node
        if not node.working:
            return None
        seen = node.store.watch(node.session_id, node.tag_sets)
        config = node.config
        if seen.jobs_version != self.calendars_version:
            # Read after the version: calendars as new as it, or newer (read again then).
            node.planner.use_calendars(node.store.calendars())
            self.calendars_version = seen.jobs_version
        if seen.earliest_due is not None:
            node.scanner.schedule(
                (seen.earliest_due - seen.db_now).total_seconds() - config.look_ahead_s
            )
        if seen.orphaned_jobs:
            node.expirer.wake()
        elif seen.oldest_peer_heartbeat is not None:
            deadline = seen.oldest_peer_heartbeat + timedelta(seconds=config.session_timeout_s)
            node.expirer.schedule((deadline - seen.db_now).total_seconds() + 0.005)
        if seen.owned_jobs != node.owned.count():
            node.compensator.schedule(0.2)  # a transition may be committing right now
        if seen.webhooks_due is not None:
            node.webhooks.schedule((seen.webhooks_due - seen.db_now).total_seconds())
        return None
