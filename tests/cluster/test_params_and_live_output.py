"""Trigger parameters and live output with real node processes: params reach a callable's
kwargs and a shell command's environment, are recorded on every attempt of the slot and
shown by the API and the CLI; a running shell run's output is readable through the API
while it runs, and a node killed mid-run leaves the run abandoned with that output kept."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quartzlite.api import create_app
from quartzlite.cli import main
from quartzlite.client import SchedulerClient
from tests.api.support import Api
from tests.cluster.harness import Db, nodes, wait_until

pytestmark = pytest.mark.cluster

#: Far in the future: the jobs run only when triggered.
NEVER = "0 0 1 1 *"


def api_for(client: SchedulerClient) -> Api:
    _, secret = client.create_token("tester", "admin")
    return Api(create_app(client), secret)


def test_params_reach_kwargs_and_environment_on_every_attempt_and_show_in_api_and_cli(
    db_url: str, client: SchedulerClient, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    client.add_job({"name": "py", "schedule": NEVER, "callable": "tests.cluster.params_jobs:show",
                    "kwargs": {"path": str(log), "color": "red", "size": 1},
                    "max_attempts": 2, "retry_backoff_s": 0.2})
    client.add_job({"name": "sh", "schedule": NEVER, "max_attempts": 2, "retry_backoff_s": 0.2,
                    "command": 'echo "who=$QUARTZLITE_PARAM_WHO n=$QUARTZLITE_PARAM_N '
                               'dry=$QUARTZLITE_PARAM_DRY_RUN attempt=$QUARTZLITE_ATTEMPT"; '
                               '[ "$QUARTZLITE_ATTEMPT" = 2 ]'})
    api = api_for(client)
    db = Db(db_url)
    py_params = {"color": "blue", "fail_first": True}
    sh_params = {"who": "me", "n": 3, "dry_run": True}
    with nodes(db_url) as start:
        node = start("n")
        response = api.post("/api/v1/jobs/py/trigger", json={"params": py_params})
        assert response.status_code == 202, response.get_json()
        client.trigger_job("sh", sh_params)
        wait_until(lambda: db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status = 'succeeded'") == 2,
                   timeout=90, message="the second attempt of both jobs")
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0, node.log()[-3000:]

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["attempt"] for c in calls] == [1, 2]
    for call in calls:
        assert call["kwargs"] == {"path": str(log), "color": "blue", "size": 1,
                                  "fail_first": True}, "params win over the job's kwargs"
        assert call["params"] == py_params
    assert calls[0]["slot_at"] == calls[1]["slot_at"], "a retry is the same slot"

    for name, params in (("py", py_params), ("sh", sh_params)):
        items = api.get(f"/api/v1/jobs/{name}/runs").get_json()["items"]
        assert [(r["attempt"], r["status"], r["params"]) for r in items] == [
            (2, "succeeded", params), (1, "failed", params)], name
    sh_runs = api.get("/api/v1/jobs/sh/runs").get_json()["items"]
    first = api.get(f"/api/v1/runs/{sh_runs[1]['id']}").get_json()
    assert first["output"] == "who=me n=3 dry=true attempt=1\n"
    assert first["output_live"] is False
    second = api.get(f"/api/v1/runs/{sh_runs[0]['id']}").get_json()
    assert second["output"] == "who=me n=3 dry=true attempt=2\n"

    history = CliRunner().invoke(main, ["--database-url", db_url, "job", "history", "sh"])
    assert history.exit_code == 0, history.output
    lines = history.stdout.splitlines()
    assert lines[0].split()[-1] == "PARAMS"
    assert all(line.split()[-1] == '{"dry_run":true,"n":3,"who":"me"}' for line in lines[1:3])
    db.close()


def test_a_running_shell_runs_output_shows_while_it_runs_and_survives_its_node_killed(
    db_url: str, client: SchedulerClient
) -> None:
    client.add_job({"name": "chatty", "schedule": NEVER, "recovery_policy": "skip",
                    "command": 'for i in $(seq 60); do echo "line $i"; sleep 1; done'})
    api = api_for(client)
    db = Db(db_url)

    def running_run() -> dict[str, Any] | None:
        items = api.get("/api/v1/jobs/chatty/runs").get_json()["items"]
        return items[0] if items and items[0]["status"] == "running" else None

    def shown(marker: str) -> dict[str, Any] | None:
        run = running_run()
        if run is None:
            return None
        detail = api.get(f"/api/v1/runs/{run['id']}").get_json()
        return detail if marker in detail["output"] else None

    with nodes(db_url) as start:
        victim = start("victim")
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="the node's session")
        client.trigger_job("chatty")
        early = wait_until(lambda: shown("line 2\n"), timeout=60, message="line 2 while it runs")
        assert early["status"] == "running"
        assert early["output_live"] is True
        assert early["output"].startswith("line 1\nline 2\n")
        later = wait_until(lambda: shown("line 4\n"), timeout=60,
                           message="more output, written as it comes")
        assert later["id"] == early["id"]
        victim_session = db.session_ids()[0]

        victim.signal(signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
        # What the dead node wrote last (it may have written once more after our read).
        kept = api.get(f"/api/v1/runs/{later['id']}").get_json()["output"]
        assert kept.startswith(later["output"])

        start("survivor")  # expires the dead session: the run is abandoned
        wait_until(lambda: victim_session not in db.session_ids(), timeout=60,
                   message="the dead session expired")
        abandoned = wait_until(
            lambda: (r := api.get(f"/api/v1/runs/{later['id']}").get_json())["status"]
            == "abandoned" and r, timeout=60, message="the run abandoned")
    assert abandoned["output"] == kept, "the output written while it ran is kept"
    assert abandoned["output_live"] is False
    assert "line 4\n" in abandoned["output"]
    db.close()
