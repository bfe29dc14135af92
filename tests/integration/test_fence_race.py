"""A fenced node waits until the outcome of every run it killed is handed over, not
merely until the run's thread let go of it.

The worker marks a run done, then records its outcome. A fenced node that waited only
for "done" could exit in between (a loaded machine did, in the fault suite: the run of
a node whose guard died stayed ``running``). Here the worker is held between the two
steps, on purpose, while the node goes through its after-fence wait.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import UTC, datetime, timedelta

from quartzlite.client import SchedulerClient
from quartzlite.config import NodeConfig
from quartzlite.enums import RunStatus
from quartzlite.errors import StoreError
from quartzlite.executors import RunHandle
from quartzlite.models import Fired, JobSpec, Outcome, Prepared
from quartzlite.node.node import Node
from quartzlite.node.ownership import Execution
from quartzlite.storage.engine import Tx
from tests.cluster.harness import wait_until

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_fenced_node_waits_for_the_outcome_not_just_the_thread(
    client: SchedulerClient, db_url: str
) -> None:
    node = Node(NodeConfig(database_url=db_url, heartbeat_interval_s=0.5, fence_after_s=1.5,
                           session_timeout_s=3.0, poll_interval_s=1.0, kill_grace_s=1.0))
    spec = JobSpec(name="j", schedule="@every 1h", command="sleep 60")
    prepared = Prepared(job_id=1, name="j", fire_id="s:1:1", planned_at=NOW, slot_at=NOW,
                        attempt=1, spec=spec)
    execution = Execution(fired=Fired(prepared=prepared, run_id=1, fired_at=NOW),
                          handle=RunHandle(), started_at=NOW, submitted=True)
    node.owned.executing[1] = execution
    release = threading.Event()

    def worker() -> None:
        # What a worker does when the fence killed its shell run: done, then record.
        execution.done.set()
        release.wait(30)
        node.finish(execution, Outcome(status=RunStatus.FAILED, exit_code=-9), by_worker=True)

    try:
        node.fence("a test")
        thread = threading.Thread(target=worker)
        thread.start()
        threading.Timer(0.5, release.set).start()  # the worker records half a second late
        node._after_fence()
        # The results thread never ran here (the node was not started): when the wait
        # ends, the outcome must be queued already, not still on its way.
        handed_over = execution.recorded.is_set() and not node.results.empty()
        thread.join(30)
        assert handed_over, "the fenced node stopped waiting before the outcome was queued"
        queued = node.results.get_nowait()
        assert queued.fired.run_id == 1
        assert queued.outcome.status is RunStatus.ABANDONED, "a fence's kill is no failure"
        assert execution.recorded.is_set()
    finally:
        release.set()
        node.dispose_pools()


def test_a_fenced_node_records_outcomes_past_its_own_transaction_stuck_with_the_job_lock(
    client: SchedulerClient, db_url: str
) -> None:
    """A fenced node's scanner (or firer) is stuck inside its transaction, holding the
    process mutex and, on the server, the job lock: its link went dead (a partition),
    and the server keeps the lock until it times the connection out. The outcome the
    fenced node holds must still be recorded long before that. Before the fix the
    results thread waited for the mutex, then for the job lock, past the session's
    expiry; a peer reran the finished run (found by the soak in a stress round)."""
    node = Node(NodeConfig(database_url=db_url, heartbeat_interval_s=0.5, fence_after_s=1.5,
                           session_timeout_s=3.0, poll_interval_s=1.0, kill_grace_s=1.0))
    at = client.now() + timedelta(seconds=30)
    client.add_job({"name": "j", "schedule": f"@at {at.isoformat()}", "command": "true"})
    node.store.register(session_id=node.session_id, host="h", pid=1, capacity=16, tags=(),
                        version="test")
    scan = node.store.prepare_due(session_id=node.session_id, fire_prefix=f"{node.session_id}:1:",
                                  limit=10, tag_sets=[""], look_ahead_s=60, planner=node.planner)
    fired, _ = node.store.fire(session_id=node.session_id, items=scan.prepared,
                               planner=node.planner, ahead_s=60)
    execution = node.start_execution(fired[0])
    execution.submitted = True
    execution.started_at = at
    holding = threading.Event()
    release = threading.Event()

    def stuck_scanner() -> None:
        def tx(t: Tx) -> None:
            node.store.lock(t.conn, "job")
            holding.set()
            release.wait(60)  # as if its next statement hung on a dead link

        with node.owned.mutex, contextlib.suppress(StoreError):
            node.db.transaction(tx, name="stuck", stop=node.fenced)

    thread = threading.Thread(target=stuck_scanner, daemon=True)
    thread.start()
    try:
        assert holding.wait(30)
        node.fence("a test")
        execution.done.set()
        node.finish(execution, Outcome(status=RunStatus.SUCCEEDED, exit_code=0), by_worker=True)
        node.results_service.start()
        # Not after the stuck transaction (60 s): well before the server would time it out.
        wait_until(lambda: [r.status for r in client.list_runs().items] == [RunStatus.SUCCEEDED],
                   timeout=10, interval=0.05, message="the outcome recorded")
        assert client.get_job("j").state.value == "idle"
    finally:
        release.set()
        node.results_service.stop()
        thread.join(30)
        node.results_service.join(5)
        node.dispose_pools()
