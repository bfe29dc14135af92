"""Job bodies. Each records, at entry, the planned instant and the wall clock.

quartzlite: :func:`record` learns its planned instant from
``quartzlite.executors.current_run().planned_at`` and appends one line to a file
(``O_APPEND``, one ``write`` per line, so concurrent runs and nodes never interleave).

APScheduler: :func:`aps_record` appends to an in-process list that the runner dumps
at the end; date jobs get their planned instant as an argument, interval jobs get it
from the scheduler's EXECUTED events (see :mod:`bench.aps_runner`).
"""

from __future__ import annotations

import os
import threading
import time

#: Line format: ``job planned_epoch actual_epoch pid``.
LINE = "{job} {planned:.6f} {actual:.6f} {pid}\n"


def record(path: str) -> None:
    """quartzlite job body: one line per execution."""
    actual = time.time()
    from quartzlite.executors import current_run

    run = current_run()
    assert run is not None
    line = LINE.format(job=run.job, planned=run.planned_at.timestamp(), actual=actual,
                       pid=os.getpid())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def noop() -> None:
    """quartzlite job body of the idle workload (never due during the test)."""


#: APScheduler: (job id, planned epoch or None, actual epoch), in the runner process.
APS_RECORDS: list[tuple[str, float | None, float]] = []
_APS_LOCK = threading.Lock()


def aps_record(name: str, planned: float | None = None) -> None:
    """APScheduler job body: remember the start; the runner pairs it with its event."""
    actual = time.time()
    with _APS_LOCK:
        APS_RECORDS.append((name, planned, actual))
