"""The guard process on its own: it answers beats, says it kills before it kills, and
the node's end (GuardLink) reports a guard that died or was told nothing for too long."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from quartzlite.node.guardlink import GuardLink


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the guard said nothing"
    return proc.stdout.readline().decode().strip()


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_guard_answers_beats_and_reports_a_kill_before_it_kills() -> None:
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    guard = subprocess.Popen([sys.executable, "-m", "quartzlite.node.guard", "0.5"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert guard.stdin is not None
        guard.stdin.write(f"add {victim.pid}\nbeat {time.monotonic()!r}\n".encode())
        guard.stdin.flush()
        assert read_line(guard, 10) == "ok"
        # No more beats: past fence_after the guard reports, then kills the group.
        assert read_line(guard, 10) == "killed 1"
        assert victim.wait(10) == -signal.SIGKILL
    finally:
        victim.kill()
        guard.kill()
        guard.wait()
        victim.wait()


def test_guard_link_reports_a_dead_guard_and_a_guard_kill() -> None:
    link = GuardLink(fence_after_s=60)
    try:
        link.beat(time.monotonic())
        deadline = time.monotonic() + 10
        while link.problem() is None and link._unanswered_since is not None:
            assert time.monotonic() < deadline, "no answer to the beat"
            time.sleep(0.01)
        assert link.problem() is None
        os.kill(link.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (problem := link.problem()) is None:
            assert time.monotonic() < deadline, "the dead guard went unnoticed"
            time.sleep(0.01)
        assert "guard process died" in problem
        assert not alive(link.proc.pid), "reaped, not a zombie"
    finally:
        link.close()


def test_guard_link_reports_a_guard_that_stops_answering() -> None:
    link = GuardLink(fence_after_s=0.3)
    try:
        os.kill(link.proc.pid, signal.SIGSTOP)
        link.beat(time.monotonic())
        deadline = time.monotonic() + 10
        while (problem := link.problem()) is None:
            assert time.monotonic() < deadline, "a frozen guard went unnoticed"
            time.sleep(0.01)
        assert "has not answered" in problem
    finally:
        os.kill(link.proc.pid, signal.SIGCONT)
        link.close()


def test_guard_kills_the_held_node_process_on_a_missed_deadline_and_not_after_release() -> None:
    """Python runs are threads: only the node's death ends them. While one runs, the
    node is held, and a missed deadline kills the node process itself."""
    held = subprocess.Popen(["sleep", "60"])
    released = subprocess.Popen(["sleep", "60"])
    guard = subprocess.Popen([sys.executable, "-m", "quartzlite.node.guard", "0.5"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert guard.stdin is not None
        guard.stdin.write(f"hold {released.pid}\nrelease\nhold {held.pid}\n".encode())
        guard.stdin.write(f"beat {time.monotonic()!r}\n".encode())
        guard.stdin.flush()
        assert read_line(guard, 10) == "ok"
        assert held.wait(10) == -signal.SIGKILL
        assert released.poll() is None
    finally:
        for proc in (held, released, guard):
            proc.kill()
            proc.wait()
