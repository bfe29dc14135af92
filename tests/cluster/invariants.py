"""The invariants every fault test checks, from the database and from what the job
bodies recorded, and the per-fault report row `make reliability-report` collects.

1. no (job, slot) ran twice (counted from the job bodies' own records; keyed by slot, so
   a rerun planned at a new instant still counts as the same slot). The one excuse, for
   the tests that cut a node off the database for good: a run that node executed but
   could never record is ``abandoned`` when its session expires and rerun once
   (recovery policy ``rerun``): its outcome is unknown to the cluster
   (docs/reliability.md, the first rule). Those are counted apart;
2. every slot that came due in the window ran or is recorded (missed, abandoned, ...);
3. no job stays prepared or executing without a live owner session;
4. no child process outlives its run or its node (checked by the tests that spawn them).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.cluster.harness import Db


@dataclass
class FaultReport:
    fault: str
    slots_expected: int = 0
    slots_ran: int = 0
    duplicates: int = 0
    missed: dict[str, int] = field(default_factory=dict)
    unaccounted: int = 0
    stuck_jobs: int = 0
    reruns_unknown_outcome: int = 0
    recovery_s: float | None = None
    notes: str = ""

    def assert_ok(self) -> None:
        assert self.duplicates == 0, f"{self.fault}: {self.duplicates} duplicate run(s)"
        assert self.unaccounted == 0, f"{self.fault}: {self.unaccounted} slot(s) neither ran nor recorded"
        assert self.stuck_jobs == 0, f"{self.fault}: {self.stuck_jobs} job(s) owned by no live session"

    def publish(self) -> None:
        """Append to $QUARTZLITE_FAULT_REPORT (JSON lines) when set; print always."""
        line = json.dumps(asdict(self))
        print(f"\nFAULT REPORT {line}")
        target = os.environ.get("QUARTZLITE_FAULT_REPORT")
        if target:
            with open(target, "a") as fh:
                fh.write(line + "\n")


def records(path: Path) -> list[tuple[tuple[str, datetime], int]]:
    """((job, slot), node pid) per line the job bodies wrote (tests/cluster/jobs.py)."""
    found = []
    if path.exists():
        for line in path.read_text().splitlines():
            job, slot, _attempt, pid = line.split()
            found.append(((job, datetime.fromisoformat(slot)), int(pid)))
    return found


def executions(path: Path) -> Counter[tuple[str, datetime]]:
    return Counter(key for key, _pid in records(path))


def whole_seconds(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    return [first + timedelta(seconds=i) for i in range(max(0, int((end - first).total_seconds())))]


def check(
    db: Db, fault: str, *, jobs: list[str], start: datetime, end: datetime, log: Path,
    every_second: bool = True, cut_off: tuple[str, int] | None = None,
    killed: Sequence[int] = (),
) -> FaultReport:
    """Build the report for jobs on a whole-second schedule over [start, end).

    ``cut_off``: (session id, pid) of a node that lost the database for good (or froze)
    until a peer expired its session: one rerun of a slot it executed but could not
    record (abandoned) is counted apart. ``killed``: pids of nodes SIGKILLed, likewise."""
    report = FaultReport(fault=fault)
    ran = executions(log)
    unknown = _unknown_outcomes(db, log, cut_off) if cut_off is not None else set()
    for pid in killed:
        unknown |= _killed_mid_run(db, log, pid)
    for key, count in ran.items():
        if count == 2 and key in unknown:
            report.reruns_unknown_outcome += 1
        elif count > 1:
            report.duplicates += count - 1
    if report.reruns_unknown_outcome:
        report.notes = (
            f"{report.reruns_unknown_outcome} rerun(s) of runs in flight when the node was cut "
            "off (outcome never recorded: abandoned, rerun by policy)"
        )
    rows = db.rows(
        "SELECT job_name, slot_at, status, started_at, error FROM ql_runs "
        "WHERE slot_at >= :a AND slot_at < :b",
        a=start.replace(tzinfo=None), b=end.replace(tzinfo=None),
    )
    recorded: dict[tuple[str, datetime], set[str]] = {}
    for r in rows:
        # Killed before its instant (fired ahead, never started): recorded, not run.
        status = "killed_unstarted" if r.status == "killed" and r.started_at is None else r.status
        recorded.setdefault((r.job_name, r.slot_at.replace(tzinfo=UTC)), set()).add(status)
    if every_second:
        expected = [(j, s) for j in jobs for s in whole_seconds(start, end)]
        report.slots_expected = len(expected)
        for key in expected:
            statuses = recorded.get(key)
            if not statuses:
                report.unaccounted += 1
            elif statuses & {"succeeded", "failed", "timed_out", "killed"}:
                report.slots_ran += 1
            else:
                for status in statuses:
                    report.missed[status] = report.missed.get(status, 0) + 1
    report.stuck_jobs = int(
        db.scalar(
            "SELECT COUNT(*) FROM ql_jobs j LEFT JOIN ql_sessions s ON s.id = j.owner_session "
            "WHERE j.state <> 'idle' AND s.id IS NULL"
        )
        or 0
    )
    return report


def _killed_mid_run(db: Db, log: Path, pid: int) -> set[tuple[str, datetime]]:
    """(job, slot) that a SIGKILLed node (``pid``) executed and whose run is ``abandoned``
    under it: it died after the body ran and before the outcome was journaled or
    recorded, so the outcome is unknown and the recovery policy may rerun the slot once
    (every other execution of a slot twice is a duplicate)."""
    rows = db.rows(
        "SELECT job_name, slot_at FROM ql_runs WHERE status = 'abandoned' AND node LIKE :n",
        n=f"%:{pid}",
    )
    abandoned = {(r.job_name, r.slot_at.replace(tzinfo=UTC)) for r in rows}
    return abandoned & {key for key, by in records(log) if by == pid}


def _unknown_outcomes(db: Db, log: Path, cut_off: tuple[str, int]) -> set[tuple[str, datetime]]:
    """(job, slot) that the cut-off node executed (its pid in the bodies' records) and
    whose run is ``abandoned`` under its session: the outcome never reached the database
    (``started_at`` stays empty: a start is recorded with its outcome)."""
    session_id, pid = cut_off
    rows = db.rows(
        "SELECT job_name, slot_at FROM ql_runs WHERE session_id = :s AND status = 'abandoned'",
        s=session_id,
    )
    abandoned = {(r.job_name, r.slot_at.replace(tzinfo=UTC)) for r in rows}
    return abandoned & {key for key, by in records(log) if by == pid}
