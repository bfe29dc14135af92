"""``quartzlite webhook ...`` against the real database (click's CliRunner)."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_cli import fails, ok

pytestmark = pytest.mark.db


def test_add_prints_the_secret_once_then_list_update_test_deliveries_delete(db_url: str) -> None:
    out = ok(db_url, "webhook", "add", "ops", "--url", "https://alerts.example.com/q",
             "--event", "run.failed", "--event", "node.expired", "--job-prefix", "etl-")
    secret_lines = [line for line in out.splitlines() if line.startswith("secret: whsec_")]
    assert len(secret_lines) == 1
    secret = secret_lines[0].removeprefix("secret: ")
    listed = ok(db_url, "webhook", "list")
    assert "ops" in listed
    assert "run.failed,node.expired" in listed
    assert secret not in listed
    listed_json = json.loads(ok(db_url, "webhook", "list", "--json"))
    assert listed_json[0]["job_prefix"] == "etl-"
    assert "secret" not in listed_json[0]

    changed = json.loads(ok(db_url, "webhook", "update", "ops", "--disable", "--job-prefix", "",
                            "--json"))
    assert (changed["enabled"], changed["job_prefix"]) == (False, None)
    assert "is disabled" in fails(db_url, "webhook", "test", "ops", code=1)
    ok(db_url, "webhook", "update", "ops", "--enable")
    assert "queued" in ok(db_url, "webhook", "test", "ops")
    log = json.loads(ok(db_url, "webhook", "deliveries", "ops", "--json"))
    assert [(d["event"], d["status"], d["attempts"]) for d in log["deliveries"]] == [
        ("webhook.test", "pending", 0)]
    assert "webhook.test" in ok(db_url, "webhook", "deliveries", "ops")

    assert "ftp" in fails(db_url, "webhook", "add", "x", "--url", "ftp://x/", "--event",
                          "run.failed", code=2)
    assert "give at least one" in fails(db_url, "webhook", "update", "ops", code=2)
    ok(db_url, "webhook", "delete", "ops")
    assert "no webhook named 'ops'" in fails(db_url, "webhook", "delete", "ops", code=1)
