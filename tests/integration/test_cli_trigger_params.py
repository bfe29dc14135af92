"""``quartzlite job trigger NAME --param k=v`` and the params in ``job history``."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from tests.integration.dbtools import add_run, connect, job_rows
from tests.integration.test_cli import fails, ok

pytestmark = pytest.mark.db


def test_trigger_with_params_and_the_history_that_shows_them(db_url: str) -> None:
    job_id = json.loads(ok(db_url, "job", "add", "nightly", "--schedule", "0 0 1 1 *",
                           "--command", "echo hi", "--json"))["id"]

    line = ok(db_url, "job", "trigger", "nightly", "--param", "who=me", "--param", "n=3",
              "--param", "empty=")

    assert line.startswith("triggered: nightly (state idle")
    with connect(db_url) as conn:
        stored = conn.execute(text("SELECT params, cause FROM ql_requests")).all()
    assert [tuple(r) for r in stored] == [('{"empty":"","n":"3","who":"me"}', "trigger")]

    plain = add_run(db_url, job_id=job_id, job_name="nightly",
                    planned_at=datetime(2026, 1, 1, 3, tzinfo=UTC))
    table = ok(db_url, "job", "history", "nightly").splitlines()
    assert table[0].split()[-1] == "NODE", "no params on the page: no column"
    with connect(db_url) as conn:
        conn.execute(text("UPDATE ql_runs SET params = '{\"who\":\"me\"}' WHERE id = :id"),
                     {"id": plain})
    table = ok(db_url, "job", "history", "nightly").splitlines()
    assert table[0].split()[-1] == "PARAMS"
    assert table[1].split()[-1] == '{"who":"me"}'
    data = json.loads(ok(db_url, "job", "history", "nightly", "--json"))
    assert data["runs"][0]["params"] == {"who": "me"}
    assert f'--- run #{plain} params: {{"who": "me"}}' in ok(
        db_url, "job", "history", "nightly", "--output")


def test_trigger_with_bad_params_exits_2_naming_the_field(db_url: str) -> None:
    ok(db_url, "job", "add", "nightly", "--schedule", "0 0 1 1 *", "--command", "echo hi")
    before = job_rows(db_url)
    assert fails(db_url, "job", "trigger", "nightly", "--param", "who", code=2) == (
        "Error: param: must be NAME=VALUE, got 'who'")
    assert fails(db_url, "job", "trigger", "nightly", "--param", "a=1", "--param", "a=2",
                 code=2) == "Error: params.a: given more than once"
    line = fails(db_url, "job", "trigger", "nightly", "--param", "bad-name=1", code=2)
    assert line.startswith("Error: params: parameter name 'bad-name'")
    assert job_rows(db_url) == before
