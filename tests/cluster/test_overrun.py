"""The overrun policy end to end: a real ``quartzlite node`` process (started through the
CLI) runs a job whose runs outlast its period. Waits on conditions with deadlines;
nothing sleeps and then asserts."""

from __future__ import annotations

import signal
from datetime import timedelta
from itertools import pairwise

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.enums import OverrunPolicy
from tests.cluster.harness import Db, nodes, wait_until

pytestmark = pytest.mark.cluster


def test_an_every_second_job_running_2_5_s_skips_the_ticks_it_overran(
    db_url: str, client: SchedulerClient
) -> None:
    """``@every 1s`` running ``sleep 2.5`` with the default policy (skip): no back-to-back
    catch-up. Its runs' planned instants are at least 3 s apart, each on time (lateness
    does not grow), and every tick between them is recorded missed, saying overrun."""
    db = Db(db_url)
    succeeded = "SELECT COUNT(*) FROM ql_runs WHERE job_name='overrun' AND status='succeeded'"
    with nodes(db_url) as start:
        # Stopped while a run sleeps: no grace (the run is killed, after the three
        # checked) instead of waiting up to 2.5 s for it.
        node = start("n", options={"shutdown-grace-s": "0"})
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="the node's session")
        created = client.add_job({"name": "overrun", "schedule": "@every 1s", "command": "sleep 2.5"})
        assert created.spec.overrun_policy is OverrunPolicy.SKIP, "the default for new jobs"
        wait_until(lambda: db.scalar(succeeded) >= 3, timeout=20, interval=0.2,
                   message="three runs of the overrunning job")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0, node.log()[-3000:]

    rows = db.rows("SELECT planned_at, slot_at, started_at, status, error FROM ql_runs "
                   "WHERE job_name='overrun' ORDER BY planned_at")
    ran = [r for r in rows if r.status == "succeeded"][:3]
    assert len(ran) == 3
    planned = [r.planned_at for r in ran]
    gaps = [(b - a).total_seconds() for a, b in pairwise(planned)]
    assert all(gap >= 3.0 for gap in gaps), f"runs caught up back to back: {gaps}"
    # On the job's own ticks (the first run's plus whole seconds), each started on time.
    assert all((p - planned[0]).total_seconds() == int((p - planned[0]).total_seconds())
               for p in planned), planned
    lateness = [(r.started_at - r.planned_at).total_seconds() for r in ran[1:]]
    assert max(lateness) < 1.5, f"lateness grows: {lateness}"
    # Every tick between the first and the third run came due while a run ran: missed.
    between = {r.planned_at: r for r in rows if planned[0] < r.planned_at < planned[-1]}
    ticks = [planned[0] + timedelta(seconds=s)
             for s in range(1, int((planned[-1] - planned[0]).total_seconds()))]
    assert sorted(between) == ticks
    overran = [between[t] for t in ticks if t not in planned]
    assert len(overran) >= 4
    for run in overran:
        assert run.status == "missed", run
        assert run.error.startswith("overrun: came due while the previous run ran"), run.error
        assert "overrun policy skip" in run.error
    print(f"\noverrun (skip): planned gaps {gaps} s, lateness {lateness} s, "
          f"{len(overran)} ticks recorded missed")
    db.close()
