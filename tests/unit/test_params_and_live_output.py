"""Trigger parameters (validation, environment) and live output (a running shell run's
output so far, the service that writes it), without a database."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from quartzlite.errors import ValidationError
from quartzlite.executors import RunHandle, ShellRun, params_environment, start_shell
from quartzlite.models import Fired, JobSpec, Outcome, Prepared
from quartzlite.node.ownership import Execution
from quartzlite.node.services.output import LiveOutput
from quartzlite.node.shellwatch import ShellWatch
from quartzlite.storage.node import LiveTail
from quartzlite.validation import validate_params
from tests.cluster.harness import wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- validation ------------------------------------------------------------------------


def test_valid_params_come_back_as_they_are() -> None:
    params = {"who": "me", "n": 3, "ratio": 1.5, "dry_run": True, "_x": None, "s": "é" * 2048}
    assert validate_params(params) == params
    assert validate_params(None) == {}
    assert validate_params({}) == {}


@pytest.mark.parametrize(
    ("value", "field", "reason"),
    [
        ([1, 2], "params", "must be an object, not a list"),
        ("x=1", "params", "must be an object, not a string"),
        ({f"p{i}": i for i in range(33)}, "params", "at most 32 parameters, got 33"),
        ({"1abc": 1}, "params", "parameter name '1abc' must be a letter or '_'"),
        ({"a-b": 1}, "params", "parameter name 'a-b'"),
        ({"x" * 65: 1}, "params", "parameter name"),
        ({"who": "a", "WHO": "b"}, "params.WHO", "QUARTZLITE_PARAM_WHO"),
        ({"deep": {"a": 1}}, "params.deep", "must be a string, number, boolean or null, not an object"),
        ({"list": [1]}, "params.list", "not a list"),
        ({"nan": float("nan")}, "params.nan", "must be a finite number"),
        ({"big": "x" * 4097}, "params.big", "at most 4096 bytes in UTF-8, got 4097"),
        ({"wide": "é" * 2049}, "params.wide", "at most 4096 bytes in UTF-8, got 4098"),
        ({"nul": "a\x00b"}, "params.nul", "NUL"),
        ({"bad": "\ud800"}, "params.bad", "lone surrogate"),
        ({f"p{i}": "x" * 1000 for i in range(17)}, "params", "at most 16384 bytes of JSON"),
    ],
)
def test_invalid_params_name_the_field(value: Any, field: str, reason: str) -> None:
    with pytest.raises(ValidationError) as raised:
        validate_params(value)
    assert raised.value.field == field
    assert reason in raised.value.reason


def test_params_become_environment_variables_named_upper_case() -> None:
    assert params_environment({"who": "me", "n": 3, "ratio": 1.5, "dry_run": True,
                               "off": False, "none": None, "Mixed_Case": "x y"}) == {
        "QUARTZLITE_PARAM_WHO": "me", "QUARTZLITE_PARAM_N": "3",
        "QUARTZLITE_PARAM_RATIO": "1.5", "QUARTZLITE_PARAM_DRY_RUN": "true",
        "QUARTZLITE_PARAM_OFF": "false", "QUARTZLITE_PARAM_NONE": "",
        "QUARTZLITE_PARAM_MIXED_CASE": "x y",
    }
    assert params_environment(None) == {}


def execution(run_id: int, *, params: dict[str, Any] | None = None,
              command: str | None = "true") -> Execution:
    spec = JobSpec(name=f"j{run_id}", schedule="@every 1h", command=command,
                   callable=None if command else "json:dumps")
    prepared = Prepared(job_id=run_id, name=spec.name, fire_id=f"s:1:{run_id}", planned_at=T0,
                        slot_at=T0, attempt=1, spec=spec)
    return Execution(fired=Fired(prepared=prepared, run_id=run_id, fired_at=T0, params=params),
                     handle=RunHandle())


def test_a_shell_runs_environment_carries_its_params_beside_its_own_variables() -> None:
    env = execution(7, params={"who": "me"}).environment()
    assert env["QUARTZLITE_PARAM_WHO"] == "me"
    assert env["QUARTZLITE_RUN_ID"] == "7"
    assert not any(k.startswith("QUARTZLITE_PARAM_") for k in execution(8).environment())


# -- a running shell run's output so far ---------------------------------------------


def test_the_output_so_far_is_readable_from_another_thread_while_the_run_runs(tmp_path: Any) -> None:
    crashes: list[BaseException] = []
    watch = ShellWatch(crashes.append)
    watch.start()
    ended: list[Outcome] = []
    go_on = tmp_path / "go-on"
    handle = RunHandle(on_kill=watch.kick)
    run = start_shell(
        f"echo one; while [ ! -e {go_on} ]; do sleep 0.02; done; echo two; sleep 60",
        env={}, timeout_s=None, kill_grace_s=1.0, output_limit=1024, handle=handle)
    assert isinstance(run, ShellRun)
    try:
        assert run.output_since(0) is None, "nothing printed yet (the gate's byte is no output)"
        watch.watch(run, ended.append)
        first = wait_until(lambda: run.output_since(0), timeout=30, interval=0.01,
                           message="the first line")
        assert first == (4, "one\n")
        assert run.output_since(4) is None, "nothing new"
        go_on.touch()
        second = wait_until(lambda: run.output_since(4), timeout=30, interval=0.01,
                            message="the second line")
        assert second == (8, "one\ntwo\n")
        handle.kill("done")
        wait_until(lambda: ended, timeout=30, interval=0.01, message="the kill")
    finally:
        watch.stop()
        assert watch.join(10)
    assert not crashes
    assert ended[0].output == "one\ntwo\n"


def test_the_output_so_far_is_the_bounded_tail() -> None:
    watch = ShellWatch(lambda error: None)
    watch.start()
    ended: list[Outcome] = []
    handle = RunHandle(on_kill=watch.kick)
    run = start_shell("head -c 5000 /dev/zero | tr '\\0' a; sleep 60", env={}, timeout_s=None,
                      kill_grace_s=1.0, output_limit=1024, handle=handle)
    assert isinstance(run, ShellRun)
    try:
        watch.watch(run, ended.append)
        received, text = wait_until(
            lambda: (found := run.output_since(0)) and found[0] == 5000 and found,
            timeout=30, interval=0.01, message="all 5000 bytes")
        assert text == "[... 3976 earlier bytes dropped ...]\n" + "a" * 1024
        handle.kill("done")
        wait_until(lambda: ended, timeout=30, interval=0.01, message="the kill")
    finally:
        watch.stop()
        assert watch.join(10)


# -- the live output service -----------------------------------------------------------


class FakeShell:
    def __init__(self) -> None:
        self.received = 0
        self.text = ""

    def print(self, line: str) -> None:
        self.text += line
        self.received += len(line)

    def output_since(self, seen: int) -> tuple[int, str] | None:
        return None if seen == self.received else (self.received, self.text)


class FakeStore:
    def __init__(self) -> None:
        self.writes: list[list[LiveTail]] = []

    def write_output(self, tails: list[LiveTail]) -> None:
        self.writes.append(list(tails))


def test_the_service_writes_only_new_output_all_runs_in_one_write_and_nothing_when_fenced() -> None:
    store = FakeStore()
    node = SimpleNamespace(config=SimpleNamespace(live_output_interval_s=1.0),
                           on_crash=lambda service, error: None, fenced=threading.Event(),
                           store=store)
    service = LiveOutput(node)  # type: ignore[arg-type]
    assert service.run_once() == LiveOutput.IDLE_S, "no shell run: it sleeps"
    runs = [execution(i) for i in (1, 2, 3)]
    shells = [FakeShell() for _ in runs]
    for e, s in zip(runs, shells, strict=True):
        e.shell = s  # type: ignore[assignment]
        service.track(e)

    assert service.run_once() is None
    assert store.writes == [], "nothing printed: nothing sent"

    shells[0].print("a\n")
    shells[2].print("c\n")
    service.run_once()
    assert store.writes == [[LiveTail(run_id=1, fire_id="s:1:1", output="a\n"),
                             LiveTail(run_id=3, fire_id="s:1:3", output="c\n")]]

    service.run_once()
    assert len(store.writes) == 1, "nothing new: nothing sent"

    shells[0].print("b\n")
    runs[2].done.set()  # ended: its final output is the result's
    shells[2].print("late\n")
    service.run_once()
    assert store.writes[-1] == [LiveTail(run_id=1, fire_id="s:1:1", output="a\nb\n")]

    shells[1].print("x\n")
    node.fenced.set()
    service.run_once()
    assert len(store.writes) == 2, "a fenced node writes no output"
