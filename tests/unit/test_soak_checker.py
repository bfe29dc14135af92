"""The soak's checker on hand-made records: each rule flags what it must and lets
through what the design allows."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.soak import checker
from tests.soak.checker import Impairments, Result, RunRow, check_logs, parse_records

SLOT = "2026-01-01T00:00:01+00:00"
KEY = "2026-01-01T00:00:01.000000"


def start(run: int, pid: int, t: float, job: str = "j", attempt: int = 1, node: int = 0) -> str:
    return f"start {job} {SLOT} {attempt} {run} {pid} {node or pid} {t}"


def end(run: int, pid: int, t: float, job: str = "j", attempt: int = 1, node: int = 0) -> str:
    return f"end {job} {SLOT} {attempt} {run} {pid} {node or pid} {t}"


def row(run: int, status: str, *, started: bool = True, exit_code: int | None = None,
        ended: float | None = None, attempt: int = 1, job: str = "j") -> RunRow:
    return RunRow(run, job, KEY, attempt, status, started, exit_code, None, ended)


def check(lines: list[str], rows: list[RunRow], impairments: Impairments | None = None) -> Result:
    result = Result()
    checker.check_executions(result, parse_records(lines), {r.id: r for r in rows},
                             impairments or Impairments())
    return result


def test_a_finished_run_executed_again_is_a_duplicate_even_at_a_new_planned_instant() -> None:
    # The bug of issue 10: the peer reran a run the fenced node had finished.
    result = check([start(1, 10, 1.0), end(1, 10, 2.0), start(2, 20, 9.0, attempt=2),
                    end(2, 20, 9.5, attempt=2)],
                   [row(1, "abandoned", ended=6.0), row(2, "succeeded", attempt=2)])
    assert result.counts["duplicates"] == 1
    assert "finished" in result.details["duplicates"][0]


def test_a_rerun_after_a_cut_run_a_retry_and_a_silent_node_are_allowed() -> None:
    impairments = Impairments()
    impairments.add(30, 2.5)  # node 30 SIGKILLed right after the body ended
    lines = [
        start(1, 10, 1.0), "gone 1 10 3.0", start(2, 20, 8.0, attempt=2),  # cut short
        end(2, 20, 8.5, attempt=2),
        start(3, 30, 1.0, job="k"), end(3, 30, 2.0, job="k"),  # finished, node died
        start(4, 20, 8.0, job="k", attempt=2), end(4, 20, 8.5, job="k", attempt=2),
        start(5, 40, 1.0, job="r"), end(5, 40, 1.5, job="r"),  # failed: retried
        start(6, 40, 2.0, job="r", attempt=2), end(6, 40, 2.5, job="r", attempt=2),
    ]
    rows = [row(1, "abandoned", ended=6.0), row(2, "succeeded", attempt=2),
            row(3, "abandoned", ended=6.5, job="k"), row(4, "succeeded", attempt=2, job="k"),
            row(5, "failed", job="r", exit_code=1), row(6, "succeeded", job="r", attempt=2)]
    result = check(lines, rows, impairments)
    assert result.ok, result.as_dict()
    assert result.info["reruns_cut_short"] == 1
    assert result.info["reruns_node_silent_until_expiry"] == 1
    assert result.info["retries"] == 1


def test_a_node_healthy_long_enough_to_record_gets_no_excuse() -> None:
    impairments = Impairments()
    impairments.add("db", 2.2, 4.0)  # down, then 2 s healthy before the expiry at 6.0
    result = check([start(1, 10, 1.0), end(1, 10, 2.0), start(2, 20, 8.0, attempt=2)],
                   [row(1, "abandoned", ended=6.0), row(2, "running", attempt=2)], impairments)
    assert result.counts["duplicates"] == 1
    impairments.add(("place", 0), 5.0, 6.0)  # ...but it was cut off at the end
    impairments.place[10] = 0
    result = check([start(1, 10, 1.0), end(1, 10, 2.0), start(2, 20, 8.0, attempt=2)],
                   [row(1, "abandoned", ended=6.0), row(2, "running", attempt=2)], impairments)
    assert result.ok


def test_the_same_run_executed_twice_and_overlaps() -> None:
    result = check([start(1, 10, 1.0), start(1, 10, 1.1), start(2, 20, 1.2, attempt=2)],
                   [row(1, "abandoned"), row(2, "succeeded", attempt=2)])
    assert result.counts["duplicates"] >= 1
    assert result.counts["overlaps"] == 2  # run 1 twice at once, then run 2 beside it


def test_instant_bodies_one_after_another_do_not_overlap() -> None:
    result = check([start(1, 10, 1.0), end(1, 10, 1.0), start(2, 10, 2.0, attempt=2),
                    end(2, 10, 2.0, attempt=2)],
                   [row(1, "failed", exit_code=1), row(2, "succeeded", attempt=2)])
    assert result.counts["overlaps"] == 0


def test_a_gone_execution_ends_its_overlap_window() -> None:
    result = check([start(1, 10, 1.0), "gone 1 10 2.0", start(2, 20, 5.0, attempt=2)],
                   [row(1, "abandoned"), row(2, "succeeded", attempt=2)])
    assert result.counts["overlaps"] == 0
    # Seen gone late (a loaded machine), but its node recorded it killed before the next.
    result = check([start(1, 10, 1.0), start(2, 10, 5.0, attempt=2), "gone 1 10 5.1"],
                   [row(1, "killed", exit_code=-15, ended=4.0), row(2, "succeeded", attempt=2)])
    assert result.counts["overlaps"] == 0
    result = check([start(1, 10, 1.0), start(2, 10, 5.0, attempt=2), "gone 1 10 5.1"],
                   [row(1, "abandoned", ended=6.0), row(2, "succeeded", attempt=2)])
    assert result.counts["overlaps"] == 1


def test_false_starts() -> None:
    result = check([], [row(1, "abandoned", started=True), row(2, "abandoned", started=False)])
    assert result.counts["false_starts"] == 1


def test_kills_recorded_as_failures() -> None:
    result = Result()
    rows = {1: row(1, "failed", exit_code=-9), 2: row(2, "failed", exit_code=1, job="r"),
            3: row(3, "failed", exit_code=1, job="r", attempt=2), 4: row(4, "killed"),
            5: row(5, "killed", job="kill-0")}
    checker.check_outcomes(result, rows, fail_below={"r": 1}, killable={"kill-0"})
    assert result.counts["kills_as_failures"] == 3  # 1 (signal), 3 (not on purpose), 4


def test_unaccounted_slots() -> None:
    result = Result()
    rows = {1: row(1, "succeeded"), 2: RunRow(2, "j", "2026-01-01T00:00:02.000000", 1,
                                              "missed", False)}
    checker.check_accounted(result, rows, jobs=["j"], start=datetime(2026, 1, 1, tzinfo=UTC),
                            end=datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC))
    assert result.info["slots_checked"] == 4
    assert result.counts["unaccounted"] == 2  # 00:00:00 and 00:00:03


def test_healthy_tail() -> None:
    imp = Impairments()
    imp.add(1, 2.0, 3.0)
    assert imp.healthy_tail(1, 0.0, 6.0) == 3.0
    assert imp.healthy_tail(1, 0.0, 2.5) == 0.0
    assert imp.healthy_tail(1, 4.0, 6.0) == 2.0


def test_longest_healthy() -> None:
    imp = Impairments()
    imp.add(1, 2.0, 3.0)
    imp.add("db", 2.5, 5.0)
    assert imp.longest_healthy(1, 0.0, 6.0) == 2.0
    assert imp.longest_healthy(1, 2.1, 5.5) == 0.5
    imp.add(1, 5.2)  # dead from 5.2 on
    assert abs(imp.longest_healthy(1, 2.1, 9.0) - 0.2) < 1e-9


def test_no_excuse_is_needed_past_the_sessions_expiry() -> None:
    """A node need not record after its session became expirable: the healthy stretch
    counts only up to its last heartbeat + session_timeout."""
    impairments = Impairments()
    impairments.add("db", 2.2, 5.0)  # back at 5.0; the peer expired the session at 7.0
    rows = [RunRow(1, "j", KEY, 1, "abandoned", True, None, None, 7.0, "s1"),
            row(2, "running", attempt=2)]
    lines = [start(1, 10, 1.0), end(1, 10, 2.0), start(2, 20, 8.0, attempt=2)]
    assert check(lines, rows, impairments).counts["duplicates"] == 1
    impairments.expiry["s1"] = 5.5  # last beat at 1.5 + 4 s: only 0.5 s to record
    assert check(lines, rows, impairments).ok


def test_a_node_reporting_a_bug_fails_the_soak() -> None:
    result = Result()
    check_logs(result, {"a.log": "fine\n2026 ERROR BUG: run 7 was about to start twice\n",
                        "b.log": "all fine\n"})
    assert result.counts["bugs"] == 1
    assert not result.ok
    assert "a.log" in result.details["bugs"][0]
