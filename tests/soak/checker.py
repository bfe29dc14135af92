"""The soak's checker: what the job bodies recorded (keyed by slot) against what the
database says. Pure functions over plain data, so the rules are unit-tested on their own
(tests/unit/test_soak_checker.py).

Violations (each must be 0):
- ``duplicates``: an execution of a slot that was not allowed. A slot may run again only
  as a retry of a failed or timed-out attempt, or as the rerun of an ``abandoned`` run
  whose outcome was truly unknown: its execution was cut short, or it finished but its
  node could not say so before its session expired (it was killed, frozen, cut off, or
  the database was down, at some moment in the last ``HEALTHY_S`` before the expiry;
  earlier, a peer cut off inside a transaction may hold the locks every write needs).
  A node that was healthy for the last ``HEALTHY_S`` before its expiry had its chance:
  a rerun of what it finished is a duplicate. The same run executed twice is one too.
- ``overlaps``: an execution of a job started while another execution of that job was
  still going (by uptime; a killed execution ends when its node recorded its end, or
  when the soak saw its process gone, whichever came first).
- ``unaccounted``: a due slot of a checked job with no run row at all.
- ``false_starts``: a run row with ``started_at`` whose execution never started.
- ``kills_as_failures``: a run recorded ``failed`` that its body did not fail (a guard's
  or a fence's kill), or ``killed`` when no operator asked for it.
- ``stuck``: a job held (prepared/executing) or a run ``running`` with no live owner at
  the end, or a checked job that did not run again after the faults healed.
- ``leftovers``: processes of runs or guards still alive after every node stopped.
- ``silent``: a node alive, reachable and not frozen that kept no live session.
- ``bugs``: a node log line saying ``BUG:``: a node caught itself breaking an invariant
  (say, about to start a run a second time) and refused; the soak fails on it even
  when the refusal kept the history right.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

#: Statuses after which the same slot may run again as a retry.
RETRIED = frozenset({"failed", "timed_out"})
#: A node that is alive, not frozen and reaches the database for this long records an
#: outcome it knows (a few heartbeats and a retry's backoff).
HEALTHY_S = 1.5
VIOLATIONS = ("duplicates", "overlaps", "unaccounted", "false_starts", "kills_as_failures",
              "stuck", "leftovers", "silent", "bugs")


@dataclass
class Execution:
    job: str
    slot: str
    attempt: int
    run_id: int
    pid: int
    node_pid: int
    start: int  # position in the records file
    t_start: float = 0.0  # uptime
    ended: bool = False  # the body wrote its "end"
    t_end: float | None = None  # uptime of its end (or of when it was seen gone)
    closed: int | None = None  # position of its end or gone


@dataclass
class RunRow:
    id: int
    job: str
    slot: str
    attempt: int
    status: str
    started: bool
    exit_code: int | None = None
    error: str | None = None
    t_ended: float | None = None  # its ended_at, as uptime
    session: str | None = None  # the session that fired it


class Impairments:
    """When each node could not record anything: intervals (uptime seconds) keyed by
    node pid, by node place (a partition applies to whichever process is there) and
    ``"db"`` (the database down, for everyone)."""

    def __init__(self) -> None:
        self.intervals: dict[Hashable, list[tuple[float, float]]] = defaultdict(list)
        self.place: dict[int, int] = {}
        #: session id -> the last heartbeat seen + session_timeout (uptime): after it, a
        #: peer may expire the session, and the node need not record anything more.
        self.expiry: dict[str, float] = {}

    def add(self, key: Hashable, start: float, end: float = float("inf")) -> None:
        self.intervals[key].append((start, end))

    def healthy_tail(self, pid: int, start: float, end: float) -> float:
        """How long node ``pid`` had been healthy at ``end`` (counted from ``start``)."""
        spans = (self.intervals.get(pid, []) + self.intervals.get("db", [])
                 + self.intervals.get(("place", self.place.get(pid)), []))
        since = start
        for a, b in spans:
            if a < end and b > since:
                since = max(since, min(b, end))
        return end - since

    def longest_healthy(self, pid: int, start: float, end: float) -> float:
        """The longest stretch in [start, end] when node ``pid`` was not impaired."""
        spans = sorted(self.intervals.get(pid, []) + self.intervals.get("db", [])
                       + self.intervals.get(("place", self.place.get(pid)), []))
        best, cursor = 0.0, start
        for a, b in spans:
            if b <= cursor:
                continue
            if a >= end:
                break
            best = max(best, min(a, end) - cursor)
            cursor = max(cursor, b)
            if cursor >= end:
                return best
        return max(best, end - cursor)


@dataclass
class Result:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VIOLATIONS, 0))
    details: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    info: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        if len(self.details[kind]) < 20:
            self.details[kind].append(detail)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **self.counts, "info": dict(self.info),
                "details": {k: v for k, v in self.details.items() if v}}


def slot_key(value: str | datetime) -> str:
    """A slot as one canonical string (UTC, microseconds), whatever wrote it."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def parse_records(lines: Iterable[str]) -> list[Execution]:
    """Executions in the order they started, with how each ended."""
    found: list[Execution] = []
    by_run: dict[tuple[int, int], Execution] = {}
    for position, line in enumerate(lines):
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        if kind == "start" and len(parts) == 8:
            job, slot, attempt, run_id, pid, node_pid, t = parts[1:]
            execution = Execution(job, slot_key(slot), int(attempt), int(run_id), int(pid),
                                  int(node_pid), position, float(t))
            found.append(execution)
            by_run[(execution.run_id, execution.pid)] = execution
        elif kind == "end" and len(parts) == 8:
            ended = by_run.get((int(parts[4]), int(parts[5])))
            if ended is not None and ended.closed is None:
                ended.ended, ended.closed, ended.t_end = True, position, float(parts[7])
        elif kind == "gone" and len(parts) == 4:
            gone = by_run.get((int(parts[1]), int(parts[2])))
            if gone is not None and gone.closed is None:
                gone.closed, gone.t_end = position, float(parts[3])
    return found


