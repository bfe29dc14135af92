"""Job bodies the cluster tests schedule (imported by the node processes)."""

from __future__ import annotations

import os

from quartzlite.executors import current_run


def record(path: str) -> None:
    """Append one line per execution: job, slot, attempt, node pid. Keyed by slot, not by
    planned instant: a rerun of a slot is planned at a new instant but is the same slot."""
    run = current_run()
    assert run is not None
    line = f"{run.job} {run.slot_at.isoformat()} {run.attempt} {os.getpid()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def nap(seconds: float, path: str) -> None:
    """Touch ``path + '.started'``, sleep ``seconds``, then touch ``path``."""
    import time
    from pathlib import Path

    Path(path + ".started").touch()
    time.sleep(seconds)
    Path(path).touch()


def span(path: str, seconds: float, spin: bool = False) -> None:
    """Append ``start <job> <epoch>``, then sleep (or compute, holding the GIL as much
    as Python lets it) for ``seconds``, then append ``end <job> <epoch>``."""
    import time

    run = current_run()
    assert run is not None

    def note(kind: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{kind} {run.job} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)

    note("start")
    if spin:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            sum(range(1000))
    else:
        time.sleep(seconds)
    note("end")


def shard_span(path: str, seconds: float = 0.0) -> None:
    """Append ``start <job> <slot> <shard> <total> <pid> <epoch>``, sleep ``seconds``, then
    the same line as ``end``; shard and total are -1 for a run that is no broadcast's."""
    import time

    run = current_run()
    assert run is not None
    index, total = (run.shard.index, run.shard.total) if run.shard is not None else (-1, -1)

    def note(kind: str) -> None:
        line = (f"{kind} {run.job} {run.slot_at.isoformat()} {index} {total} {os.getpid()} "
                f"{time.time():.6f}\n")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    note("start")
    if seconds:
        time.sleep(seconds)
    note("end")
