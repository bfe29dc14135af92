"""Webhooks' SQL: the outbox (``ql_events``), the subscriptions (``ql_webhooks``) and
the deliveries (``ql_deliveries``).

An event is written by the transaction that makes it happen (a run recorded failed,
timed out, abandoned or missed; a run that succeeded after a failure; a node's session
expired), as one small ``ql_events`` row: it exists exactly when that transaction
committed, so none is lost and none is invented. :func:`record_run_events` does it for
runs in ONE statement per transaction (none when nothing happened), keyed UNIQUE by
(run, type): a transaction run again after a commit of unknown outcome writes no
second event.

Everything else happens off the scheduler's path, on every node's ``webhooks`` thread
(:class:`DeliveryStore`), with its own connections and no scheduler lock:

* **fan-out**: new events (``fanned_out = 0``, taken ``FOR UPDATE SKIP LOCKED``) get
  their JSON payload and one ``ql_deliveries`` row per matching enabled subscription
  (``INSERT IGNORE`` on UNIQUE (webhook, event): once each, whichever node does it);
* **claim**: due pending deliveries, ``FOR UPDATE SKIP LOCKED``, leased to this node's
  session for one attempt (``attempts + 1``; ``next_attempt_at`` moves to the end of the
  lease, so a node that dies mid-attempt leaves it due again then);
* **record**: the attempt's answer, guarded by (attempt number, claimer): delivered,
  due again after a backoff, or failed for good after the last attempt.

The POST itself happens outside any transaction. A delivery is made at least once;
its id (the same on every attempt) lets receivers drop repeats.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.engine import Connection, RowMapping

from quartzlite import codec
from quartzlite.clock import utc
from quartzlite.enums import DeliveryStatus, EventType, RunStatus
from quartzlite.errors import Conflict, NotFound, TransientStoreError
from quartzlite.models import ClaimedDelivery, Delivery, Page, Webhook
from quartzlite.storage import rows
from quartzlite.storage.engine import Database, Tx
from quartzlite.storage.jobs import db_now, decode_cursor, encode_cursor
from quartzlite.storage.tables import deliveries, events, jobs, runs, webhooks
from quartzlite.webhooks import matches

#: The run statuses that are events of their own (``run.`` + status).
EVENT_STATUSES = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.ABANDONED)
#: Most characters of an error kept in the delivery log.
MAX_ERROR = 1000

_EVENT_COLUMNS = ["type", "occurred_at", "job_id", "job_name", "run_id"]


# -- the outbox: written by the scheduler's own transactions ---------------------------


def record_run_events(
    conn: Connection, *, run_ids: Collection[int] = (), recovered: Collection[int] = (),
    missed: Sequence[Mapping[str, Any]] = (),
) -> None:
    """The events of runs this transaction wrote, in ONE ``INSERT IGNORE ... SELECT``
    read back from the run rows as they stand now (nothing when all are empty):

    * ``run_ids``: runs recorded with an outcome that may be an event: each whose row
      now says failed, timed_out or abandoned gets ``run.<status>`` (a run a peer
      abandoned first has that event already: the UNIQUE key keeps one);
    * ``recovered``: runs that succeeded after their job's previous finished run failed
      or timed out: ``run.recovered``;
    * ``missed``: the missed-run rows just inserted (``job_id`` and ``planned_at`` of
      each): ``run.missed``.

    UNIQUE (run_id, type): the same transaction run again after a commit of unknown
    outcome writes no second event."""
    selects = []
    outcome_ids = sorted({*run_ids, *recovered})
    if outcome_ids:
        kind = case(
            (runs.c.status == RunStatus.SUCCEEDED.value, literal(EventType.RUN_RECOVERED.value)),
            else_=func.concat("run.", runs.c.status),
        )
        selects.append(
            select(kind, func.coalesce(runs.c.ended_at, func.now(6)), runs.c.job_id,
                   runs.c.job_name, runs.c.id)
            .where(runs.c.id.in_(outcome_ids), runs.c.status.in_(
                [s.value for s in EVENT_STATUSES]
                + ([RunStatus.SUCCEEDED.value] if recovered else [])
            ))
        )
        if recovered and run_ids:
            # A succeeded run counts only when the caller said it recovered.
            selects[-1] = selects[-1].where(or_(
                runs.c.status != RunStatus.SUCCEEDED.value, runs.c.id.in_(sorted(recovered))
            ))
    if missed:
        slots: dict[int, set[datetime]] = {}
        for row in missed:
            slots.setdefault(int(row["job_id"]), set()).add(row["planned_at"])
        selects.append(
            select(literal(EventType.RUN_MISSED.value), func.now(6), runs.c.job_id,
                   runs.c.job_name, runs.c.id)
            .where(runs.c.status == RunStatus.MISSED.value, or_(*(
                and_(runs.c.job_id == job_id, runs.c.planned_at.in_(sorted(planned)))
                for job_id, planned in slots.items()
            )))
        )
    if not selects:
        return
    source = selects[0] if len(selects) == 1 else union_all(*selects)
    conn.execute(insert(events).prefix_with("IGNORE").from_select(_EVENT_COLUMNS, source))


def record_node_expired(
    conn: Connection, expired: Sequence[RowMapping], *, abandoned: Mapping[str, int],
    handed_back: Mapping[str, int],
) -> None:
    """``node.expired`` for each session row being deleted as expired (in the expiry's
    transaction: a retry finds the rows gone and writes nothing again)."""
    if not expired:
        return
    now = db_now(conn)
    conn.execute(insert(events), [
        {
            "type": EventType.NODE_EXPIRED.value, "occurred_at": rows.to_db(now),
            "job_id": None, "job_name": None, "run_id": None,
            "payload": json.dumps({"node": {
                "session": s["id"], "name": f"{s['host']}:{s['pid']}", "host": s["host"],
                "pid": s["pid"], "started_at": codec.iso(utc(s["started_at"])),
                "heartbeat_at": codec.iso(utc(s["heartbeat_at"])), "version": s["version"],
                "tags": list(rows.split_tags(s["tags"])),
                "abandoned_runs": abandoned.get(s["id"], 0),
                "handed_back_jobs": handed_back.get(s["id"], 0),
            }}, separators=(",", ":")),
        }
        for s in expired
    ])


# -- payloads ----------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else codec.iso(utc(value))


def _run_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "id": row["id"], "planned_at": _iso(row["planned_at"]), "slot_at": _iso(row["slot_at"]),
        "attempt": row["attempt"], "status": row["status"], "exit_code": row["exit_code"],
        "error": row["error"], "node": row["node"], "started_at": _iso(row["started_at"]),
        "ended_at": _iso(row["ended_at"]),
    }


def event_payload(event: Mapping[Any, Any], run: Mapping[Any, Any] | None) -> dict[str, Any]:
    """An event's JSON document (a delivery's body adds its own ``id`` first)."""
    stored = json.loads(event["payload"]) if event["payload"] else {}
    return {
        "event": event["type"],
        "occurred_at": _iso(event["occurred_at"]),
        "job": event["job_name"],
        "run": None if run is None else _run_json(run),
        "node": stored.get("node"),
    }


def delivery_body(delivery_id: int, payload: str) -> str:
    """What a delivery POSTs: its id, then the event's payload (compact JSON)."""
    return json.dumps({"id": delivery_id, **json.loads(payload)}, separators=(",", ":"))