def check_executions(
    result: Result, executions: list[Execution], runs: Mapping[int, RunRow],
    impairments: Impairments,
) -> None:
    """Duplicates, overlaps and false history from the records and the run rows."""
    by_slot: dict[tuple[str, str], list[Execution]] = defaultdict(list)
    seen_runs: set[int] = set()
    for e in executions:
        if e.run_id in seen_runs:
            result.add("duplicates", f"run {e.run_id} ({e.job} {e.slot}) executed twice")
        seen_runs.add(e.run_id)
        by_slot[(e.job, e.slot)].append(e)
    allowed: Counter[str] = Counter()
    for (job, slot), items in by_slot.items():
        for previous, current in zip(items, items[1:], strict=False):
            if previous.run_id == current.run_id:
                continue  # counted above
            row = runs.get(previous.run_id)
            status = row.status if row is not None else "no row"
            if status in RETRIED:
                allowed["retries"] += 1
            elif status == "abandoned" and row is not None and not previous.ended:
                allowed["reruns_cut_short"] += 1
            elif status == "abandoned" and row is not None and (row.exit_code or 0) < 0:
                # killed by its fence after the body's last line, before it exited:
                # the node saw a run killed, its outcome unknown
                allowed["reruns_killed_before_exit"] += 1
            elif status == "abandoned" and row is not None and _no_chance(
                previous, row, impairments
            ):
                # finished, but its node had no chance to record it before expiry
                allowed["reruns_node_silent_until_expiry"] += 1
            else:
                result.add("duplicates", (
                    f"{job} slot {slot} executed again (run {current.run_id}) after run "
                    f"{previous.run_id} {'finished' if previous.ended else 'ran'} and was "
                    f"recorded {status} (exit {row.exit_code if row else None})"))
    result.info.update(allowed)
    # Overlaps, by time (/proc/uptime has 10 ms steps: closer than that is not an overlap).
    events: list[tuple[float, int, Execution]] = []
    for e in executions:
        events.append((e.t_start, 1, e))
        close = _closed_at(e, runs.get(e.run_id))
        if close is not None:
            events.append((max(close - 0.011, e.t_start + 1e-6), 0, e))
    running: dict[str, set[int]] = defaultdict(set)
    for _, kind, e in sorted(events, key=lambda item: (item[0], item[1])):
        if kind == 1:
            if running[e.job]:
                result.add("overlaps", f"{e.job} run {e.run_id} started while run(s) "
                                       f"{sorted(running[e.job])} still executed")
            running[e.job].add(e.run_id)
        else:
            running[e.job].discard(e.run_id)
    # False history: a recorded start that did not happen.
    started = {e.run_id for e in executions}
    unrecorded = 0
    killed_at_start = 0
    for row in runs.values():
        if row.started and row.id not in started:
            if row.status == "abandoned" and row.exit_code is not None:
                killed_at_start += 1  # its process started; killed before the body's 1st line
                continue
            result.add("false_starts", f"run {row.id} ({row.job} {row.slot}) {row.status} "
                                       "claims a start that never happened")
        if row.id in started and not row.started and row.status != "running":
            unrecorded += 1
    result.info["starts_not_recorded"] = unrecorded  # e.g. abandoned by a peer: unknown
    result.info["killed_before_first_line"] = killed_at_start
    result.info["executions"] = len(executions)


