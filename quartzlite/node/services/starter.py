"""The starter: releases fired runs at their instant (after one start check), highest
priority first; each then takes one of the node's places as soon as one is free."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from quartzlite.enums import RunStatus
from quartzlite.errors import TransientStoreError
from quartzlite.models import Outcome
from quartzlite.node.ownership import Execution
from quartzlite.node.services.base import NodeService

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node")


class Starter(NodeService):
    """Releases fired runs to worker threads at their planned instant, highest priority
    first. A run fired ahead of its instant is released only after a start check at
    the instant (one lock-free read for all runs due together): by the database clock
    the instant has come, and the job was not paused, deleted or asked to die in the
    meantime; those never start (recorded ``cancelled`` or ``killed``, with no
    ``started_at``). One thread releasing runs through the pool's queue wakes one
    worker per run, where a thousand workers each timing their own wait measured ~3x
    slower (they all wake at once and fight for the GIL)."""

    name = "starter"

    #: After a failed start check, check again this soon.
    RETRY_S = 0.25

    #: Why a run fired ahead did not start -> its outcome.
    STOPPED: dict[str, tuple[RunStatus, str]] = {
        "kill": (RunStatus.KILLED, "killed on request (before it started)"),
        "paused": (RunStatus.CANCELLED, "the job was paused before the run's instant"),
        "deleted": (RunStatus.CANCELLED, "the job was deleted before the run's instant"),
        "moved": (RunStatus.CANCELLED, "the job is no longer this node's fire"),
    }

    def __init__(self, node: Node) -> None:
        super().__init__(node, 60.0)
        self._heap_lock = threading.Lock()
        self._waiting: list[tuple[datetime, int, int, Execution]] = []
        self._order = itertools.count()

    def add(self, executions: Sequence[Execution]) -> None:
        if not executions:
            return
        with self._heap_lock:
            for e in executions:
                self._push(e)
        self.wake()

    def _push(self, e: Execution) -> None:
        p = e.fired.prepared
        heapq.heappush(self._waiting, (p.planned_at, -p.spec.priority, next(self._order), e))

    def run_once(self) -> float | None:
        node = self.node
        if node.fenced.is_set():
            return None
        now = node.db_now()
        due: list[Execution] = []
        with self._heap_lock:
            while self._waiting and self._waiting[0][0] <= now:
                due.append(heapq.heappop(self._waiting)[3])
        release: list[Execution] = []
        ahead: list[Execution] = []
        for e in due:
            if e.fired.prepared.planned_at <= e.fired.fired_at:
                # Fired at or after its instant: the fire transaction was its check.
                e.started_at = e.fired.fired_at
                release.append(e)
            elif e.handle.kill_requested:
                self._not_started(e, "kill")
            else:
                ahead.append(e)
        held = 0.0
        if ahead:
            checked, held = self._check(ahead)
            release.extend(checked)
        if node.fenced.is_set():
            return None
        # Also hands waiting runs to more workers if it is time, and if not, asks this
        # thread to look again in a moment (see Node._dispatch).
        node.release(release)
        with self._heap_lock:
            following = self._waiting[0][0] if self._waiting else None
        if following is None:
            return None
        return max(held, (following - node.db_now()).total_seconds())

    def _check(self, ahead: list[Execution]) -> tuple[list[Execution], float]:
        """The start check: the runs to release now, and how long until the database
        clock reaches the instant of those put back (it lagged our estimate)."""
        node = self.node
        try:
            check = node.store.start_check(node.session_id, [e.fired.prepared for e in ahead])
        except TransientStoreError as error:
            # Never start unchecked: the database may be gone for good, and then a
            # peer will run these once this node has fenced. Try again shortly; they
            # start (late) when it answers, or never if the node fences first.
            log.warning("start check failed (%s): %d run(s) wait for the database",
                        error.message, len(ahead), extra={"action": "start_check_failed"})
            with self._heap_lock:
                for e in ahead:
                    self._push(e)
            return [], self.RETRY_S
        release: list[Execution] = []
        held = 0.0
        for e in ahead:
            p = e.fired.prepared
            why = check.stopped.get(p.job_id)
            if why is not None:
                self._not_started(e, why)
            elif p.planned_at > check.db_now:  # our clock estimate ran ahead of the database's
                held = max(held, (p.planned_at - check.db_now).total_seconds())
                with self._heap_lock:
                    self._push(e)
            else:
                e.started_at = check.db_now
                release.append(e)
        return release, held

    def _not_started(self, execution: Execution, why: str) -> None:
        status, reason = self.STOPPED[why]
        if why == "kill" and execution.handle.reason:
            reason = f"{execution.handle.reason} (before it started)"
        execution.done.set()  # never submitted: no worker will set it
        log.info("run of job %s not started: %s", execution.fired.prepared.name, reason,
                 extra={"action": "not_started", "job": execution.fired.prepared.name})
        self.node.finish(execution, Outcome(status=status, error=reason))
