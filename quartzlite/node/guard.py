"""The guard: a tiny process beside each node that kills the node's running jobs when
the node cannot.

A node whose process is frozen (SIGSTOP, a stalled VM) or killed (SIGKILL, OOM) cannot
fence itself, and its shell jobs run in process groups of their own, so they would
outlive it and overlap with the rerun a peer starts after expiry. The guard runs in a
session of its own and reads a pipe from the node: ``beat SENT`` after every successful
heartbeat, ``add PGID`` / ``del PGID`` as runs start and end. When no beat came for
``fence_after_s`` (the node is frozen or cut off) or the pipe closes (the node died), it
SIGKILLs every registered process group, before any peer may expire the session.
Python runs are threads of the node, which only the node's death ends: while any runs,
the node sends ``hold PID`` (its own pid; ``release`` when none is left), and a missed
deadline SIGKILLs the node process too.

It answers on its stdout, which the node reads: ``ok`` for every beat (the node fences
when its guard stops answering: a node without a live guard is not running) and
``killed N`` *before* it kills N groups on a missed deadline, so that a node that wakes
up after a freeze learns that its runs were killed before it sees them end, and fences
instead of recording them as failures.

Run as ``python -m quartzlite.node.guard FENCE_AFTER_S``; stdlib only.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time


def _kill(groups: set[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _tell(out: int, line: str) -> None:
    try:
        os.write(out, line.encode() + b"\n")
    except OSError:
        pass  # the node is gone or not reading: nothing to tell


def guard(fd: int, out: int, fence_after_s: float) -> int:
    groups: set[int] = set()
    held: int | None = None  # the node's pid while Python runs execute in it
    last_beat = time.monotonic()
    buffer = b""
    poller = select.poll()  # not select(): descriptors may be above 1023
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        left = fence_after_s - (time.monotonic() - last_beat)
        if left <= 0:
            # The node missed its fence deadline: it is frozen or cut off. Say so
            # first: the node must learn it before it sees its runs die.
            if groups:
                _tell(out, f"killed {len(groups)}")
            _kill(groups)
            groups.clear()
            if held is not None:
                try:
                    os.kill(held, signal.SIGKILL)  # its Python runs die with it
                except (ProcessLookupError, PermissionError):
                    pass
                held = None
            last_beat = time.monotonic()
            continue
        if not poller.poll(min(left, 0.25) * 1000):
            continue
        data = os.read(fd, 65536)
        if not data:
            _kill(groups)  # the node is gone
            return 0
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            word, _, arg = line.decode(errors="replace").partition(" ")
            if word == "beat":
                # The node sends the (system-wide) monotonic instant it SENT the
                # heartbeat: the database stamped it no earlier, so counting from
                # there keeps the guard's deadline before any peer's.
                try:
                    sent = float(arg) if arg else time.monotonic()
                except ValueError:
                    sent = time.monotonic()
                last_beat = max(last_beat, min(sent, time.monotonic()))
                _tell(out, "ok")
            elif word == "add" and arg.isdigit():
                groups.add(int(arg))
            elif word == "del" and arg.isdigit():
                groups.discard(int(arg))
            elif word == "hold" and arg.isdigit():
                held = int(arg)
            elif word == "release":
                held = None
            elif word == "kill":
                _kill(groups)
                groups.clear()
            elif word == "exit":
                return 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return guard(sys.stdin.fileno(), sys.stdout.fileno(), float(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
