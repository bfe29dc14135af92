"""The soak's job bodies. Each execution appends ``start`` and ``end`` lines to one
records file (O_APPEND, one write per line, so the file's order is the order the
events happened in across every process):

    start JOB SLOT ATTEMPT RUN_ID PID NODE_PID T
    end   JOB SLOT ATTEMPT RUN_ID PID NODE_PID T

PID is the process that executes the body (the node itself for a Python callable, bash
for a shell command); T is the machine's uptime (/proc/uptime: the same clock in every
process, even one whose clocks faketime fakes). The soak appends ``gone RUN_ID PID T``
when that process has died without an ``end`` (killed with its node or by a guard)."""

from __future__ import annotations

import os
import shlex
import threading

from quartzlite.executors import current_run


def uptime() -> float:
    with open("/proc/uptime") as fh:
        return float(fh.read().split()[0])


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def work(path: str, seconds: float = 0.0, fail_below: int = 0) -> None:
    """A Python job: record the start, work ``seconds``, record the end; attempts up to
    ``fail_below`` then fail (a retrying job)."""
    run = current_run()
    assert run is not None
    pid = os.getpid()
    key = f"{run.job} {run.slot_at.isoformat()} {run.attempt} {run.run_id} {pid} {pid}"
    append(path, f"start {key} {uptime()}")
    try:
        if seconds:
            threading.Event().wait(seconds)  # (time.sleep fails under libfaketime)
    finally:
        append(path, f"end {key} {uptime()}")
    if run.attempt <= fail_below:
        raise RuntimeError(f"attempt {run.attempt} fails on purpose")


def shell_command(path: str, seconds: float = 0.0, fail_below: int = 0) -> str:
    """The same body as a shell command."""
    target = shlex.quote(path)
    key = ('"$QUARTZLITE_JOB $QUARTZLITE_SLOT_AT $QUARTZLITE_ATTEMPT $QUARTZLITE_RUN_ID '
           '$$ $PPID"')
    now = "read -r u _ < /proc/uptime"  # a builtin: no process per record
    parts = [f"k={key}", now, f'echo "start $k $u" >> {target}']
    if seconds:
        parts.append(f"sleep {seconds}")
    parts += [now, f'echo "end $k $u" >> {target}']
    if fail_below:
        parts.append(f'[ "$QUARTZLITE_ATTEMPT" -gt {fail_below} ]')
    return "; ".join(parts)
