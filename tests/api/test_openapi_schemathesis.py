"""The OpenAPI document against the live app: schemathesis drives a real waitress
server (127.0.0.1, a free port, a thread) with an admin token and must find no server
error and no response that breaks the document. Bounded: few examples, fixed seed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quartzlite.api import create_app
from quartzlite.api.server import ApiServer
from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig

from .support import Rows

pytestmark = pytest.mark.db

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@pytest.fixture
def live(client: SchedulerClient, rows: Rows) -> Iterator[tuple[str, str]]:
    """(base URL, admin secret) of a waitress server in a thread, with a job, a run and
    a node session to describe. No node runs: the jobs schemathesis makes never fire."""
    _, secret = client.create_token("schemathesis", "admin")
    job = client.add_job({"name": "seeded", "schedule": "0 0 1 1 *", "command": "true"})
    rows.add_run("seeded", job.id, datetime.now(UTC) - timedelta(minutes=1), output="done")
    rows.add_session("sess-seeded")
    server = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=4))
    server.start()
    try:
        yield server.url, secret
    finally:
        server.stop()


@pytest.mark.timeout(240)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    live: tuple[str, str], tmp_path: Path
) -> None:
    url, secret = live
    report = tmp_path / "report.json"
    started = time.monotonic()
    result = subprocess.run(
        [
            str(SCHEMATHESIS), "run", f"{url}/api/v1/openapi.json",
            "--checks", "not_a_server_error,status_code_conformance,"
            "content_type_conformance,response_schema_conformance",
            "--phases", "examples,coverage,fuzzing,stateful",
            "--max-examples", "40",
            "--seed", "20261122",
            "--workers", "1",
            "--no-shrink",
            "--request-timeout", "30",
            "--header", f"Authorization: Bearer {secret}",
            "--report", "json", "--report-json-path", str(report),
        ],
        capture_output=True, text=True, timeout=200, check=False, cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    output = result.stdout[-12000:] + result.stderr[-3000:]
    assert result.returncode == 0, f"schemathesis failed after {elapsed:.0f}s:\n{output}"
    assert report.exists(), output
    json.loads(report.read_text())  # a well-formed report
