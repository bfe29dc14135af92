"""The results thread: executing -> idle for the runs that ended, in batches, through a
pool of its own with short timeouts; retried until each outcome is recorded (outcomes
are facts, recorded even by a fenced node)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from quartzlite.errors import StoreError, TransientStoreError
from quartzlite.models import Finished
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Results(NodeService):
    name = "results"

    #: Results wait this long for company before they are recorded: runs that end
    #: together share one transaction (and one re-prepare), instead of one each.
    LINGER_S = 0.02
    #: While released runs wait for a place, starting them goes first: recording a
    #: result cost the node more CPU than starting a run (~130 us against ~85 us, before
    #: the definitions were cached), and both need the GIL. Results wait at most this
    #: long for that, then are recorded whatever waits. Outcomes are journaled already.
    YIELD_S = 0.5

    def __init__(self, node: Node) -> None:
        super().__init__(node, 1.0)
        #: Monotonic instant of the oldest result not taken into a batch yet.
        self._since: float | None = None
        #: Fenced, and the node's other connections ended on the server.
        self._cut_off = False

    @contextmanager
    def _owning(self) -> Iterator[None]:
        """The process mutex, around a results transaction and its change of what the
        node owns. Once fenced, not waited for: nothing else changes what a fenced node
        owns (the scanner, firer and compensator are stopped), and one of them stuck in
        a statement on a dead link, holding the mutex, must not hold the outcomes back."""
        mutex: threading.RLock = self.node.owned.mutex
        while not mutex.acquire(timeout=0.05):
            if self.node.fenced.is_set():
                yield
                return
        try:
            yield
        finally:
            mutex.release()

    def queued(self) -> None:
        """A result was queued. The thread is woken at once only for a full batch with
        no run waiting for a place; otherwise a round comes within ``LINGER_S`` (a
        wake per result cost a burst a thread switch per run, only to linger again)."""
        node = self.node
        if self._since is None:
            self._since = time.monotonic()
        if node.results.qsize() >= node.config.result_batch and not node.owned.waiting():
            self.wake()
        else:
            self.schedule(self.LINGER_S)

    def run_once(self) -> float | None:
        node = self.node
        if node.results.empty():
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
        waited = now - self._since
        if waited < self.LINGER_S and node.results.qsize() < node.config.result_batch:
            return self.LINGER_S - waited
        if waited < self.YIELD_S and node.owned.waiting() and not node.fenced.is_set():
            return min(self.LINGER_S, self.YIELD_S - waited)
        self._since = None
        return self._record()

    def drain(self) -> None:
        """Record whatever is left (the last step of a graceful stop)."""
        while not self.node.results.empty():
            try:
                self._record()
            except TransientStoreError as error:
                log.error("could not record results: %s", error.message)
                return

    def _record(self) -> float | None:
        node = self.node
        batch: list[Finished] = []
        while len(batch) < node.config.result_batch:
            try:
                batch.append(node.results.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return None
        if node.fenced.is_set() and not self._cut_off:
            try:
                node.end_other_connections()
                self._cut_off = True
            except StoreError as error:
                log.warning("fenced: could not end the node's other connections: %s",
                            error.message, extra={"action": "fence_connections_left"})
        with self._owning():
            try:
                done = node.results_store.complete(
                    session_id=node.session_id, finished=batch, planner=node.planner,
                    stop=node.results_stop,
                )
            except TransientStoreError:
                for item in batch:  # outcomes are facts: keep them until recorded
                    node.results.put(item)
                raise
            if node.journal is not None:
                node.journal.recorded([item.fired.run_id for item in batch])
            for item in batch:
                job_id = item.fired.prepared.job_id
                current = node.owned.executing.get(job_id)
                if current is not None and current.fired.run_id == item.fired.run_id:
                    del node.owned.executing[job_id]
                status = item.outcome.status.value
                node.stats.runs_by_status[status] = node.stats.runs_by_status.get(status, 0) + 1
        if node.scan_blocked:
            node.scanner.wake()
        if done.next_due is not None:
            # Not at once: results that follow within a moment join the same prepare.
            node.scanner.schedule(max(
                self.LINGER_S,
                (done.next_due - done.db_now).total_seconds() - node.config.look_ahead_s,
            ))
        return 0.0 if not node.results.empty() else None
