"""The OpenAPI document against the live app: schemathesis drives a real waitress
server (127.0.0.1, a free port, a thread) with an admin token and must find no server
error and no response that breaks the document. Bounded: a fixed seed and
QUARTZLITE_FUZZ_EXAMPLES examples per operation: `make test` runs 40, `make test-fuzz`
2000, both with the checks below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quartzlite.api import create_app
from quartzlite.api.context import EXTENSION
from quartzlite.api.limits import RefusalLimiter
from quartzlite.api.server import ApiServer
from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig

from .support import Rows

pytestmark = pytest.mark.db

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
EXAMPLES = int(os.environ.get("QUARTZLITE_FUZZ_EXAMPLES") or 40)
#: Every check schemathesis has, but two whose premise the API rejects on purpose:
#: positive_data_acceptance expects every schema-valid request to succeed, but JSON
#: Schema cannot say what the server checks (a schedule's grammar, command or callable
#: but not both, a cursor the server handed out); use_after_free expects a deleted job's
#: sub-resources to vanish, but /jobs/{name}/runs keeps serving its history.
EXCLUDED_CHECKS = os.environ.get("QUARTZLITE_FUZZ_EXCLUDE") or "positive_data_acceptance,use_after_free"
#: The run's time budget: 200 s for the 40 examples of `make test` (about 30 s on an
#: idle machine), in proportion beyond.
RUN_TIMEOUT_S = 200 * max(1.0, EXAMPLES / 40)


@pytest.fixture
def live(client: SchedulerClient, rows: Rows) -> Iterator[tuple[str, str]]:
    """(base URL, admin secret) of a waitress server in a thread, with a job, a run and
    a node session to describe. No node runs: the jobs schemathesis makes never fire."""
    _, secret = client.create_token("schemathesis", "admin")
    job = client.add_job({"name": "seeded", "schedule": "0 0 1 1 *", "command": "true"})
    rows.add_run("seeded", job.id, datetime.now(UTC) - timedelta(minutes=1), output="done")
    rows.add_session("sess-seeded")
    app = create_app(client)
    # The fuzz sends thousands of invalid writes on purpose: past the refused-write limit
    # they would all get 429 and the views behind it would go untested.
    app.extensions[EXTENSION].refusals = RefusalLimiter(burst=10**9)
    server = ApiServer(app, ApiConfig(host="127.0.0.1", port=0, threads=4))
    server.start()
    try:
        yield server.url, secret
    finally:
        server.stop()


@pytest.mark.timeout(RUN_TIMEOUT_S + 40)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    live: tuple[str, str], tmp_path: Path
) -> None:
    url, secret = live
    report = tmp_path / "report.json"
    started = time.monotonic()
    result = subprocess.run(
        [
            str(SCHEMATHESIS), "run", f"{url}/api/v1/openapi.json",
            "--checks", "all", "--exclude-checks", EXCLUDED_CHECKS,
            "--phases", "examples,coverage,fuzzing,stateful",
            "--max-examples", str(EXAMPLES),
            "--seed", "20261122",
            "--workers", "1",
            "--no-shrink",
            "--request-timeout", "30",
            "--header", f"Authorization: Bearer {secret}",
            "--report", "json", "--report-json-path", str(report),
        ],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    # Every failure with its request (the tail below may cut a long run's first ones).
    full = tmp_path / "schemathesis.txt"
    full.write_text(result.stdout + result.stderr)
    output = result.stdout[-12000:] + result.stderr[-3000:]
    assert result.returncode == 0, f"schemathesis failed after {elapsed:.0f}s (all of it: {full}):\n{output}"
    assert report.exists(), output
    json.loads(report.read_text())  # a well-formed report
