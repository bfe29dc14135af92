"""The guard: a tiny process beside each node that kills the node's running jobs when
the node cannot.

A node whose process is frozen (SIGSTOP, a stalled VM) or killed (SIGKILL, OOM) cannot
fence itself, and its shell jobs run in process groups of their own, so they would
outlive it and overlap with the rerun a peer starts after expiry. The guard runs in a
session of its own and reads a pipe from the node: ``beat`` after every successful
heartbeat, ``add PGID`` / ``del PGID`` as runs start and end. When no beat came for
``fence_after_s`` (the node is frozen or cut off) or the pipe closes (the node died), it
SIGKILLs every registered process group, before any peer may expire the session.

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


def guard(fd: int, fence_after_s: float) -> int:
    groups: set[int] = set()
    last_beat = time.monotonic()
    buffer = b""
    while True:
        left = fence_after_s - (time.monotonic() - last_beat)
        if left <= 0:
            # The node missed its fence deadline: it is frozen or cut off.
            _kill(groups)
            groups.clear()
            left = fence_after_s
        ready, _, _ = select.select([fd], [], [], min(left, 0.25))
        if not ready:
            continue
        data = os.read(fd, 4096)
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
            elif word == "add" and arg.isdigit():
                groups.add(int(arg))
            elif word == "del" and arg.isdigit():
                groups.discard(int(arg))
            elif word == "kill":
                _kill(groups)
                groups.clear()
            elif word == "exit":
                return 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return guard(sys.stdin.fileno(), float(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
