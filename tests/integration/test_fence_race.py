"""A fenced node waits until the outcome of every run it killed is handed over, not
merely until the run's thread let go of it.

The worker marks a run done, then records its outcome. A fenced node that waited only
for "done" could exit in between (a loaded machine did, in the fault suite: the run of
a node whose guard died stayed ``running``). Here the worker is held between the two
steps, on purpose, while the node goes through its after-fence wait.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from quartzlite.client import SchedulerClient
from quartzlite.config import NodeConfig
from quartzlite.enums import RunStatus
from quartzlite.executors import RunHandle
from quartzlite.models import Fired, JobSpec, Outcome, Prepared
from quartzlite.node.node import Node
from quartzlite.node.ownership import Execution

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
