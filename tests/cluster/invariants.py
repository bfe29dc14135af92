"""The invariants every fault test checks, from the database and from what the job
bodies recorded, and the per-fault report row `make reliability-report` collects.

1. no (job, slot) ran twice (counted from the job bodies' own records; keyed by slot, so
   a rerun planned at a new instant still counts as the same slot);
2. every slot that came due in the window ran or is recorded (missed, abandoned, ...);
3. no job stays prepared or executing without a live owner session;
4. no child process outlives its run or its node (checked by the tests that spawn them).
"""

from __future__ import annotations

import json
import os
from collections import Counter
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


def executions(path: Path) -> Counter[tuple[str, datetime]]:
    found: Counter[tuple[str, datetime]] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            job, slot, _attempt, _pid = line.split()
            found[(job, datetime.fromisoformat(slot))] += 1
    return found


def whole_seconds(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    return [first + timedelta(seconds=i) for i in range(max(0, int((end - first).total_seconds())))]


def check(
    db: Db, fault: str, *, jobs: list[str], start: datetime, end: datetime, log: Path,
    every_second: bool = True,
) -> FaultReport:
    """Build the report for jobs on a whole-second schedule over [start, end)."""
    report = FaultReport(fault=fault)
    ran = executions(log)
    report.duplicates = sum(count - 1 for count in ran.values() if count > 1)
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
