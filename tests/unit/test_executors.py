"""Executors and the guard, without a database: exactly one outcome per run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from quartzlite.enums import RunStatus
from quartzlite.executors import RunContext, RunHandle, _Tail, current_run, run_callable, run_shell
from quartzlite.models import Outcome

CONTEXT = RunContext(
    job="j", fire_id="f", run_id=1, planned_at=datetime(2026, 1, 1, tzinfo=UTC),
    slot_at=datetime(2026, 1, 1, tzinfo=UTC), attempt=1,
)


def shell(
    command: str, *, timeout_s: float | None = None, output_limit: int = 1024,
    handle: RunHandle | None = None,
) -> Outcome:
    return run_shell(command, env={"X": "1"}, timeout_s=timeout_s, kill_grace_s=1.0,
                     output_limit=output_limit, handle=handle or RunHandle())


def gone(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` has exited (a SIGKILL is delivered asynchronously: allow it a
    moment, with a deadline)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def test_tail_keeps_the_last_bytes() -> None:
    tail = _Tail(10)
    for chunk in (b"0123456789", b"abcdef"):
        tail.add(chunk)
    assert tail.text() == "[... 6 earlier bytes dropped ...]\n6789abcdef"


def test_shell_success_failure_and_environment() -> None:
    ok = shell("echo $X; echo err >&2")
    assert (ok.status, ok.exit_code, ok.output) == (RunStatus.SUCCEEDED, 0, "1\nerr\n")
    bad = shell("exit 3")
    assert (bad.status, bad.exit_code, bad.error) == (RunStatus.FAILED, 3, "exit code 3")


def test_shell_output_is_bounded() -> None:
    out = shell("head -c 5000 /dev/zero | tr '\\0' a", output_limit=1024)
    assert out.output.endswith("a" * 1024)
    assert "3976 earlier bytes dropped" in out.output


def test_shell_timeout_kills_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    out = shell(f"sleep 60 & echo $! > {pid_file}; wait", timeout_s=0.3)
    assert out.status is RunStatus.TIMED_OUT
    assert gone(int(pid_file.read_text()))


def test_shell_kill_reports_the_reason_and_tells_the_group_registry() -> None:
    seen: list[tuple[int, bool]] = []
    handle = RunHandle(on_group=lambda pgid, started: seen.append((pgid, started)))
    threading.Timer(0.2, handle.kill, args=("asked",)).start()
    out = shell("sleep 60", handle=handle)
    assert (out.status, out.error) == (RunStatus.KILLED, "asked")
    assert [started for _, started in seen] == [True, False]


def test_callable_success_error_and_context() -> None:
    ok = run_callable("os.path:join", {"a": "x", "b": "y"}, context=CONTEXT, output_limit=100)
    assert ok.status is RunStatus.FAILED  # join() takes positional arguments only
    assert "TypeError" in (ok.error or "")
    missing = run_callable("no_such_module_xyz:f", {}, context=CONTEXT, output_limit=100)
    assert missing.status is RunStatus.FAILED
    assert "ModuleNotFoundError" in (missing.error or "")
    found = run_callable("tests.unit.test_executors:whoami", {}, context=CONTEXT, output_limit=100)
    assert (found.status, found.output) == (RunStatus.SUCCEEDED, "'j'")
    assert current_run() is None


def test_a_run_is_claimed_once() -> None:
    handle = RunHandle()
    assert handle.claim()
    assert not handle.claim()


def whoami() -> str:
    run = current_run()
    assert run is not None
    return run.job


def test_guard_kills_registered_groups_when_the_node_goes_away() -> None:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    guard = subprocess.Popen([sys.executable, "-m", "quartzlite.node.guard", "30"],
                             stdin=subprocess.PIPE, start_new_session=True)
    assert guard.stdin is not None
    guard.stdin.write(f"beat\nadd {child.pid}\n".encode())
    guard.stdin.flush()
    guard.stdin.close()  # the node died
    assert guard.wait(10) == 0
    assert child.wait(10) == -9
