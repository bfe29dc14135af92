"""``quartzlite job add/put/update --max-concurrency N --broadcast/--no-broadcast``,
``job show`` with those fields when they are not the defaults, and ``job history`` with a
broadcast run's shard. No node runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from quartzlite.storage.tables import runs
from tests.integration.dbtools import add_run, connect, job_rows
from tests.integration.test_cli import cli, fails, ok, show

pytestmark = pytest.mark.db

JOB = ("--schedule", "@every 1h", "--command", "true")


def test_the_options_on_add_put_and_update_and_job_show(db_url: str) -> None:
    added = json.loads(ok(db_url, "job", "add", "wide", *JOB, "--max-concurrency", "3",
                          "--json"))
    assert (added["max_concurrency"], added["broadcast"]) == (3, False)
    put = json.loads(ok(db_url, "job", "put", "fan", *JOB, "--broadcast", "--tag", "web",
                        "--json"))
    assert (put["max_concurrency"], put["broadcast"]) == (1, True)
    ok(db_url, "job", "add", "plain", *JOB)

    wide, fan, plain = (show(db_url, n) for n in ("wide", "fan", "plain"))
    assert wide["max_concurrency"] == "3"
    assert "broadcast" not in wide
    assert fan["broadcast"] == "True"
    assert "max_concurrency" not in fan
    assert "max_concurrency" not in plain
    assert "broadcast" not in plain
    shown = json.loads(ok(db_url, "job", "show", "plain", "--json"))
    assert (shown["max_concurrency"], shown["broadcast"]) == (1, False)

    # update changes only what it is given; put again with the same options: unchanged.
    changed = json.loads(ok(db_url, "job", "update", "fan", "--no-broadcast",
                            "--max-concurrency", "2", "--json"))
    assert (changed["max_concurrency"], changed["broadcast"], changed["tags"]) == (2, False,
                                                                                  ["web"])
    kept = json.loads(ok(db_url, "job", "update", "fan", "--description", "d", "--json"))
    assert (kept["max_concurrency"], kept["broadcast"]) == (2, False)
    assert ok(db_url, "job", "put", "wide", *JOB, "--max-concurrency", "3").startswith(
        "unchanged: wide")
    assert ok(db_url, "job", "put", "wide", *JOB).startswith("changed: wide")
    assert "max_concurrency" not in show(db_url, "wide"), "put without it: the default"


def test_bad_values_exit_2_with_the_field_and_the_reason(db_url: str) -> None:
    ok(db_url, "job", "add", "fan", *JOB, "--broadcast")
    before = job_rows(db_url)

    for args, line in [
        (("--max-concurrency", "0"), "Error: max_concurrency: must be between 1 and 100, got 0"),
        (("--max-concurrency", "101"),
         "Error: max_concurrency: must be between 1 and 100, got 101"),
        (("--broadcast", "--max-concurrency", "2"),
         "Error: max_concurrency: a broadcast job runs once per node per slot: "
         "max_concurrency must be 1"),
    ]:
        assert fails(db_url, "job", "add", "x", *JOB, *args, code=2) == line, args
    assert fails(db_url, "job", "update", "fan", "--max-concurrency", "4", code=2) == (
        "Error: max_concurrency: a broadcast job runs once per node per slot: "
        "max_concurrency must be 1")
    result = cli(db_url, "job", "add", "x", *JOB, "--max-concurrency", "two")
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert "--max-concurrency" in result.stderr
    assert job_rows(db_url) == before


def test_history_shows_a_broadcast_runs_shard(db_url: str) -> None:
    job_id = json.loads(ok(db_url, "job", "add", "fan", *JOB, "--broadcast", "--json"))["id"]
    at = datetime(2026, 1, 1, 3, tzinfo=UTC)
    plain = add_run(db_url, job_id=job_id, job_name="fan", planned_at=at - timedelta(hours=1))
    assert "SHARD" not in ok(db_url, "job", "history", "fan").splitlines()[0].split()
    # One slot, a run per node, each its own shard (a run is inserted with shard 0: the
    # last shard first, then the next, so that the slot's key stays unique).
    sharded = {}
    for index in (1, 0):
        sharded[index] = add_run(db_url, job_id=job_id, job_name="fan", planned_at=at,
                                 node=f"node-{index}")
        with connect(db_url) as conn:
            conn.execute(update(runs).where(runs.c.id == sharded[index]).values(
                shard=index, shard_total=2))

    table = ok(db_url, "job", "history", "fan").splitlines()

    assert table[0].split()[-2:] == ["NODE", "SHARD"]
    cells = {int(line.split()[0]): line.split()[-1] for line in table[1:]}
    assert cells == {sharded[0]: "0/2", sharded[1]: "1/2", plain: "-"}
    data = json.loads(ok(db_url, "job", "history", "fan", "--json"))
    assert {r["id"]: r["shard"] for r in data["runs"]} == {
        sharded[0]: {"index": 0, "total": 2}, sharded[1]: {"index": 1, "total": 2}, plain: None}