def _closed_at(execution: Execution, row: RunRow | None) -> float | None:
    """When an execution ended: its body's end; for one killed, the earlier of when the
    soak saw its process gone and when its node recorded its end (that node saw it exit:
    the run has an exit code)."""
    if execution.ended:
        return execution.t_end
    candidates = [t for t in (execution.t_end,) if t is not None]
    if row is not None and row.exit_code is not None and row.t_ended is not None:
        candidates.append(row.t_ended)
    return min(candidates) if candidates else None


def _no_chance(execution: Execution, row: RunRow, impairments: Impairments) -> bool:
    if execution.t_end is None or row.t_ended is None:
        return False
    until = min(row.t_ended, impairments.expiry.get(row.session or "", row.t_ended))
    return impairments.healthy_tail(execution.node_pid, execution.t_end, until) < HEALTHY_S


def check_outcomes(
    result: Result, runs: Mapping[int, RunRow], *, fail_below: Mapping[str, int],
    killable: set[str],
) -> None:
    """Failures the bodies did not cause; kills nobody asked for."""
    for row in runs.values():
        if row.status == "failed":
            on_purpose = row.attempt <= fail_below.get(row.job, 0) and (
                row.exit_code is None or row.exit_code >= 0)
            if not on_purpose:
                result.add("kills_as_failures", f"run {row.id} ({row.job} attempt "
                           f"{row.attempt}) recorded failed: exit {row.exit_code} {row.error}")
        elif row.status == "killed" and row.job not in killable:
            result.add("kills_as_failures",
                       f"run {row.id} ({row.job}) recorded killed: {row.error}")


def check_accounted(
    result: Result, runs: Mapping[int, RunRow], *, jobs: Iterable[str], start: datetime,
    end: datetime,
) -> None:
    """Every whole second in [start, end) of each every-second job has a run row."""
    recorded = {(row.job, row.slot) for row in runs.values()}
    first = start.astimezone(UTC).replace(microsecond=0)
    if first < start:
        first += timedelta(seconds=1)
    seconds = int((end - first).total_seconds())
    expected = 0
    for job in jobs:
        for i in range(max(0, seconds)):
            slot = slot_key(first + timedelta(seconds=i))
            expected += 1
            if (job, slot) not in recorded:
                result.add("unaccounted", f"{job} slot {slot}: no run row")
    result.info["slots_checked"] = expected


def check_logs(result: Result, logs: Mapping[str, str]) -> None:
    """Every ``BUG:`` line of the node logs (``logs``: name -> text) is a violation."""
    for name, text in logs.items():
        for line in text.splitlines():
            if "BUG:" in line:
                result.add("bugs", f"{name}: {line[:500]}")
