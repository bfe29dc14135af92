"""Executors and the guard, without a database: exactly one outcome per run."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quartzlite.enums import RunStatus
from quartzlite.executors import (
    RunContext,
    RunHandle,
    _Tail,
    current_run,
    discard,
    job_environment,
    run_callable,
    run_shell,
    spawn_shell,
)
from quartzlite.models import Outcome
from tests.cluster.harness import wait_until

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


def test_shell_works_with_descriptors_above_1023() -> None:
    # A node running hundreds of jobs at once holds more than select()'s 1024 descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held: list[int] = []
    try:
        base = os.open(os.devnull, os.O_RDONLY)
        held.append(base)
        while held[-1] < 1100:
            held.append(os.dup(base))
        out = shell("echo hi")
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (out.status, out.output) == (RunStatus.SUCCEEDED, "hi\n")


def test_a_finished_run_lets_go_of_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    handle = RunHandle()
    assert shell("true", handle=handle).status is RunStatus.SUCCEEDED
    assert handle.pgid is None
    signalled: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: signalled.append((pgid, sig)))
    handle.kill("fenced", force=True)  # e.g. a fence after the run ended
    assert signalled == []


def test_a_forced_kill_signals_the_running_group(monkeypatch: pytest.MonkeyPatch) -> None:
    signalled: list[tuple[int, int]] = []
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        signalled.append((pgid, sig))
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    seen: list[int] = []
    handle = RunHandle(on_group=lambda pgid, started: seen.append(pgid))
    threading.Timer(0.2, handle.kill, args=("fenced",), kwargs={"force": True}).start()
    out = shell("sleep 60", handle=handle)
    assert out.status is RunStatus.KILLED
    assert (seen[0], signal.SIGKILL) in signalled
    assert handle.pgid is None


def test_shell_jobs_do_not_see_the_node_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUARTZLITE_DATABASE_URL", "mysql+pymysql://u:secret@db/q")
    monkeypatch.setenv("QUARTZLITE_API_TOKEN", "tok-secret")
    monkeypatch.setenv("SOME_OTHER_VARIABLE", "kept")
    out = run_shell("env", env={"QUARTZLITE_JOB": "report"}, timeout_s=None, kill_grace_s=1.0,
                    output_limit=1_000_000, handle=RunHandle())
    assert out.status is RunStatus.SUCCEEDED
    lines = out.output.splitlines()
    assert "QUARTZLITE_JOB=report" in lines
    assert "SOME_OTHER_VARIABLE=kept" in lines
    assert "secret" not in out.output
    assert "QUARTZLITE_DATABASE_URL" not in out.output
    assert job_environment({"QUARTZLITE_RUN_ID": "7"})["QUARTZLITE_RUN_ID"] == "7"
    assert not any(k.startswith("QUARTZLITE_") for k in job_environment({}))


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


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_a_command_waits_until_its_group_is_registered(tmp_path: Path) -> None:
    """bash runs nothing before the node has told its guard about the process group: a
    node killed in between leaves no orphan running the job unguarded (the soak found
    such orphans, $PPID 1, overlapping with the peer's rerun)."""
    marker = tmp_path / "ran"
    seen: dict[str, object] = {}

    def on_group(pgid: int, started: bool) -> None:
        if not started:
            return
        deadline = time.monotonic() + 10
        while _state(pgid) not in ("S", "Z", "gone") and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["state"] = _state(pgid)
        seen["ran_before_registration"] = marker.exists()

    out = run_shell(f"echo yes > {marker}", env={}, timeout_s=None, kill_grace_s=1.0,
                    output_limit=1000, handle=RunHandle(on_group=on_group))
    assert out.status is RunStatus.SUCCEEDED, out
    assert seen == {"state": "S", "ran_before_registration": False}
    assert marker.read_text() == "yes\n"


def test_a_command_killed_before_its_go_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    handle = RunHandle()
    handle.on_group = lambda pgid, started: started and handle.kill("fenced", force=True)
    out = run_shell(f"echo yes > {marker}", env={}, timeout_s=None, kill_grace_s=1.0,
                    output_limit=1000, handle=handle)
    assert out.status is RunStatus.KILLED
    assert not marker.exists()


def test_shell_jobs_get_default_sigpipe_and_only_their_own_descriptors() -> None:
    # Python ignores SIGPIPE; a job must not inherit that (`yes | head` would end on an
    # error instead of the signal). Bit 13-1 of SigIgn is SIGPIPE.
    out = shell("grep SigIgn /proc/self/status; ls /proc/self/fd")
    assert out.status is RunStatus.SUCCEEDED, out
    ignored = int(out.output.splitlines()[0].split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))
    # stdin, stdout, stderr and ls's own directory descriptor: nothing of the node's.
    assert sorted(int(fd) for fd in out.output.splitlines()[1:]) == [0, 1, 2, 3]