# -- mapping -------------------------------------------------------------------------------


def _webhook(row: RowMapping) -> Webhook:
    return Webhook(
        id=row["id"], name=row["name"], url=row["url"],
        events=tuple(EventType(e) for e in rows.split_tags(row["events"])),
        job_prefix=row["job_prefix"], tag=row["tag"], enabled=bool(row["enabled"]),
        created_at=utc(row["created_at"]),
    )


_DELIVERY_COLUMNS = [
    deliveries.c.id, deliveries.c.event_id, deliveries.c.status, deliveries.c.attempts,
    deliveries.c.next_attempt_at, deliveries.c.last_status_code, deliveries.c.last_error,
    deliveries.c.delivered_at, deliveries.c.created_at, events.c.type, events.c.occurred_at,
    events.c.job_name, events.c.run_id,
]


def _delivery(row: RowMapping, webhook: str) -> Delivery:
    return Delivery(
        id=row["id"], webhook=webhook, event_id=row["event_id"], event=EventType(row["type"]),
        occurred_at=utc(row["occurred_at"]), job_name=row["job_name"], run_id=row["run_id"],
        status=DeliveryStatus(row["status"]), attempts=row["attempts"],
        next_attempt_at=rows.instant(row["next_attempt_at"]),
        last_status_code=row["last_status_code"], last_error=row["last_error"],
        delivered_at=rows.instant(row["delivered_at"]), created_at=utc(row["created_at"]),
    )


