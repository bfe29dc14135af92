"""A job's max_runs, end_at and jitter end to end: jobs created through the HTTP API, a
real ``quartzlite node`` process (started through the CLI) runs them until they are
finished. Waits on conditions with deadlines; nothing sleeps and then asserts."""

from __future__ import annotations

import json
import signal
from datetime import UTC, timedelta

import pytest
from click.testing import CliRunner

from quartzlite.api import create_app
from quartzlite.cli import main
from quartzlite.client import SchedulerClient
from quartzlite.schedule import jitter_offset
from tests.cluster.harness import Db, nodes, wait_until

pytestmark = pytest.mark.cluster


def test_max_runs_and_end_at_stop_an_every_second_job_which_then_shows_finished(
    db_url: str, client: SchedulerClient
) -> None:
    """``@every 1s`` with max_runs 3 runs exactly three slots; ``@every 1s`` with end_at
    3.5 s ahead runs its slots up to end_at (three) and none after; ``@every 1s`` with
    jitter 0.8 s and max_runs 3 runs each slot at its stable offset. All end idle with
    no next fire: finished (the API's and the CLI's JSON say so, ``job list`` shows it)."""
    db = Db(db_url)
    _, secret = client.create_token("e2e", "admin")
    http = create_app(client).test_client()
    auth = {"Authorization": f"Bearer {secret}"}
    with nodes(db_url) as start:
        node = start("n")
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="the node's session")
        now = client.now()
        end = now + timedelta(seconds=3.5)
        for body in (
            {"name": "thrice", "schedule": "@every 1s", "command": "true", "max_runs": 3},
            {"name": "until", "schedule": "@every 1s", "command": "true",
             "end_at": end.isoformat()},
            {"name": "jittery", "schedule": "@every 1s", "command": "true", "max_runs": 3,
             "jitter_s": 0.8},
        ):
            created = http.post("/api/v1/jobs", headers=auth, json=body)
            assert created.status_code == 201, created.get_json()
        for name in ("thrice", "until", "jittery"):
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
    for name, runs_done in (("thrice", 3), ("until", 3), ("jittery", 3)):
        job = client.get_job(name)
        assert (job.state.value, job.next_fire_at, job.runs_done, job.finished) == (
            "idle", None, runs_done, True), name
        shown_api = http.get(f"/api/v1/jobs/{name}", headers=auth).get_json()
        assert (shown_api["finished"], shown_api["runs_done"]) == (True, runs_done), shown_api
    # Each jittered slot ran at the slot plus its stable offset (what every node computes).
    jittered = db.rows("SELECT slot_at, planned_at, status FROM ql_runs "
                       "WHERE job_name = 'jittery' ORDER BY slot_at")
    assert [r.status for r in jittered] == ["succeeded"] * 3, jittered
    for r in jittered:
        slot = r.slot_at.replace(tzinfo=UTC)
        assert r.planned_at - r.slot_at == jitter_offset("jittery", slot, 0.8), r
    assert len({r.planned_at - r.slot_at for r in jittered}) > 1, "the same offset thrice"

    cli = CliRunner()
    shown = cli.invoke(main, ["--database-url", db_url, "job", "show", "thrice", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert (data["finished"], data["runs_done"], data["upcoming"]) == (True, 3, [])
    listed = cli.invoke(main, ["--database-url", db_url, "job", "list"])
    assert listed.exit_code == 0, listed.output
    states = {line.split()[0]: line.split()[4] for line in listed.stdout.splitlines()[1:]}
    assert states == {"thrice": "finished", "until": "finished", "jittery": "finished"}
    db.close()
