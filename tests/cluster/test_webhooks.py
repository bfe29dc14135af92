"""Webhooks end to end: a real ``quartzlite node`` process delivers to a real HTTP
receiver (http.server in a thread) that fails the first attempt of half the deliveries
(a 500, or no answer within the node's timeout) and, for a while, is down altogether
(connection refused).

Every event reaches the receiver (a failing shell job, a timed-out job, missed slots, a
job that recovered after a failure), signed; a delivery is repeated only after an attempt
that failed or timed out, always with the same delivery id and body; deliveries made
while the receiver was down go out once it is back. A node killed with SIGKILL is
expired by its peer, which delivers node.expired naming the dead session."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.webhooks import verify
from tests.cluster.harness import Db, nodes, wait_until
from tests.integration.dbtools import naive, set_job

pytestmark = pytest.mark.cluster

#: The node's attempt timeout; a stalled answer takes twice as long.
TIMEOUT_S = 3.0


@dataclass
class Request:
    delivery: int
    event: str
    signature: str
    body: bytes
    at: float
    #: What the receiver did: "ok" (200), "error" (500) or "stalled" (no answer in time).
    answer: str


@dataclass
class Receiver:
    """A local HTTP receiver. It fails the first attempt of every other delivery (in the
    order they first arrive): a 500 or a stall past the node's timeout, in turn."""

    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None
    port: int = 0
    #: Whether it fails first attempts (see the class docstring).
    flaky: bool = True

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                delivery = int(self.headers["X-Quartzlite-Delivery"])
                with receiver.lock:
                    known = list(dict.fromkeys(r.delivery for r in receiver.requests))
                    answer = "ok"
                    if receiver.flaky and delivery not in known and len(known) % 2 == 0:
                        # Every other new delivery's first attempt fails: a 500 and a
                        # stall, in turn.
                        answer = "error" if len(known) % 4 == 0 else "stalled"
                    receiver.requests.append(Request(
                        delivery=delivery, event=self.headers["X-Quartzlite-Event"],
                        signature=self.headers["X-Quartzlite-Signature"], body=body,
                        at=time.time(), answer=answer,
                    ))
                if answer == "stalled":
                    receiver.closing.wait(TIMEOUT_S * 2)
                try:
                    self.send_response(500 if answer == "error" else 200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the node gave up waiting (stalled)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, name="receiver", daemon=True).start()

    def stop(self) -> None:
        """Down: connections to its port are refused."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/quartzlite"

    def snapshot(self) -> list[Request]:
        with self.lock:
            return list(self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    found.start()
    try:
        yield found
    finally:
        found.closing.set()
        found.stop()


def delivered(db: Db) -> dict[int, tuple[str, int, int]]:
    """Delivery id -> (status, attempts, event id), for every delivery."""
    return {r[0]: (r[1], r[2], r[3]) for r in db.rows(
        "SELECT id, status, attempts, event_id FROM ql_deliveries")}


def check_requests(requests: list[Request], secret: str) -> dict[int, list[Request]]:
    """Signed, one body per delivery id, repeated only after a failed attempt."""
    by_delivery: dict[int, list[Request]] = {}
    for r in requests:
        assert verify(secret, r.body, r.signature, now=r.at), f"bad signature on {r.delivery}"
        by_delivery.setdefault(r.delivery, []).append(r)
    for delivery, attempts in by_delivery.items():
        bodies = {a.body for a in attempts}
        assert len(bodies) == 1, f"delivery {delivery} was sent with different bodies"
        assert json.loads(attempts[0].body)["id"] == delivery
        assert {a.event for a in attempts} == {json.loads(attempts[0].body)["event"]}
        for earlier in attempts[:-1]:
            assert earlier.answer in ("error", "stalled"), (
                f"delivery {delivery} repeated after an attempt answered 200: "
                f"{[a.answer for a in attempts]}")
    return by_delivery


@pytest.mark.timeout(240)
def test_every_event_reaches_a_flaky_receiver_signed_at_least_once(
    db_url: str, client: SchedulerClient, receiver: Receiver, tmp_path: Path
) -> None:
    db = Db(db_url)
    _, secret = client.add_webhook({
        "name": "receiver", "url": receiver.url,
        "events": ["run.failed", "run.timed_out", "run.abandoned", "run.missed",
                   "run.recovered", "node.expired"],
    })
    at = (client.now() + timedelta(seconds=4)).isoformat()
    marker = tmp_path / "flaky-ran-once"
    client.add_jobs([
        {"name": "fails", "schedule": f"@at {at}", "command": "exit 3"},
        {"name": "slow", "schedule": f"@at {at}", "command": "sleep 30", "timeout_s": 1},
        {"name": "flaky", "schedule": f"@at {at}", "max_attempts": 2, "retry_backoff_s": 0,
         "command": f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 1"},
        {"name": "late", "schedule": "@every 1m", "command": "true", "misfire_policy": "skip",
         "misfire_grace_s": 1},
    ])
    slot = client.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    set_job(db_url, "late", next_fire_at=naive(slot), next_slot_at=naive(slot))

    options = {"webhook-timeout-s": str(TIMEOUT_S), "webhook-concurrency": "4"}
    try:
        with nodes(db_url) as start:
            node = start("n", options=options)
            expected = {"run.failed": 2, "run.timed_out": 1, "run.recovered": 1}

            def events() -> dict[str, int]:
                return {t: int(n) for t, n in db.rows(
                    "SELECT type, COUNT(*) FROM ql_events GROUP BY type")}

            found = wait_until(
                lambda: (e := events()) and all(e.get(k, 0) >= n for k, n in expected.items())
                and e.get("run.missed", 0) >= 2 and e,
                timeout=90, message=f"the events {expected} and missed slots ({events()})",
            )
            missed_slots = int(db.scalar("SELECT COUNT(*) FROM ql_runs WHERE status = 'missed'"))
            assert found["run.missed"] == missed_slots
            total = int(db.scalar("SELECT COUNT(*) FROM ql_events"))
            wait_until(
                lambda: len(d := delivered(db)) == total
                and all(s == "delivered" for s, _, _ in d.values()),
                timeout=120, message=f"every delivery delivered ({delivered(db)}; log: "
                                     f"{node.log()[-3000:]})",
            )
            by_delivery = check_requests(receiver.snapshot(), secret)
            assert set(by_delivery) == set(delivered(db)), "the receiver saw every delivery"
            failed_first = [d for d, tries in by_delivery.items() if tries[0].answer != "ok"]
            assert failed_first, "some first attempts failed"
            assert {tries[0].answer for tries in by_delivery.values()} >= {"error", "stalled"}
            for delivery in failed_first:
                assert by_delivery[delivery][-1].answer == "ok"
                assert delivered(db)[delivery][1] == len(by_delivery[delivery])
            bodies = {d: json.loads(tries[0].body) for d, tries in by_delivery.items()}
            kinds = {(b["event"], b["job"]) for b in bodies.values()}
            assert {("run.failed", "fails"), ("run.timed_out", "slow"), ("run.failed", "flaky"),
                    ("run.recovered", "flaky"), ("run.missed", "late")} <= kinds
            failed = next(b for b in bodies.values() if b["job"] == "fails")
            assert (failed["run"]["status"], failed["run"]["exit_code"]) == ("failed", 3)
            recovered = next(b for b in bodies.values() if b["event"] == "run.recovered")
            assert (recovered["run"]["status"], recovered["run"]["attempt"]) == ("succeeded", 2)
            timed_out = next(b for b in bodies.values() if b["event"] == "run.timed_out")
            assert timed_out["run"]["status"] == "timed_out"
            assert all(datetime.fromisoformat(b["occurred_at"]).tzinfo is not None
                       for b in bodies.values())

            # The receiver goes down: a new failure is attempted, refused, retried ...
            receiver.stop()
            before = set(delivered(db))
            client.add_job({"name": "fails-again", "command": "exit 3",
                            "schedule": f"@at {(client.now() + timedelta(seconds=1)).isoformat()}"})

            def refused() -> list[tuple[int, int, str]]:
                return [(int(r[0]), int(r[1]), str(r[2])) for r in db.rows(
                    "SELECT id, attempts, last_error FROM ql_deliveries WHERE status = 'pending' "
                    "AND attempts >= 2 AND last_error LIKE '%Connection%refused%'")]

            (down,) = wait_until(refused, timeout=60,
                                 message=f"refused attempts ({delivered(db)})")
            assert down[0] not in before
            # ... and delivered once it is back (answering at once now), with the same
            # delivery id.
            receiver.flaky = False
            receiver.start()
            wait_until(lambda: delivered(db)[down[0]][0] == "delivered", timeout=60,
                       message=f"delivery {down[0]} after the receiver came back")
            after = [r for r in receiver.snapshot() if r.delivery == down[0]]
            assert len(after) == 1, "the receiver was down for the earlier attempts"
            assert json.loads(after[0].body)["job"] == "fails-again"
            check_requests(receiver.snapshot(), secret)
            log = client.list_deliveries("receiver", limit=1000).items
            assert {d.id for d in log} == set(delivered(db))
            assert all(d.delivered_at is not None for d in log)
            assert datetime.now(UTC) - max(d.delivered_at for d in log if d.delivered_at) < timedelta(minutes=5)
    finally:
        db.close()


@pytest.mark.timeout(90)
def test_a_killed_nodes_expiry_reaches_the_receiver_signed(
    db_url: str, client: SchedulerClient, receiver: Receiver
) -> None:
    receiver.flaky = False
    _, secret = client.add_webhook({"name": "nodes", "url": receiver.url,
                                    "events": ["node.expired"]})
    db = Db(db_url)
    try:
        with nodes(db_url) as start:
            survivor, doomed = start("survivor"), start("doomed")
            session = wait_until(
                lambda: db.scalar("SELECT id FROM ql_sessions WHERE pid = :pid", pid=doomed.pid),
                timeout=30, message=f"the doomed node's session (log: {doomed.log()[-2000:]})")
            wait_until(lambda: db.live_sessions() == 2, timeout=30,
                       message=f"the survivor's session (log: {survivor.log()[-2000:]})")
            doomed.signal(signal.SIGKILL)

            def expiries() -> list[Request]:
                return [r for r in receiver.snapshot() if r.event == "node.expired"
                        and json.loads(r.body)["node"]["session"] == session]

            found = wait_until(expiries, timeout=30,
                               message=f"node.expired of {session} at the receiver "
                                       f"(log: {survivor.log()[-3000:]})")
            by_delivery = check_requests(found, secret)  # each signature verifies
            assert len(by_delivery) == 1, "one event, one delivery"
            body = json.loads(found[0].body)
            assert (body["event"], body["job"], body["run"]) == ("node.expired", None, None)
            assert (body["node"]["pid"], body["node"]["name"]) == (
                doomed.pid, f"{body['node']['host']}:{doomed.pid}")
            assert db.session_ids() == [str(
                db.scalar("SELECT id FROM ql_sessions WHERE pid = :pid", pid=survivor.pid))]
    finally:
        db.close()