# -- management: what the client does -------------------------------------------------------

class WebhookStore:
    """Subscriptions and their delivery log, as the client (library, CLI, API) sees them.
    Every write is one short transaction on ``ql_webhooks`` (and that subscription's
    deliveries); none takes a scheduler lock."""

    PRUNE_BATCH = 5000
    MAX_WEBHOOKS = 1000

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self, *, name: str, url: str, events_: Sequence[EventType], job_prefix: str | None,
        tag: str | None, enabled: bool, secret: str,
    ) -> Webhook:
        """A new subscription; :class:`Conflict` when the name is taken."""

        def tx(t: Tx) -> Webhook:
            inserted = t.conn.execute(insert(webhooks).prefix_with("IGNORE").values(
                name=name, url=url, events=",".join(e.value for e in events_),
                job_prefix=job_prefix, tag=tag, secret=secret, enabled=enabled,
                created_at=func.now(6),
            )).rowcount
            if not inserted:
                raise Conflict(f"a webhook named {name!r} exists", details={"webhook": name})
            return self._get(t.conn, name)

        return self.db.transaction(tx, name="create_webhook")

    def list(self) -> list[Webhook]:
        with self.db.connect() as conn:
            return [_webhook(r) for r in conn.execute(
                select(webhooks).order_by(webhooks.c.name).limit(self.MAX_WEBHOOKS)
            ).mappings()]

    def get(self, name: str) -> Webhook:
        with self.db.connect() as conn:
            return self._get(conn, name)

    @staticmethod
    def _row(conn: Connection, name: str, *, lock: bool = False) -> RowMapping:
        query = select(webhooks).where(webhooks.c.name == name)
        row = conn.execute(query.with_for_update() if lock else query).mappings().first()
        if row is None:
            raise NotFound(f"no webhook named {name!r}", details={"webhook": name})
        return row

    def _get(self, conn: Connection, name: str) -> Webhook:
        return _webhook(self._row(conn, name))

    def update(self, name: str, changes: Mapping[str, Any]) -> Webhook:
        """Change ``url``, ``events`` (event types), ``job_prefix``, ``tag`` or
        ``enabled``. Disabling pauses the subscription's pending deliveries (an attempt
        in flight still records its answer); enabling makes them due at once. Events
        that happen while it is disabled are not delivered to it."""

        def tx(t: Tx) -> Webhook:
            row = self._row(t.conn, name, lock=True)
            values: dict[str, Any] = {}
            for key in ("url", "job_prefix", "tag", "enabled"):
                if key in changes:
                    values[key] = changes[key]
            if "events" in changes:
                values["events"] = ",".join(e.value for e in changes["events"])
            if values:
                t.conn.execute(update(webhooks).where(webhooks.c.id == row["id"]).values(**values))
            if "enabled" in changes and bool(changes["enabled"]) != bool(row["enabled"]):
                if changes["enabled"]:
                    t.conn.execute(
                        update(deliveries)
                        .where(deliveries.c.webhook_id == row["id"],
                               deliveries.c.status == DeliveryStatus.PAUSED.value)
                        .values(status=DeliveryStatus.PENDING.value, next_attempt_at=func.now(6))
                    )
                else:
                    t.conn.execute(
                        update(deliveries)
                        .where(deliveries.c.webhook_id == row["id"],
                               deliveries.c.status == DeliveryStatus.PENDING.value)
                        .values(status=DeliveryStatus.PAUSED.value)
                    )
            return self._get(t.conn, name)

        return self.db.transaction(tx, name="update_webhook")

    def delete(self, name: str) -> Webhook:
        """Delete a subscription and its delivery log (an attempt in flight still
        goes out; its answer is not recorded)."""

        def tx(t: Tx) -> Webhook:
            row = self._row(t.conn, name, lock=True)
            t.conn.execute(delete(deliveries).where(deliveries.c.webhook_id == row["id"]))
            t.conn.execute(delete(webhooks).where(webhooks.c.id == row["id"]))
            return _webhook(row)

        return self.db.transaction(tx, name="delete_webhook")

    def deliveries(
        self, name: str, *, limit: int, cursor: str | None, status: DeliveryStatus | None = None,
    ) -> Page[Delivery]:
        """A subscription's delivery log, newest event first (an index range on
        (webhook, event))."""
        with self.db.connect() as conn:
            hook = self._row(conn, name)
            query = (
                select(*_DELIVERY_COLUMNS)
                .select_from(deliveries.join(events, events.c.id == deliveries.c.event_id))
                .where(deliveries.c.webhook_id == hook["id"])
            )
            if status is not None:
                query = query.where(deliveries.c.status == status.value)
            if cursor is not None:
                query = query.where(deliveries.c.event_id < decode_cursor(cursor, numeric=True))
            query = query.order_by(deliveries.c.event_id.desc()).limit(limit + 1)
            found = [_delivery(r, name) for r in conn.execute(query).mappings()]
        more = len(found) > limit
        items = found[:limit]
        return Page(items=items, next_cursor=encode_cursor(items[-1].event_id) if more else None)

    def test(self, name: str) -> Delivery:
        """A ``webhook.test`` event for this subscription alone, due at once;
        :class:`Conflict` when it is disabled."""

        def tx(t: Tx) -> Delivery:
            hook = self._row(t.conn, name, lock=True)
            if not hook["enabled"]:
                raise Conflict(f"webhook {name!r} is disabled: enable it first",
                               details={"webhook": name})
            now = rows.to_db(db_now(t.conn))
            event = {"type": EventType.TEST.value, "occurred_at": now, "job_name": None,
                     "payload": None}
            event_id = t.conn.execute(insert(events).values(
                **event, job_id=None, run_id=None, fanned_out=True,
            )).inserted_primary_key
            assert event_id is not None
            payload = event_payload(event, None)
            t.conn.execute(update(events).where(events.c.id == event_id[0]).values(
                payload=json.dumps(payload, separators=(",", ":"))))
            t.conn.execute(insert(deliveries).values(
                webhook_id=hook["id"], event_id=event_id[0], status=DeliveryStatus.PENDING.value,
                attempts=0, next_attempt_at=now, created_at=now,
            ))
            found = t.conn.execute(
                select(*_DELIVERY_COLUMNS)
                .select_from(deliveries.join(events, events.c.id == deliveries.c.event_id))
                .where(deliveries.c.webhook_id == hook["id"], deliveries.c.event_id == event_id[0])
            ).mappings().one()
            return _delivery(found, name)

        return self.db.transaction(tx, name="test_webhook")

    def prune(
        self, before: datetime, *, batch: int = PRUNE_BATCH, stop: threading.Event | None = None
    ) -> tuple[int, int]:
        """Delete events that happened before the cut-off ``before`` (UTC, from the
        database clock: the run history's, see :func:`quartzlite.storage.history.prune_history`),
        with their deliveries whatever their status: (events, deliveries). Autocommitted
        statements in batches of the oldest events: an interrupted pass leaves whole
        batches deleted (a batch's deliveries go before its events), the next goes on."""
        cutoff = rows.to_db(before)

        def one_batch(conn: Connection) -> tuple[int, int]:
            ids = [r[0] for r in conn.execute(
                select(events.c.id).where(events.c.occurred_at < cutoff)
                .order_by(events.c.occurred_at).limit(batch)
            )]
            if not ids:
                return 0, 0
            gone = conn.execute(delete(deliveries).where(deliveries.c.event_id.in_(ids))).rowcount
            conn.execute(delete(events).where(events.c.id.in_(ids)))
            return len(ids), int(gone)

        totals = [0, 0]
        while True:
            if stop is not None and stop.is_set():
                raise TransientStoreError("prune stopped")
            found, gone = self.db.read(one_batch, name="prune_webhooks", stop=stop)
            totals[0] += found
            totals[1] += gone
            if found < batch:
                return totals[0], totals[1]


