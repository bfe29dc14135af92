"""The janitor: prunes run history (and webhook events with their delivery log) past
``history_retention_s`` and the API's audit trail past ``audit_retention_s``, a minute
after start and then hourly."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quartzlite.node.services.base import NodeService
from quartzlite.storage.history import prune_history
from quartzlite.storage.jobs import JobStore

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Janitor(NodeService):
    """Prunes run history past ``history_retention_s`` and the audit trail past
    ``audit_retention_s``: a minute after start, then hourly (a few cheap statements
    when there is nothing to delete). Not critical: a failed pass
    is logged and tried again at the next."""

    name = "janitor"
    critical = False
    #: The first pass, a minute after start (not in a restart's busiest moments).
    FIRST_S = 60.0
    EVERY_S = 3600.0

    def __init__(self, node: Node) -> None:
        super().__init__(node, self.EVERY_S)
        self._first = True

    def run_once(self) -> float | None:
        node = self.node
        if self._first:
            self._first = False
            return self.FIRST_S
        if not node.working:
            return None
        store = JobStore(node.db)
        if node.config.history_retention_s:
            # The same pass as `quartzlite history prune`: webhook events and their
            # delivery log go with the run history.
            pruned = prune_history(node.db, node.config.history_retention_s, stop=node.fenced)
            if pruned.runs or pruned.jobs:
                log.info(
                    "pruned history before %s: %d run(s), %d deleted job(s)",
                    pruned.before.isoformat(), pruned.runs, pruned.jobs,
                    extra={"action": "history_pruned"},
                )
            if pruned.events or pruned.deliveries:
                log.info("pruned %d webhook event(s) and %d delivery(ies)",
                         pruned.events, pruned.deliveries,
                         extra={"action": "webhook_events_pruned"})
        if node.config.audit_retention_s:
            entries, before = store.prune_audit(node.config.audit_retention_s, stop=node.fenced)
            if entries:
                log.info(
                    "pruned the audit trail before %s: %d entries", before.isoformat(), entries,
                    extra={"action": "audit_pruned"},
                )
        return None
