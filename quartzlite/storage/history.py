"""Pruning history, the one pass that the node's janitor (past ``history_retention_s``)
and ``quartzlite history prune`` (:meth:`SchedulerClient.prune_history`) both run:
finished runs, deleted jobs and spent trigger requests (:meth:`JobStore.prune_history`),
then webhook events with their delivery log (:meth:`WebhookStore.prune`), all before
one cut-off."""

from __future__ import annotations

import threading
from dataclasses import replace

from quartzlite.models import Pruned
from quartzlite.storage.engine import Database
from quartzlite.storage.jobs import JobStore
from quartzlite.storage.webhooks import WebhookStore


def prune_history(
    db: Database, older_than_s: float, *, batch: int = JobStore.PRUNE_BATCH,
    stop: threading.Event | None = None,
) -> Pruned:
    """Delete the history older than ``older_than_s`` (database clock): runs, jobs and
    requests first, then events and their deliveries before the same cut-off. Each part
    deletes in autocommitted batches; ``stop`` (a node's fence) ends the pass before its
    next batch."""
    pruned = JobStore(db).prune_history(older_than_s, batch=batch, stop=stop)
    events, deliveries = WebhookStore(db).prune(pruned.before, batch=batch, stop=stop)
    return replace(pruned, events=events, deliveries=deliveries)