# -- delivery: what every node's webhooks thread does -------------------------------------------


class DeliveryStore:
    """Fan-out, claims and results of deliveries (see the module docstring). ``stop``
    (the node's fence): nothing commits once it is set."""

    def __init__(self, db: Database, *, stop: threading.Event | None = None) -> None:
        self.db = db
        self.stop = stop

    def fan_out(self, *, limit: int = 200) -> int:
        """Up to ``limit`` new events: their payload, and one delivery per matching
        enabled subscription created before the event. Returns how many events."""

        def tx(t: Tx) -> int:
            found = t.conn.execute(
                select(events).where(events.c.fanned_out.is_(False))
                .order_by(events.c.id).limit(limit).with_for_update(skip_locked=True)
            ).mappings().all()
            if not found:
                return 0
            # Shared locks: a subscription disabled meanwhile (its row updated) waits for
            # this transaction, then pauses what it fanned out.
            hooks = t.conn.execute(
                select(webhooks.c.id, webhooks.c.events, webhooks.c.job_prefix, webhooks.c.tag,
                       webhooks.c.created_at)
                .where(webhooks.c.enabled.is_(True)).with_for_update(read=True)
            ).mappings().all()
            run_ids = [e["run_id"] for e in found if e["run_id"] is not None]
            run_rows = {
                r["id"]: r for r in t.conn.execute(
                    select(runs.c.id, runs.c.planned_at, runs.c.slot_at, runs.c.attempt,
                           runs.c.status, runs.c.exit_code, runs.c.error, runs.c.node,
                           runs.c.started_at, runs.c.ended_at)
                    .where(runs.c.id.in_(run_ids))
                ).mappings()
            } if run_ids else {}
            job_ids = {e["job_id"] for e in found if e["job_id"] is not None}
            tags: dict[int, tuple[str, ...]] = {}
            if job_ids and any(h["tag"] for h in hooks):
                tags = {
                    r[0]: rows.split_tags(r[1]) for r in t.conn.execute(
                        select(jobs.c.id, jobs.c.tags).where(jobs.c.id.in_(sorted(job_ids)))
                    )
                }
            now = rows.to_db(db_now(t.conn))
            payloads = []
            new: list[dict[str, Any]] = []
            for event in found:
                payload = event_payload(event, run_rows.get(event["run_id"]))
                payloads.append({"b_id": event["id"],
                                 "b_payload": json.dumps(payload, separators=(",", ":"))})
                for hook in hooks:
                    if hook["created_at"] > event["occurred_at"]:
                        continue
                    if matches(events=rows.split_tags(hook["events"]), job_prefix=hook["job_prefix"],
                               tag=hook["tag"], event=event["type"], job_name=event["job_name"],
                               job_tags=tags.get(event["job_id"], ())):
                        new.append({"webhook_id": hook["id"], "event_id": event["id"],
                                    "status": DeliveryStatus.PENDING.value, "attempts": 0,
                                    "next_attempt_at": now, "created_at": now})
            t.conn.execute(
                update(events).where(events.c.id == bindparam("b_id"))
                .values(payload=bindparam("b_payload"), fanned_out=True),
                payloads,
            )
            if new:
                t.conn.execute(insert(deliveries).prefix_with("IGNORE"), new)
            return len(found)

        return self.db.transaction(tx, name="webhook_fan_out", stop=self.stop)

    def claim(
        self, *, session_id: str, limit: int, lease_s: float, max_attempts: int,
    ) -> list[ClaimedDelivery]:
        """Up to ``limit`` due deliveries, leased to ``session_id`` for one attempt each
        (``lease_s``: past it, the delivery is due again, for any node). A delivery whose
        last attempt was leased and never answered (its node died) fails here."""

        def tx(t: Tx) -> list[ClaimedDelivery]:
            found = t.conn.execute(
                select(deliveries.c.id, deliveries.c.webhook_id, deliveries.c.event_id,
                       deliveries.c.attempts)
                .where(deliveries.c.status == DeliveryStatus.PENDING.value,
                       deliveries.c.next_attempt_at <= func.now(6))
                .order_by(deliveries.c.next_attempt_at).limit(limit)
                .with_for_update(skip_locked=True)
            ).mappings().all()
            spent = [r["id"] for r in found if r["attempts"] >= max_attempts]
            if spent:
                t.conn.execute(update(deliveries).where(deliveries.c.id.in_(spent)).values(
                    status=DeliveryStatus.FAILED.value, next_attempt_at=None, claimed_by=None,
                    claim_until=None,
                    last_error=func.left(func.concat(
                        "gave up: no answer recorded for the last attempt (its node stopped); ",
                        func.coalesce(deliveries.c.last_error, "")), MAX_ERROR),
                ))
            go = [r for r in found if r["attempts"] < max_attempts]
            if not go:
                return []
            until = func.timestampadd(text("MICROSECOND"), int(lease_s * 1e6), func.now(6))
            t.conn.execute(update(deliveries).where(deliveries.c.id.in_([r["id"] for r in go])).values(
                attempts=deliveries.c.attempts + 1, claimed_by=session_id, claim_until=until,
                next_attempt_at=until,
            ))
            hooks = {r["id"]: r for r in t.conn.execute(
                select(webhooks.c.id, webhooks.c.url, webhooks.c.secret)
                .where(webhooks.c.id.in_({r["webhook_id"] for r in go}))
            ).mappings()}
            payloads = {r["id"]: r for r in t.conn.execute(
                select(events.c.id, events.c.type, events.c.payload)
                .where(events.c.id.in_({r["event_id"] for r in go}))
            ).mappings()}
            claimed = []
            for r in go:
                hook, event = hooks.get(r["webhook_id"]), payloads.get(r["event_id"])
                if hook is None or event is None or not event["payload"]:
                    continue  # deleted meanwhile (deletes take these rows' locks first)
                claimed.append(ClaimedDelivery(
                    id=r["id"], attempt=r["attempts"] + 1, url=hook["url"], secret=hook["secret"],
                    event=EventType(event["type"]), body=delivery_body(r["id"], event["payload"]),
                ))
            return claimed

        return self.db.transaction(tx, name="webhook_claim", stop=self.stop)

    def record(
        self, claimed: ClaimedDelivery, *, session_id: str, delivered: bool,
        status_code: int | None, error: str | None, retry_in_s: float | None,
    ) -> bool:
        """The answer to ``claimed``'s attempt: delivered, due again in ``retry_in_s``,
        or (``retry_in_s`` None) failed for good. Only while the claim is still this
        attempt's (the lease may have passed and another node claimed it again); False
        when it was not recorded."""
        values: dict[str, Any] = {
            "last_status_code": status_code,
            "last_error": None if error is None else error[:MAX_ERROR],
            "claimed_by": None, "claim_until": None,
        }
        if delivered:
            values.update(status=DeliveryStatus.DELIVERED.value, delivered_at=func.now(6),
                          next_attempt_at=None)
        elif retry_in_s is None:
            values.update(status=DeliveryStatus.FAILED.value, next_attempt_at=None)
        else:
            values["next_attempt_at"] = func.timestampadd(
                text("MICROSECOND"), int(retry_in_s * 1e6), func.now(6))
        statement = update(deliveries).where(
            deliveries.c.id == claimed.id, deliveries.c.attempts == claimed.attempt,
            deliveries.c.claimed_by == session_id,
            deliveries.c.status.in_([DeliveryStatus.PENDING.value, DeliveryStatus.PAUSED.value]),
        ).values(**values)
        return bool(self.db.transaction(
            lambda t: t.conn.execute(statement).rowcount, name="webhook_record", stop=self.stop
        ))


__all__ = [
    "DeliveryStore", "WebhookStore", "delivery_body", "event_payload", "record_node_expired",
    "record_run_events",
]
