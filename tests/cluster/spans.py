"""A job body that records when each execution of a slot starts and ends, so a test
can tell a slot run twice after it had finished (a duplicate) from a rerun of a run
that was cut short (allowed by the recovery policy)."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

from quartzlite.executors import current_run


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def span(path: str, seconds: float = 0.0) -> None:
    """Record ``start``, work for ``seconds``, record ``end`` (job, slot, attempt, pid)."""
    run = current_run()
    assert run is not None
    key = f"{run.job} {run.slot_at.isoformat()} {run.attempt} {os.getpid()}"
    _append(path, f"start {key}\n")
    if seconds:
        time.sleep(seconds)
    _append(path, f"end {key}\n")


def finished_then_rerun(path: Path) -> list[str]:
    """Slots executed again after an execution of them had ended: each is a slot run
    twice although its first run was complete (never allowed)."""
    ended: set[tuple[str, str]] = set()
    bad: list[str] = []
    if not path.exists():
        return bad
    for line in path.read_text().splitlines():
        kind, job, slot, _attempt, _pid = line.split()
        if kind == "start" and (job, slot) in ended:
            bad.append(f"{job} {slot}")
        elif kind == "end":
            ended.add((job, slot))
    return bad


def executions_per_slot(path: Path) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = defaultdict(int)
    if path.exists():
        for line in path.read_text().splitlines():
            kind, job, slot, _attempt, _pid = line.split()
            if kind == "start":
                found[(job, slot)] += 1
    return dict(found)
