"""The API with real processes: trigger-then-kill against a running node, and
``quartzlite serve`` (a node and the API in one process) answering and stopping."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from quartzlite.api import create_app
from quartzlite.client import SchedulerClient
from tests.cluster.harness import wait_until

from .support import Api

pytestmark = [pytest.mark.db, pytest.mark.cluster]

NODE_FLAGS = [
    "--heartbeat-interval-s", "0.5", "--fence-after-s", "3", "--session-timeout-s", "5",
    "--poll-interval-s", "0.5",
]


@contextmanager
def process(args: list[str], name: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A quartzlite process with its log in a file; killed if the test left it running."""
    fd, log_name = tempfile.mkstemp(prefix=f"ql-{name}-", suffix=".log")
    log = Path(log_name)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "quartzlite", *args], stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.unlink(missing_ok=True)


def _stop(proc: subprocess.Popen[bytes], log: Path) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(90)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no exit within 90s of SIGTERM:\n{log.read_text()[-4000:]}") from None


@pytest.mark.timeout(240)
def test_trigger_then_kill_with_a_running_node(client: SchedulerClient, db_url: str) -> None:
    _, secret = client.create_token("ops", "admin")
    api = Api(create_app(client), secret)
    with process(["--database-url", db_url, "node", *NODE_FLAGS], "node") as (node, log):
        wait_until(lambda: client.cluster() or node.poll() is not None, timeout=60,
                   message="the node to register its session")
        assert node.poll() is None, log.read_text()
        created = api.post("/api/v1/jobs", json={
            "name": "sleeper", "schedule": "0 0 1 1 *", "command": "sleep 60",
        })
        assert created.status_code == 201, created.get_json()

        assert api.post("/api/v1/jobs/sleeper/trigger").status_code == 202

        def job() -> dict[str, Any]:
            response = api.get("/api/v1/jobs/sleeper")
            assert response.status_code == 200, response.get_json()
            body: dict[str, Any] = response.get_json()
            return body

        running = wait_until(lambda: (j := job())["state"] == "executing" and j, timeout=60,
                             message="the job to execute")
        assert running["owner_node"] is not None
        assert running["last_run"]["status"] == "running"
        cluster = api.get("/api/v1/cluster").get_json()
        assert cluster["nodes"][0]["running_jobs"] == ["sleeper"]
        assert api.post("/api/v1/jobs/sleeper/trigger").status_code == 409

        assert api.post("/api/v1/jobs/sleeper/kill").status_code == 202

        killed = wait_until(
            lambda: (j := job())["last_run"] and j["last_run"]["status"] == "killed" and j,
            timeout=60, message="the run to be killed",
        )
        assert killed["state"] == "idle"
        run = api.get(f"/api/v1/runs/{killed['last_run']['id']}").get_json()
        assert run["status"] == "killed"
        assert run["ended_at"] is not None
        assert_code = _stop(node, log)
        assert assert_code == 0, log.read_text()[-4000:]


def _http(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, {}


def _listening(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The base URL once the process logged where its API listens."""
    found = wait_until(
        lambda: re.search(r"API listening on 127\.0\.0\.1:(\d+)", log.read_text())
        or proc.poll() is not None,
        timeout=60, message="the API to listen",
    )
    assert proc.poll() is None, log.read_text()
    assert isinstance(found, re.Match)
    return f"http://127.0.0.1:{found.group(1)}"


@pytest.mark.timeout(240)
def test_serve_runs_a_node_and_the_api_and_stops_on_sigterm(db_url: str) -> None:
    args = ["--database-url", db_url, "serve", *NODE_FLAGS, "--api-port", "0"]
    with process(args, "serve") as (serve, log):
        base = _listening(serve, log)

        assert _http(f"{base}/healthz") == (200, {"status": "ok"})
        ready = wait_until(lambda: (r := _http(f"{base}/readyz"))[0] == 200 and r, timeout=60,
                           message="/readyz to answer 200")
        assert ready[1]["checks"] == {"database": "ok", "schema": "ok", "node": "ok"}
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            assert "quartzlite_node_live 1.0" in response.read().decode()
        status, body = _http(f"{base}/api/v1/jobs")
        assert status == 401
        assert body["error"]["code"] == "unauthorized"

        code = _stop(serve, log)
        assert code == 0, log.read_text()[-4000:]
        assert _http(f"{base}/healthz")[0] == 0


@pytest.mark.timeout(120)
def test_api_alone_serves_and_stops_on_sigterm(db_url: str) -> None:
    with process(["--database-url", db_url, "api", "--port", "0"], "api") as (api, log):
        base = _listening(api, log)

        assert _http(f"{base}/readyz") == (
            200, {"status": "ready", "checks": {"database": "ok", "schema": "ok"}},
        )

        assert _stop(api, log) == 0, log.read_text()[-4000:]


@pytest.mark.timeout(240)
def test_serve_starts_a_job_triggered_through_its_api_without_waiting_for_a_poll(
    client: SchedulerClient, db_url: str
) -> None:
    _, secret = client.create_token("ops", "admin")
    # The watch polls every 150 s and the scanner's safety net runs every 60 s: only the
    # API's poke can start the run within the 30 s this test waits (the first poll and
    # scan ran when the node started, a few seconds before the trigger).
    flags = ["--heartbeat-interval-s", "0.5", "--fence-after-s", "3",
             "--session-timeout-s", "300", "--poll-interval-s", "150"]
    args = ["--database-url", db_url, "serve", *flags, "--api-port", "0"]
    with process(args, "serve") as (serve, log):
        base = _listening(serve, log)
        wait_until(lambda: _http(f"{base}/readyz")[0] == 200, timeout=60, message="ready")

        def post(path: str, body: dict[str, Any] | None = None) -> int:
            request = urllib.request.Request(
                f"{base}{path}", method="POST", data=json.dumps(body or {}).encode(),
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)

        assert post("/api/v1/jobs", {"name": "now", "schedule": "0 0 1 1 *",
                                     "command": "echo triggered"}) == 201
        assert post("/api/v1/jobs/now/trigger") == 202
        run = wait_until(
            lambda: next((r for r in client.list_runs(job="now").items if r.status.value == "succeeded"), None),
            timeout=30, message="the triggered run to succeed",
        )
        assert run.output.strip() == "triggered"
        assert _stop(serve, log) == 0, log.read_text()[-4000:]
