"""Issue 16's acceptance for concurrency and broadcast, with real node processes.

* A broadcast job on 3 nodes runs 3 shards per slot (one per node, shards 0..2 of 3); once
  one node is SIGKILLed and its session expired, each slot runs 2 shards (of 2) on the
  survivors (in ``make test-faults``, a node that joins then gets its shard again). No
  (slot, shard) runs twice.
* A job with max_concurrency 3 whose runs outlast its period runs up to 3 at once across
  2 nodes, never 4, each slot once.

The job bodies append start and end lines (tests/cluster/jobs.py ``shard_span``); every
wait has a deadline."""

from __future__ import annotations

import os
import signal
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from quartzlite.client import SchedulerClient
from tests.cluster.harness import Db, nodes, wait_until
from tests.cluster.test_dependencies import stop_all

pytestmark = pytest.mark.cluster
LONG = os.environ.get("QUARTZLITE_FAULTS_LONG") == "1"


def spans(path: Path) -> list[dict[str, Any]]:
    found = []
    if path.exists():
        for line in path.read_text().splitlines():
            kind, job, slot, index, total, pid, at = line.split()
            found.append({"kind": kind, "job": job, "slot": slot, "shard": int(index),
                          "total": int(total), "pid": int(pid), "at": float(at)})
    return found


def full_slots(db: Db, job: str, total: int) -> int:
    """Slots of ``job`` whose ``total`` shards all succeeded."""
    return int(db.scalar(
        "SELECT COUNT(*) FROM (SELECT slot_at FROM ql_runs WHERE job_name = :j AND "
        "status = 'succeeded' AND shard_total = :t GROUP BY slot_at HAVING COUNT(*) = :t) s",
        j=job, t=total) or 0)


def test_a_broadcast_job_runs_once_per_live_node_per_slot_and_on_the_survivors_after_a_kill(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    db = Db(db_url)
    with nodes(db_url) as start:
        live = [start(f"n{i}") for i in range(3)]
        wait_until(lambda: db.live_sessions() == 3, timeout=60, message="3 sessions")
        # Added once all 3 are up: a slot given out while one was still starting would
        # go to fewer nodes.
        client.add_job({"name": "fan", "schedule": "*/2 * * * * ?", "broadcast": True,
                        "callable": "tests.cluster.jobs:shard_span",
                        "kwargs": {"path": str(log)}})
        client.add_job({"name": "fan-sh", "schedule": "*/2 * * * * ?", "broadcast": True,
                        "command": 'echo "$QUARTZLITE_SHARD_INDEX/$QUARTZLITE_SHARD_TOTAL"'})
        wait_until(lambda: full_slots(db, "fan", 3) >= 3, timeout=90, interval=0.2,
                   message="3 slots run by 3 shards each")
        victim = live.pop(0)
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_sessions WHERE pid = :p",
                                     p=victim.pid) == 0,
                   timeout=60, interval=0.1, message="the dead node's session expired")
        wait_until(lambda: full_slots(db, "fan", 2) >= 3, timeout=90, interval=0.2,
                   message="3 slots run by the 2 survivors")
        if LONG:
            # A node that joins gets its shard from the next slot on.
            before = full_slots(db, "fan", 3)
            live.append(start("r0"))
            wait_until(lambda: full_slots(db, "fan", 3) >= before + 3, timeout=90,
                       interval=0.2, message="3 slots run by 3 shards again after a join")
        client.pause_job("fan")
        client.pause_job("fan-sh")
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_jobs WHERE state <> 'idle'") == 0,
                   timeout=60, interval=0.2, message="every lane idle")
        stop_all(live)

    runs = db.rows("SELECT job_name, slot_at, shard, shard_total, status, node, output "
                   "FROM ql_runs WHERE job_name IN ('fan', 'fan-sh') ORDER BY slot_at, shard")
    by_slot: dict[Any, list[Any]] = defaultdict(list)
    for r in runs:
        assert r.shard_total is not None, r
        assert 0 <= r.shard < r.shard_total, r
        by_slot[(r.job_name, r.slot_at)].append(r)
    for (job, slot), found in by_slot.items():
        assert len({r.shard_total for r in found}) == 1, f"{job} {slot}: one total per slot"
        assert len(found) <= found[0].shard_total, f"{job} {slot}: at most one run per shard"
        done = [r for r in found if r.status == "succeeded"]
        assert len({r.node for r in done}) == len(done), f"{job} {slot}: one shard per node"
    # The shell job saw its shard in its environment.
    for r in runs:
        if r.job_name == "fan-sh" and r.status == "succeeded":
            assert r.output.strip() == f"{r.shard}/{r.shard_total}", r
    # Every slot once per node before the kill, once per survivor after it: the last
    # slots ran 2 shards, and none after the expiry ran 3.
    totals = [found[0].shard_total for (job, _), found in sorted(by_slot.items()) if job == "fan"]
    # 3, 3, ..., then 2, 2, ... (and 3 again once a node joined): each phase in one piece.
    phases = [t for i, t in enumerate(totals) if i == 0 or totals[i - 1] != t]
    assert phases == ([3, 2, 3] if LONG else [3, 2]), totals
    # The bodies' own records: no (slot, shard) executed twice, but the victim's own
    # shard that it was running when killed (its outcome died with it).
    executed = Counter((s["slot"], s["shard"]) for s in spans(log) if s["kind"] == "start")
    assert executed
    assert max(executed.values()) == 1, executed.most_common(3)
    db.close()


def test_max_concurrency_runs_up_to_n_at_once_in_a_cluster_each_slot_once(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "spans.log"
    client.add_job({"name": "wide", "schedule": "* * * * * ?", "max_concurrency": 3,
                    "callable": "tests.cluster.jobs:shard_span",
                    "kwargs": {"path": str(log), "seconds": 2.5}})
    db = Db(db_url)
    with nodes(db_url) as start:
        started = [start(f"n{i}") for i in range(2)]
        wait_until(lambda: db.live_sessions() == 2, timeout=60, message="2 sessions")
        wait_until(lambda: int(db.scalar(
            "SELECT COUNT(*) FROM ql_runs WHERE job_name = 'wide' AND status = 'succeeded'")
            or 0) >= 8, timeout=120, interval=0.2, message="8 runs of 2.5 s each")
        client.pause_job("wide")
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_jobs WHERE state <> 'idle'") == 0,
                   timeout=60, interval=0.2, message="every lane idle")
        stop_all(started)

    found = spans(log)
    started_slots = Counter(s["slot"] for s in found if s["kind"] == "start")
    assert max(started_slots.values()) == 1, "each slot once"
    # The most runs at once, from the bodies' own clocks.
    events = sorted((s["at"], 1 if s["kind"] == "start" else -1) for s in found)
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    runs = db.rows("SELECT slot_at, status, node FROM ql_runs WHERE job_name = 'wide'")
    assert len({r.slot_at for r in runs}) == len(runs), "one run row per slot"
    print(f"\nmax_concurrency 3 on 2 nodes: {len(runs)} runs, at most {most} at once, "
          f"on {len({r.node for r in runs})} node(s)")
    assert 2 <= most <= 3, most
    db.close()
