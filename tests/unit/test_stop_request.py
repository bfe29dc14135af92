"""A node's stop request is made by signal handlers: it must be safe at any moment.

A handler runs on the main thread between two bytecodes. The node's old stop request
set a ``threading.Event`` there; when the signal landed while the main thread was inside
``Event.wait`` holding the event's lock, the handler blocked on that lock forever: the
node went on running jobs, deaf to SIGTERM (seen once in the fault suite, after a
database restart). Here a thread pesters a process with signals while its main thread
waits in the tightest loop; the process must finish, every time.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.cluster.harness import ROOT

SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    from quartzlite.node.node import StopRequest

    stop = StopRequest()
    signal.signal(signal.SIGUSR1, lambda signum, frame: stop.request())
    done = threading.Event()

    def pester():
        while not done.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0001)

    threading.Thread(target=pester, daemon=True).start()
    end = time.monotonic() + 2
    while time.monotonic() < end:
        stop.wait(float(sys.argv[1]))
    done.set()
    print(stop.level)
""")


@pytest.mark.parametrize("timeout_s", [0.0, 0.0005])
def test_signals_at_any_moment_never_deadlock_the_main_thread(timeout_s: float) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, repr(timeout_s)], cwd=ROOT, capture_output=True,
        text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.split()[-1]) > 100, "the signals were handled"


def test_a_wake_from_another_thread_ends_the_wait_at_once() -> None:
    import threading
    import time

    from quartzlite.node.node import StopRequest

    stop = StopRequest()
    threading.Timer(0.05, stop.wake).start()
    began = time.monotonic()
    stop.wait(600)
    assert time.monotonic() - began < 300, "woken, not timed out"
    assert stop.level == 0, "a wake is not a stop request"
