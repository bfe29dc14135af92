"""Webhooks' storage against the real database: events written by the scheduler's own
transactions (results, prepare, expiry, compensation), once, and only when those commit;
fan-out into one delivery per matching subscription; claims, leases, retries and giving
up; disabling, testing, deleting and pruning."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text, update

from quartzlite.client import SchedulerClient
from quartzlite.enums import DeliveryStatus, EventType, RunStatus
from quartzlite.errors import Conflict, NotFound, TransientStoreError, ValidationError
from quartzlite.models import ClaimedDelivery, Finished, Fired, Outcome
from quartzlite.node.planning import SchedulePlanner
from quartzlite.storage.engine import Database
from quartzlite.storage.node import NodeStore
from quartzlite.storage.tables import deliveries, events, sessions
from quartzlite.storage.webhooks import DeliveryStore, WebhookStore
from tests.integration.dbtools import connect, naive, registered_store, set_job

pytestmark = pytest.mark.db

SESSION = "a" * 32
PEER = "b" * 32


@pytest.fixture
def store(db_url: str) -> Iterator[NodeStore]:
    yield from registered_store(db_url, SESSION)


@pytest.fixture
def outbox(db_url: str) -> Iterator[DeliveryStore]:
    db = Database(db_url)
    yield DeliveryStore(db)
    assert db.checked_out() == 0
    db.dispose()


def event_rows(url: str) -> list[dict[str, Any]]:
    with connect(url) as conn:
        return [dict(r) for r in conn.execute(select(events).order_by(events.c.id)).mappings()]


def delivery_rows(url: str) -> list[dict[str, Any]]:
    with connect(url) as conn:
        return [dict(r) for r in conn.execute(select(deliveries).order_by(deliveries.c.id)).mappings()]


def fire_all(store: NodeStore, planner: SchedulePlanner, batch: int, session: str = SESSION
             ) -> list[Fired]:
    scan = store.prepare_due(session_id=session, fire_prefix=f"{session}:{batch}:", limit=100,
                             tag_sets=[""], look_ahead_s=60, planner=planner)
    fired, lost = store.fire(session_id=session, items=scan.prepared, planner=planner, ahead_s=60)
    assert lost == []
    return fired


def finished(fired: Sequence[Fired], outcomes: dict[str, Outcome]) -> list[Finished]:
    return [
        Finished(fired=f, outcome=outcomes[f.prepared.name], started_at=f.prepared.planned_at,
                 ended_at=f.prepared.planned_at + timedelta(milliseconds=50))
        for f in fired if f.prepared.name in outcomes
    ]


def soon(client: SchedulerClient) -> str:
    return f"@at {(client.now() + timedelta(seconds=30)).isoformat()}"


def test_a_results_batch_writes_its_events_in_its_own_transaction_once(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    at = soon(client)
    client.add_jobs([{"name": n, "schedule": at, "command": "true"}
                     for n in ("fails", "slow", "ok", "lost", "uncommitted")])
    planner = SchedulePlanner()
    fired = fire_all(store, planner, 1)
    by_name = {f.prepared.name: f for f in fired}
    batch = finished(fired, {
        "fails": Outcome(status=RunStatus.FAILED, exit_code=3, error="exit status 3"),
        "slow": Outcome(status=RunStatus.TIMED_OUT, error="timed out after 1s"),
        "ok": Outcome(status=RunStatus.SUCCEEDED, exit_code=0),
        "lost": Outcome(status=RunStatus.ABANDONED, error="killed when its node fenced"),
    })
    store.complete(session_id=SESSION, finished=batch, planner=planner)

    found = {(e["type"], e["job_name"], e["run_id"]) for e in event_rows(db_url)}
    assert found == {
        ("run.failed", "fails", by_name["fails"].run_id),
        ("run.timed_out", "slow", by_name["slow"].run_id),
        ("run.abandoned", "lost", by_name["lost"].run_id),
    }
    assert all(e["fanned_out"] == 0 and e["payload"] is None for e in event_rows(db_url))
    # The same results again (a retry after a commit of unknown outcome): no second event.
    store.complete(session_id=SESSION, finished=batch, planner=planner)
    assert len(event_rows(db_url)) == 3

    # A results transaction that does not commit writes no event: told to stop (a fence)
    # while it ran, it rolls back, run and event alike.
    stop = threading.Event()
    stop.set()
    with pytest.raises(TransientStoreError):
        store.complete(session_id=SESSION, planner=planner, stop=stop, finished=finished(
            fired, {"uncommitted": Outcome(status=RunStatus.FAILED, exit_code=1)}))
    assert len(event_rows(db_url)) == 3
    assert client.get_run(by_name["uncommitted"].run_id).status is RunStatus.RUNNING


def test_a_success_after_a_failure_is_recovered_and_the_job_remembers_its_last_outcome(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "flaky", "schedule": soon(client), "command": "true",
                    "max_attempts": 2, "retry_backoff_s": 0})
    planner = SchedulePlanner()
    first = fire_all(store, planner, 1)
    store.complete(session_id=SESSION, planner=planner, finished=finished(
        first, {"flaky": Outcome(status=RunStatus.FAILED, exit_code=3)}))
    retry = fire_all(store, planner, 2)
    assert [f.prepared.attempt for f in retry] == [2]
    store.complete(session_id=SESSION, planner=planner, finished=finished(
        retry, {"flaky": Outcome(status=RunStatus.SUCCEEDED, exit_code=0)}))
    assert [(e["type"], e["run_id"]) for e in event_rows(db_url)] == [
        ("run.failed", first[0].run_id), ("run.recovered", retry[0].run_id)]
    with connect(db_url) as conn:
        assert conn.execute(text("SELECT last_outcome FROM ql_jobs")).scalar() == "succeeded"

    # Another success is no news; a cancelled run says nothing about the job.
    set_job(db_url, "flaky", next_fire_at=naive(client.now() + timedelta(seconds=5)),
            next_slot_at=naive(client.now() + timedelta(seconds=5)), next_attempt=1)
    again = fire_all(store, planner, 3)
    store.complete(session_id=SESSION, planner=planner, finished=finished(
        again, {"flaky": Outcome(status=RunStatus.SUCCEEDED)}))
    assert len(event_rows(db_url)) == 2


def test_slots_missed_at_prepare_time_are_events_in_the_prepare_transaction(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "late", "schedule": "@every 1m", "command": "true",
                    "misfire_policy": "skip", "misfire_grace_s": 5})
    slot = client.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    set_job(db_url, "late", next_fire_at=naive(slot), next_slot_at=naive(slot))
    store.prepare_due(session_id=SESSION, fire_prefix=f"{SESSION}:1:", limit=10, tag_sets=[""],
                      look_ahead_s=1, planner=SchedulePlanner())
    missed = client.list_runs(job="late", status="missed").items
    assert missed
    found = event_rows(db_url)
    assert sorted((e["type"], e["run_id"]) for e in found) == sorted(
        ("run.missed", r.id) for r in missed)


def test_expiry_writes_node_expired_and_the_abandoned_runs_of_the_dead_node(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    store.register(session_id=PEER, host="peer-host", pid=42, capacity=4, tags=("db",),
                   version="t")
    client.add_job({"name": "theirs", "schedule": soon(client), "command": "true"})
    planner = SchedulePlanner()
    (fired,) = fire_all(store, planner, 1, session=PEER)
    with connect(db_url) as conn:
        conn.execute(update(sessions).where(sessions.c.id == PEER).values(
            heartbeat_at=func.timestampadd(text("SECOND"), -60, func.now(6))))
    assert store.expire_sessions(session_id=SESSION, session_timeout_s=7, planner=planner) == [PEER]
    found = {e["type"]: e for e in event_rows(db_url)}
    assert set(found) == {"node.expired", "run.abandoned"}
    assert found["run.abandoned"]["run_id"] == fired.run_id
    node = json.loads(found["node.expired"]["payload"])["node"]
    assert node["session"] == PEER
    assert node["name"] == "peer-host:42"
    assert node["tags"] == ["db"]
    assert node["abandoned_runs"] == 1
    # Nothing left to expire: nothing written again.
    assert store.expire_sessions(session_id=SESSION, session_timeout_s=7, planner=planner) == []
    assert len(event_rows(db_url)) == 2


def test_compensation_of_a_fire_of_unknown_outcome_writes_run_abandoned(
    client: SchedulerClient, store: NodeStore, db_url: str
) -> None:
    client.add_job({"name": "forgotten", "schedule": soon(client), "command": "true"})
    planner = SchedulePlanner()
    (fired,) = fire_all(store, planner, 1)
    assert store.compensate(session_id=SESSION, in_memory=set(), planner=planner)[1] == 1
    assert [(e["type"], e["run_id"]) for e in event_rows(db_url)] == [
        ("run.abandoned", fired.run_id)]


def plant_event(url: str, kind: str, job: str | None, *, job_id: int | None = None,
                run_id: int | None = None, payload: str | None = None) -> int:
    with connect(url) as conn:
        return int(conn.execute(insert(events).values(
            type=kind, occurred_at=func.now(6), job_id=job_id, job_name=job, run_id=run_id,
            payload=payload)).inserted_primary_key[0])


def test_fan_out_makes_one_delivery_per_matching_subscription_whoever_runs_it(
    client: SchedulerClient, db_url: str
) -> None:
    client.add_jobs([{"name": "etl-load", "schedule": "0 0 1 1 *", "command": "true",
                      "tags": ["db"]},
                     {"name": "report", "schedule": "0 0 1 1 *", "command": "true"}])
    ids = {j.name: j.id for j in client.list_jobs().items}
    for name, extra in (("all", {}), ("etl", {"job_prefix": "etl-"}), ("db", {"tag": "db"}),
                        ("off", {"enabled": False}), ("nodes", {"events": ["node.expired"]})):
        client.add_webhook({"name": name, "url": "http://127.0.0.1:9/x",
                            "events": ["run.failed", "node.expired"], **extra})
    from tests.integration.dbtools import add_run

    run_id = add_run(db_url, job_id=ids["etl-load"], job_name="etl-load",
                     planned_at=client.now(), status="failed")
    failed = plant_event(db_url, "run.failed", "etl-load", job_id=ids["etl-load"], run_id=run_id)
    other = plant_event(db_url, "run.failed", "report", job_id=ids["report"])
    missed = plant_event(db_url, "run.missed", "report", job_id=ids["report"])
    node = plant_event(db_url, "node.expired", None, payload='{"node":{"session":"x"}}')

    dbs = [Database(db_url) for _ in range(4)]
    try:
        counts: list[int] = []
        threads = [threading.Thread(target=lambda d=d: counts.append(DeliveryStore(d).fan_out()))
                   for d in dbs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sum(counts) == 4, "each event fanned out by one store"
        assert DeliveryStore(dbs[0]).fan_out() == 0
    finally:
        for d in dbs:
            d.dispose()

    hooks = {w.name: w.id for w in client.list_webhooks()}
    got = sorted((r["webhook_id"], r["event_id"]) for r in delivery_rows(db_url))
    assert got == sorted([
        (hooks["all"], failed), (hooks["all"], other), (hooks["all"], node),
        (hooks["etl"], failed), (hooks["etl"], node),
        (hooks["db"], failed), (hooks["db"], node),
        (hooks["nodes"], node),
    ]), "the job filters; nothing for a disabled one or an event nobody listed (missed)"
    assert all(r["status"] == "pending" and r["attempts"] == 0 for r in delivery_rows(db_url))
    payloads = {e["id"]: json.loads(e["payload"]) for e in event_rows(db_url)}
    assert all(e["fanned_out"] for e in event_rows(db_url))
    assert missed in payloads
    assert payloads[failed]["run"]["id"] == run_id
    assert payloads[failed]["run"]["status"] == "failed"
    assert payloads[failed]["job"] == "etl-load"
    assert payloads[node] == {"event": "node.expired", "occurred_at": payloads[node]["occurred_at"],
                              "job": None, "run": None, "node": {"session": "x"}}


def test_subscriptions_get_only_events_after_they_were_created(
    client: SchedulerClient, db_url: str, outbox: DeliveryStore
) -> None:
    plant_event(db_url, "run.failed", "x")
    client.add_webhook({"name": "late", "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    assert outbox.fan_out() == 1
    assert delivery_rows(db_url) == []


def claim(outbox: DeliveryStore, session: str = SESSION, *, lease_s: float = 60,
          max_attempts: int = 3) -> list[ClaimedDelivery]:
    return outbox.claim(session_id=session, limit=10, lease_s=lease_s, max_attempts=max_attempts)


def due_now(url: str) -> None:
    """As if the lease or the backoff had passed."""
    with connect(url) as conn:
        conn.execute(update(deliveries).where(deliveries.c.status == "pending").values(
            next_attempt_at=func.timestampadd(text("SECOND"), -1, func.now(6))))


def test_claims_lease_each_delivery_to_one_node_and_answers_are_fenced_by_attempt(
    client: SchedulerClient, db_url: str, outbox: DeliveryStore
) -> None:
    _, secret = client.add_webhook({"name": "hook", "url": "http://127.0.0.1:9/in",
                                    "events": ["run.failed"]})
    event = plant_event(db_url, "run.failed", "job-a")
    outbox.fan_out()

    (first,) = claim(outbox)
    assert (first.attempt, first.url, first.secret, first.event) == (
        1, "http://127.0.0.1:9/in", secret, EventType.RUN_FAILED)
    body = json.loads(first.body)
    assert body["id"] == first.id
    assert (body["event"], body["job"], body["run"]) == ("run.failed", "job-a", None)
    assert claim(outbox, PEER) == [], "leased"

    # A failed attempt: due again after the backoff, same delivery id.
    assert outbox.record(first, session_id=SESSION, delivered=False, status_code=500,
                         error="HTTP 500: boom", retry_in_s=1.0)
    (row,) = delivery_rows(db_url)
    assert (row["status"], row["attempts"], row["last_status_code"], row["claimed_by"]) == (
        "pending", 1, 500, None)
    assert claim(outbox, PEER) == [], "not before its backoff"
    due_now(db_url)
    (second,) = claim(outbox, PEER)
    assert (second.id, second.attempt) == (first.id, 2)
    assert json.loads(second.body) == body, "the same body, the same delivery id"

    # Its lease passes (the peer stalls); we claim attempt 3; the peer's late answer is
    # not recorded over ours.
    due_now(db_url)
    (third,) = claim(outbox)
    assert third.attempt == 3
    assert not outbox.record(second, session_id=PEER, delivered=True, status_code=200,
                             error=None, retry_in_s=None)
    assert outbox.record(third, session_id=SESSION, delivered=True, status_code=204,
                         error=None, retry_in_s=None)
    (row,) = delivery_rows(db_url)
    assert (row["status"], row["attempts"], row["last_status_code"], row["last_error"]) == (
        "delivered", 3, 204, None)
    assert row["delivered_at"] is not None
    assert row["next_attempt_at"] is None
    log = client.list_deliveries("hook").items
    assert [(d.id, d.event_id, d.status, d.attempts) for d in log] == [
        (first.id, event, DeliveryStatus.DELIVERED, 3)]


def test_a_delivery_gives_up_after_its_last_attempt(
    client: SchedulerClient, db_url: str, outbox: DeliveryStore
) -> None:
    client.add_webhook({"name": "hook", "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    plant_event(db_url, "run.failed", "a")
    plant_event(db_url, "run.failed", "b")
    outbox.fan_out()
    one, two = claim(outbox, max_attempts=1)
    assert outbox.record(one, session_id=SESSION, delivered=False, status_code=None,
                         error="ConnectionRefusedError: refused", retry_in_s=None)
    # The other's node died mid-attempt: once its lease passes it is not tried again.
    due_now(db_url)
    assert claim(outbox, PEER, max_attempts=1) == []
    rows = {r["id"]: r for r in delivery_rows(db_url)}
    assert rows[one.id]["status"] == rows[two.id]["status"] == "failed"
    assert rows[one.id]["last_error"] == "ConnectionRefusedError: refused"
    assert rows[two.id]["last_error"].startswith("gave up: no answer recorded")


def test_disabling_pauses_pending_deliveries_and_enabling_resumes_them(
    client: SchedulerClient, db_url: str, outbox: DeliveryStore
) -> None:
    client.add_webhook({"name": "hook", "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    plant_event(db_url, "run.failed", "a")
    outbox.fan_out()
    (inflight,) = claim(outbox)
    plant_event(db_url, "run.failed", "b")
    outbox.fan_out()
    assert not client.update_webhook("hook", {"enabled": False}).enabled
    assert {r["status"] for r in delivery_rows(db_url)} == {"paused"}
    plant_event(db_url, "run.failed", "while-off")
    outbox.fan_out()
    assert len(delivery_rows(db_url)) == 2, "a disabled subscription gets no new events"
    due_now(db_url)
    assert claim(outbox) == []
    with pytest.raises(Conflict):
        client.test_webhook("hook")
    # The attempt in flight when it was disabled still records its answer.
    assert outbox.record(inflight, session_id=SESSION, delivered=True, status_code=200,
                         error=None, retry_in_s=None)
    client.update_webhook("hook", {"enabled": True})
    (resumed,) = claim(outbox)
    assert json.loads(resumed.body)["job"] == "b"
    assert {r["status"] for r in delivery_rows(db_url)} == {"delivered", "pending"}


def test_test_deliveries_paging_delete_and_prune(
    client: SchedulerClient, db_url: str, outbox: DeliveryStore
) -> None:
    client.add_webhook({"name": "hook", "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    tests = [client.test_webhook("hook") for _ in range(3)]
    assert all(d.event is EventType.TEST and d.status is DeliveryStatus.PENDING for d in tests)
    assert outbox.fan_out() == 0, "a test event goes to its subscription alone, at once"
    (claimed, *_) = claim(outbox)
    assert json.loads(claimed.body)["event"] == "webhook.test"
    first = client.list_deliveries("hook", limit=2)
    assert [d.id for d in first.items] == [tests[2].id, tests[1].id]
    rest = client.list_deliveries("hook", limit=2, cursor=first.next_cursor)
    assert [d.id for d in rest.items] == [tests[0].id]
    assert rest.next_cursor is None
    assert client.list_deliveries("hook", status="pending").items
    with pytest.raises(ValidationError):
        client.list_deliveries("hook", status="lost")

    # Pruning: events older than the retention go, with their deliveries.
    with connect(db_url) as conn:
        conn.execute(update(events).where(events.c.id == tests[0].event_id).values(
            occurred_at=func.timestampadd(text("DAY"), -40, func.now(6))))
    cutoff = client.now() - timedelta(days=30)
    assert WebhookStore(client.db).prune(cutoff, batch=1) == (1, 1)
    assert len(delivery_rows(db_url)) == 2

    client.delete_webhook("hook")
    assert delivery_rows(db_url) == []
    with pytest.raises(NotFound):
        client.get_webhook("hook")
    with pytest.raises(NotFound):
        client.list_deliveries("hook")


def test_the_watch_says_when_the_webhooks_thread_has_work(
    client: SchedulerClient, store: NodeStore, db_url: str, outbox: DeliveryStore
) -> None:
    assert store.watch(SESSION, [""]).webhooks_due is None
    client.add_webhook({"name": "hook", "url": "http://127.0.0.1:9/", "events": ["run.failed"]})
    plant_event(db_url, "run.failed", "a")
    seen = store.watch(SESSION, [""])
    assert seen.webhooks_due == seen.db_now, "an event waits: now"
    outbox.fan_out()
    seen = store.watch(SESSION, [""])
    assert seen.webhooks_due is not None
    assert seen.webhooks_due <= seen.db_now
    (item,) = claim(outbox, lease_s=40)
    seen = store.watch(SESSION, [""])
    assert seen.webhooks_due is not None
    assert 35 < (seen.webhooks_due - seen.db_now).total_seconds() <= 40, "the lease's end"
    outbox.record(item, session_id=SESSION, delivered=True, status_code=200, error=None,
                  retry_in_s=None)
    assert store.watch(SESSION, [""]).webhooks_due is None


@pytest.mark.parametrize(("data", "field"), [
    ({"url": "http://x/", "events": ["run.failed"]}, "name"),
    ({"name": "h", "events": ["run.failed"]}, "url"),
    ({"name": "h", "url": "http://x/"}, "events"),
    ({"name": "h", "url": "gopher://x/", "events": ["run.failed"]}, "url"),
    ({"name": "h", "url": "http://x/", "events": ["run.nope"]}, "events"),
    ({"name": "h", "url": "http://x/", "events": ["run.failed"], "tag": "Not A Tag"}, "tag"),
    ({"name": "h", "url": "http://x/", "events": ["run.failed"], "job_prefix": "-x"}, "job_prefix"),
    ({"name": "h", "url": "http://x/", "events": ["run.failed"], "enabled": "yes"}, "enabled"),
    ({"name": "h", "url": "http://x/", "events": ["run.failed"], "secret": "mine"}, "secret"),
    ({"name": "bad name", "url": "http://x/", "events": ["run.failed"]}, "name"),
])
def test_bad_subscriptions_are_refused_naming_the_field(
    client: SchedulerClient, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        client.add_webhook(data)
    assert caught.value.field == field
    assert client.list_webhooks() == []


def test_names_are_unique_and_secrets_are_never_read_back(client: SchedulerClient) -> None:
    created, secret = client.add_webhook({"name": "h", "url": "http://x/", "events": ["run.failed"]})
    with pytest.raises(Conflict):
        client.add_webhook({"name": "h", "url": "http://y/", "events": ["run.failed"]})
    assert secret.startswith("whsec_")
    assert client.get_webhook("h") == created
    assert not hasattr(created, "secret")
    changed = client.update_webhook("h", {"job_prefix": "etl-", "tag": "db", "url": "https://y/"})
    assert (changed.job_prefix, changed.tag, changed.url) == ("etl-", "db", "https://y/")
    assert client.update_webhook("h", {"job_prefix": "", "tag": None}).job_prefix is None
    with pytest.raises(ValidationError):
        client.update_webhook("h", {})
    with pytest.raises(ValidationError):
        client.update_webhook("h", {"name": "other"})
    entries = client.list_audit(limit=10).items
    assert {"webhook.add", "webhook.update"} <= {e.action for e in entries}
    assert all(secret not in json.dumps(e.details) for e in entries)

