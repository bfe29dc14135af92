"""The node's shell watch: one thread sees many shell runs to their ends."""

from __future__ import annotations

import threading

from quartzlite.enums import RunStatus
from quartzlite.executors import RunHandle, ShellRun, start_shell
from quartzlite.models import Outcome
from quartzlite.node.shellwatch import ShellWatch
from tests.cluster.harness import wait_until


def test_one_thread_sees_many_runs_to_their_ends_with_kills_and_timeouts() -> None:
    crashes: list[BaseException] = []
    watch = ShellWatch(crashes.append)
    watch.start()
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()
    groups: list[tuple[int, bool]] = []

    def begin(name: str, command: str, timeout_s: float | None = None) -> RunHandle:
        handle = RunHandle(on_group=lambda pgid, up: groups.append((pgid, up)),
                           on_kill=watch.kick)
        run = start_shell(command, env={"NAME": name}, timeout_s=timeout_s, kill_grace_s=1.0,
                          output_limit=1000, handle=handle)
        assert isinstance(run, ShellRun)

        def ended(outcome: Outcome) -> None:
            with lock:
                outcomes[name] = outcome

        watch.watch(run, ended)
        return handle

    try:
        for i in range(30):
            begin(f"short{i}", 'echo "$NAME"')
        begin("fails", "echo oops; exit 3")
        killed = begin("killed", "sleep 60")
        begin("timed-out", "sleep 60", timeout_s=0.3)
        begin("chatty", "for i in $(seq 200); do echo line $i; done")
        wait_until(lambda: len(outcomes) == 33, timeout=30, interval=0.01,
                   message="the runs that end by themselves")
        assert "killed" not in outcomes
        killed.kill("asked")
        wait_until(lambda: "killed" in outcomes, timeout=30, interval=0.01, message="the kill")
    finally:
        watch.stop()
        assert watch.join(10)
    assert not crashes
    for i in range(30):
        assert outcomes[f"short{i}"] == Outcome(status=RunStatus.SUCCEEDED, exit_code=0,
                                                output=f"short{i}\n")
    assert (outcomes["fails"].status, outcomes["fails"].exit_code) == (RunStatus.FAILED, 3)
    assert outcomes["fails"].output == "oops\n"
    assert (outcomes["killed"].status, outcomes["killed"].error) == (RunStatus.KILLED, "asked")
    assert outcomes["timed-out"].status is RunStatus.TIMED_OUT
    assert outcomes["chatty"].output.splitlines()[-1] == "line 200"
    assert watch.watching == 0
    # Every group was registered, and let go of once its run ended.
    assert sorted(up for _, up in groups) == [False] * 34 + [True] * 34