def test_shell_works_for_a_process_with_its_standard_descriptors_closed() -> None:
    # A daemonised node may run with stdin and stdout closed: its pipes then get numbers
    # 0-2, and the gate's pipe must not be replaced by the child's stdin before bash reads
    # it (before the fix every shell run of such a node failed with exit 125).
    script = (
        "import os, sys\n"
        "from quartzlite.executors import RunHandle, run_shell\n"
        "err = os.dup(2)\n"
        "os.close(0); os.close(1)\n"
        "out = run_shell('echo hi; cat; echo done', env={}, timeout_s=10, kill_grace_s=1,\n"
        "                output_limit=1000, handle=RunHandle())\n"
        "os.write(err, f'{out.status.value}|{out.output!r}'.encode())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                            check=False)
    assert result.stderr.decode() == "succeeded|'hi\\ndone\\n'"


def test_a_bash_started_ahead_runs_nothing_until_its_gate_opens(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spawned = spawn_shell(f'echo "$WHO" > {marker}', {"WHO": "ahead"})
    try:
        # Waiting at its gate: asleep in read, its command not run.
        wait_until(lambda: _state(spawned.proc.pid) == "S", timeout=10, interval=0.01,
                   message="bash asleep at its gate")
        assert not marker.exists()
    except BaseException:
        discard(spawned)
        raise
    out = run_shell("ignored: the bash started ahead runs its own command", env={},
                    timeout_s=10, kill_grace_s=1.0, output_limit=1000, handle=RunHandle(),
                    spawned=spawned)
    assert out.status is RunStatus.SUCCEEDED, out
    assert marker.read_text() == "ahead\n"


def test_a_discarded_bash_never_runs_its_command_and_is_reaped(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spawned = spawn_shell(f"touch {marker}", {})
    pid = spawned.proc.pid
    discard(spawned)
    assert spawned.proc.returncode is not None, "reaped"
    assert _state(pid) == "gone"
    assert not marker.exists()


def test_a_bash_that_died_at_its_gate_is_replaced_at_the_start(tmp_path: Path) -> None:
    """Its command never ran, so the run is not failed for it: a new bash runs it."""
    marker = tmp_path / "ran"
    spawned = spawn_shell(f"echo once >> {marker}", {})
    os.kill(spawned.proc.pid, signal.SIGKILL)
    assert gone(spawned.proc.pid)
    out = run_shell(f"echo once >> {marker}", env={}, timeout_s=10, kill_grace_s=1.0,
                    output_limit=1000, handle=RunHandle(), spawned=spawned)
    assert out.status is RunStatus.SUCCEEDED, out
    assert marker.read_text() == "once\n"
    assert spawned.proc.returncode == -signal.SIGKILL, "the dead one was reaped"


def test_only_its_own_key_opens_a_gate(tmp_path: Path) -> None:
    """A stray line reaching a waiting bash (none should) makes it exit 124, its command
    unrun; the run then starts a new bash, and the command runs once."""
    marker = tmp_path / "ran"
    spawned = spawn_shell(f"echo once >> {marker}", {})
    os.write(spawned.go_write, b"go\n")
    assert spawned.proc.wait(10) == 124
    assert not marker.exists()
    out = run_shell(f"echo once >> {marker}", env={}, timeout_s=10, kill_grace_s=1.0,
                    output_limit=1000, handle=RunHandle(), spawned=spawned)
    assert out.status is RunStatus.SUCCEEDED, out
    assert marker.read_text() == "once\n"


def test_a_gate_is_opened_or_discarded_once(tmp_path: Path) -> None:
    spawned = spawn_shell("true", {})
    discard(spawned)
    with pytest.raises(RuntimeError, match="used twice"):
        discard(spawned)
    with pytest.raises(RuntimeError, match="used twice"):
        run_shell("true", env={}, timeout_s=10, kill_grace_s=1.0, output_limit=1000,
                  handle=RunHandle(), spawned=spawned)


def test_a_run_killed_before_its_bash_passed_the_gate_never_began(tmp_path: Path) -> None:
    """bash acknowledges its gate before the command: a kill that lands before (here bash
    is stopped, so it cannot read its gate) ends a run that claims no start."""
    marker = tmp_path / "ran"
    spawned = spawn_shell(f"touch {marker}", {})
    os.kill(spawned.proc.pid, signal.SIGSTOP)
    handle = RunHandle()
    threading.Timer(0.2, lambda: handle.kill("killed on request", force=True)).start()
    out = run_shell("ignored", env={}, timeout_s=10, kill_grace_s=1.0, output_limit=1000,
                    handle=handle, spawned=spawned)
    assert out.status is RunStatus.KILLED, out
    assert not out.began
    assert out.error == "killed on request (before it started)"
    assert not marker.exists()
    began = run_shell("printf 'a\\001b'", env={}, timeout_s=10, kill_grace_s=1.0,
                      output_limit=1000, handle=RunHandle())
    assert began.began
    assert began.output == "a\x01b", "only the gate's byte is taken from the output"


def test_a_process_holding_the_output_open_does_not_hold_the_run() -> None:
    """A child that left bash's group (setsid) and keeps stdout open: the run ends once
    bash has, after a short drain, with the output read so far."""
    began = time.monotonic()
    out = shell("echo before; setsid sleep 8 & echo after")
    assert out.status is RunStatus.SUCCEEDED, out
    assert out.output == "before\nafter\n"
    assert time.monotonic() - began < 6, "did not wait for the escaped sleep"
