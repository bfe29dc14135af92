"""A job's max_runs and end_at end to end: a real ``quartzlite node`` process (started
through the CLI) runs every-second jobs until they are finished. Waits on conditions
with deadlines; nothing sleeps and then asserts."""

from __future__ import annotations

import json
import signal
from datetime import timedelta

import pytest
from click.testing import CliRunner

from quartzlite.cli import main
from quartzlite.client import SchedulerClient
from tests.cluster.harness import Db, nodes, wait_until

pytestmark = pytest.mark.cluster


def test_max_runs_and_end_at_stop_an_every_second_job_which_then_shows_finished(
    db_url: str, client: SchedulerClient
) -> None:
    """``@every 1s`` with max_runs 3 runs exactly three slots; ``@every 1s`` with end_at
    3.5 s ahead runs its slots up to end_at (three) and none after. Both end idle with
    no next fire: finished (the API's and the CLI's JSON say so, ``job list`` shows it)."""
    db = Db(db_url)
    with nodes(db_url) as start:
        node = start("n")
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="the node's session")
        now = client.now()
        end = now + timedelta(seconds=3.5)
        client.add_jobs([
            {"name": "thrice", "schedule": "@every 1s", "command": "true", "max_runs": 3},
            {"name": "until", "schedule": "@every 1s", "command": "true",
             "end_at": end.isoformat()},
        ])
        for name in ("thrice", "until"):
            wait_until(lambda name=name: client.get_job(name).finished, timeout=20, interval=0.2,
                       message=f"{name} finished")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0, node.log()[-3000:]

    runs = {
        name: db.rows("SELECT slot_at, status FROM ql_runs WHERE job_name = :name ORDER BY slot_at",
                      name=name)
        for name in ("thrice", "until")
    }
    assert [r.status for r in runs["thrice"]] == ["succeeded"] * 3, runs["thrice"]
    assert [r.status for r in runs["until"]] == ["succeeded"] * 3, runs["until"]
    naive_end = end.replace(tzinfo=None)
    assert all(now.replace(tzinfo=None) < r.slot_at <= naive_end for r in runs["until"]), (
        runs["until"], end)
    for name, runs_done in (("thrice", 3), ("until", 3)):
        job = client.get_job(name)
        assert (job.state.value, job.next_fire_at, job.runs_done, job.finished) == (
            "idle", None, runs_done, True), name

    cli = CliRunner()
    shown = cli.invoke(main, ["--database-url", db_url, "job", "show", "thrice", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert (data["finished"], data["runs_done"], data["upcoming"]) == (True, 3, [])
    listed = cli.invoke(main, ["--database-url", db_url, "job", "list"])
    assert listed.exit_code == 0, listed.output
    states = {line.split()[0]: line.split()[4] for line in listed.stdout.splitlines()[1:]}
    assert states == {"thrice": "finished", "until": "finished"}
    db.close()
