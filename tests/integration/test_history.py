"""Pruning run history against the real database: through the client, the CLI, and a
node's janitor. Finished runs past the cut-off go, running runs and live jobs stay,
deleted jobs go once no run of theirs is left; webhook events past the same cut-off go
with their deliveries."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select, text, update

from quartzlite.client import SchedulerClient
from quartzlite.config import NodeConfig
from quartzlite.errors import ValidationError
from quartzlite.node.node import Node
from quartzlite.storage.tables import deliveries, events
from tests.integration.dbtools import add_run, connect, job_rows, naive
from tests.integration.test_cli import cli, fails, one_error_line

pytestmark = pytest.mark.db

DAY = timedelta(days=1)


def plant(client: SchedulerClient, db_url: str) -> dict[str, int]:
    """Two jobs with runs 40 and 10 days old; a running run 40 days old; a job deleted
    long ago with only old runs, and one deleted just now."""
    now = client.now()
    keep = client.add_job({"name": "keep", "schedule": "@every 1h", "command": "true"})
    gone = client.add_job({"name": "gone", "schedule": "@every 1h", "command": "true"})
    ids = {
        "old": add_run(db_url, job_id=keep.id, job_name="keep", planned_at=now - 40 * DAY),
        "old_failed": add_run(db_url, job_id=keep.id, job_name="keep",
                              planned_at=now - 39 * DAY, status="failed"),
        "old_missed": add_run(db_url, job_id=keep.id, job_name="keep",
                              planned_at=now - 38 * DAY, status="missed"),
        "old_running": add_run(db_url, job_id=keep.id, job_name="keep",
                               planned_at=now - 37 * DAY, status="running"),
        "recent": add_run(db_url, job_id=keep.id, job_name="keep", planned_at=now - 10 * DAY),
        "gone_old": add_run(db_url, job_id=gone.id, job_name="gone", planned_at=now - 40 * DAY),
    }
    client.delete_job("gone")
    with connect(db_url) as conn:  # as if deleted 35 days ago
        conn.execute(text("UPDATE ql_jobs SET updated_at = :at WHERE name = 'gone'"),
                     {"at": naive(now - 35 * DAY)})
    fresh = client.add_job({"name": "fresh-delete", "schedule": "@every 1h", "command": "true"})
    client.delete_job("fresh-delete")
    return ids | {"keep_job": keep.id, "gone_job": gone.id, "fresh_job": fresh.id}


def plant_events(client: SchedulerClient, db_url: str) -> dict[str, set[int]]:
    """Webhook test events, each with its delivery: two older than 30 days (one to each
    of two subscriptions), and one 10 days old."""
    now = client.now()
    for name in ("ops", "pager"):
        client.add_webhook({"name": name, "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    old = [client.test_webhook("ops").event_id, client.test_webhook("pager").event_id]
    recent = client.test_webhook("ops").event_id
    with connect(db_url) as conn:
        for event_id, days in ((old[0], 40), (old[1], 31), (recent, 10)):
            conn.execute(update(events).where(events.c.id == event_id)
                         .values(occurred_at=naive(now - days * DAY)))
    return {"old": set(old), "recent": {recent}}


def remaining_events(db_url: str) -> tuple[set[int], set[int]]:
    """(ids of the events left, ids of the events the deliveries left belong to)"""
    with connect(db_url) as conn:
        return ({r[0] for r in conn.execute(select(events.c.id))},
                {r[0] for r in conn.execute(select(deliveries.c.event_id))})


def remaining_runs(client: SchedulerClient) -> set[int]:
    return {r.id for r in client.list_runs(limit=1000).items}


def assert_pruned(client: SchedulerClient, db_url: str, ids: dict[str, int]) -> None:
    assert remaining_runs(client) == {ids["old_running"], ids["recent"]}
    assert {r["id"] for r in job_rows(db_url)} == {ids["keep_job"], ids["fresh_job"]}


def test_prune_keeps_what_is_recent_running_or_live(client: SchedulerClient, db_url: str) -> None:
    ids = plant(client, db_url)
    pruned = client.prune_history("30d")
    assert (pruned.runs, pruned.jobs) == (4, 1)
    assert abs((client.now() - pruned.before) - 30 * DAY) < timedelta(minutes=1)
    assert_pruned(client, db_url, ids)
    again = client.prune_history(30 * 86400)
    assert (again.runs, again.jobs) == (0, 0)


def test_prune_works_in_batches(client: SchedulerClient, db_url: str) -> None:
    ids = plant(client, db_url)
    pruned = client.store.prune_history(30 * 86400, batch=1)
    assert (pruned.runs, pruned.jobs) == (4, 1)
    assert_pruned(client, db_url, ids)


@pytest.mark.parametrize(
    ("value", "reason"),
    [("soon", "invalid duration"), ("30s", "at least 60 seconds"), (0, "at least 60 seconds"),
     (float("nan"), "at least 60 seconds"), (True, "a number of seconds or a duration"),
     (1e20, "at most 100 years"), (10**400, "at most 100 years"), (float("inf"), "at most 100 years"),
     ("36501d", "at most 100 years")],
)
def test_a_bad_cut_off_is_refused_and_deletes_nothing(
    client: SchedulerClient, db_url: str, value: object, reason: str
) -> None:
    ids = plant(client, db_url)
    with pytest.raises(ValidationError) as caught:
        client.prune_history(value)  # type: ignore[arg-type]
    assert caught.value.field == "older_than"
    assert reason in caught.value.message
    assert len(remaining_runs(client)) == 6
    assert ids["gone_job"] in {r["id"] for r in job_rows(db_url)}


def test_cli_prunes_history(client: SchedulerClient, db_url: str) -> None:
    ids = plant(client, db_url)
    assert "older_than" in fails(db_url, "history", "prune", "--older-than", "soon", code=2)
    result = cli(db_url, "history", "prune", "--older-than", "30d", "--json")
    assert result.exit_code == 0, result.stderr
    assert {k: v for k, v in json.loads(result.stdout).items() if k != "before"} == {
        "runs": 4, "jobs": 1, "events": 0, "deliveries": 0}
    assert_pruned(client, db_url, ids)
    again = cli(db_url, "history", "prune", "--older-than", "30d")
    assert again.exit_code == 0, one_error_line(again.stderr)
    assert again.stdout.startswith(
        "pruned 0 run(s), 0 deleted job(s), 0 webhook event(s) and 0 delivery(ies) from before ")


def test_prune_takes_old_webhook_events_with_their_deliveries(
    client: SchedulerClient, db_url: str
) -> None:
    ids = plant(client, db_url)
    planted = plant_events(client, db_url)
    everything = planted["old"] | planted["recent"]
    assert remaining_events(db_url) == (everything, everything)

    result = cli(db_url, "history", "prune", "--older-than", "30d", "--json")
    assert result.exit_code == 0, result.stderr
    assert {k: v for k, v in json.loads(result.stdout).items() if k != "before"} == {
        "runs": 4, "jobs": 1, "events": 2, "deliveries": 2}
    assert_pruned(client, db_url, ids)
    assert remaining_events(db_url) == (planted["recent"], planted["recent"])

    again = client.prune_history("30d")
    assert (again.events, again.deliveries) == (0, 0)
    assert remaining_events(db_url) == (planted["recent"], planted["recent"])
    (entry, *_) = client.list_audit(limit=1).items
    assert (entry.action, entry.details["events"], entry.details["deliveries"]) == (
        "history.prune", 0, 0)


def test_a_nodes_janitor_prunes_past_its_retention(client: SchedulerClient, db_url: str) -> None:
    ids = plant(client, db_url)
    planted = plant_events(client, db_url)
    node = Node(NodeConfig(database_url=db_url, history_retention_s=30 * 86400))
    try:
        assert node.janitor.run_once() == node.janitor.FIRST_S  # not at start
        assert len(remaining_runs(client)) == 6
        assert node.janitor.run_once() is None  # then at its interval
        assert_pruned(client, db_url, ids)
        assert remaining_events(db_url) == (planted["recent"], planted["recent"])
    finally:
        node.dispose_pools()

    keep_all = Node(NodeConfig(database_url=db_url, history_retention_s=0))
    try:
        add_run(db_url, job_id=ids["keep_job"], job_name="keep",
                planned_at=client.now() - 400 * DAY)
        keep_all.janitor.run_once()
        keep_all.janitor.run_once()
        assert len(remaining_runs(client)) == 3
    finally:
        keep_all.dispose_pools()


def test_a_nodes_janitor_prunes_the_audit_trail_past_its_retention(
    client: SchedulerClient, db_url: str
) -> None:
    for age_days in (100, 91, 89, 0):
        entry = client.record_audit(token_name="ops", action="jobs.create", details={"age": age_days})
        with connect(db_url) as conn:
            conn.execute(
                text("UPDATE ql_audit SET recorded_at = NOW(6) - INTERVAL :d DAY WHERE id = :id"),
                {"d": age_days, "id": entry.id},
            )
    node = Node(NodeConfig(database_url=db_url, audit_retention_s=90 * 86400))
    try:
        node.janitor.run_once()  # the first pass waits a minute
        assert len(client.list_audit(limit=100).items) == 4
        node.janitor.run_once()
        assert sorted(e.details["age"] for e in client.list_audit(limit=100).items) == [0, 89]
    finally:
        node.dispose_pools()

    with pytest.raises(ValidationError, match="audit_retention_s"):
        NodeConfig(database_url=db_url, audit_retention_s=5)
