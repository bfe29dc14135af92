"""A node never starts a run id twice: the last check before a run starts."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from quartzlite.config import NodeConfig
from quartzlite.executors import RunContext, RunHandle
from quartzlite.models import Fired, JobSpec, Prepared
from quartzlite.node.node import Node
from quartzlite.node.ownership import Execution

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _execution(run_id: int) -> Execution:
    spec = JobSpec(name="j", schedule="@every 1h", callable="os:getpid")
    prepared = Prepared(job_id=1, name="j", fire_id="s:1:1", planned_at=NOW, slot_at=NOW,
                        attempt=1, spec=spec)
    execution = Execution(fired=Fired(prepared=prepared, run_id=run_id, fired_at=NOW),
                          handle=RunHandle(), started_at=NOW, submitted=True)
    execution.context = RunContext(job="j", fire_id="s:1:1", run_id=run_id, planned_at=NOW,
                                   slot_at=NOW, attempt=1)
    return execution


def test_a_second_start_of_a_run_is_refused_and_reported_as_a_bug(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = Node(NodeConfig(database_url=db_url))
    try:
        first, again = _execution(7), _execution(7)  # say, one run fired twice by mistake
        assert node._execute(first), "the first start runs and records it"
        with caplog.at_level(logging.ERROR, logger="quartzlite.node"):
            assert not node._execute(again)
        assert "BUG: run 7 of job j was about to start a second time" in caplog.text
        assert node.results.qsize() == 1, "one outcome: the first start's"
        assert not again.done.is_set()
        assert not again.recorded.is_set()
        assert node._execute(_execution(8)), "other runs start as before"
    finally:
        node.dispose_pools()
