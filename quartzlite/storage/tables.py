"""The schema, in one place. Alembic migrations spell the same columns out by hand;
tests/migrations checks that ``upgrade head`` builds exactly this metadata and that
sql/schema.sql matches it.

All instants are ``DATETIME(6)`` in UTC (the node's connections set ``time_zone``
to ``+00:00`` so ``NOW(6)`` is UTC too).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.mysql import DATETIME, DOUBLE, MEDIUMTEXT

metadata = MetaData()

_TABLE_ARGS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def _instant(name: str, nullable: bool = True) -> Column[object]:
    return Column(name, DATETIME(fsp=6), nullable=nullable)


#: Named lock rows taken with ``SELECT ... FOR UPDATE`` (go-crontab's lock table).
#: ``version`` is bumped by every management write under the job lock, so that a
#: node's heartbeat sees that jobs changed and wakes its scanner.
locks = Table(
    "ql_locks",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("version", BigInteger, nullable=False, server_default=text("0")),
    # Bumped by each holder on Galera (added by 0009): the write that makes two members'
    # holders conflict at certification (see NodeStore.lock).
    Column("seq", BigInteger, nullable=False, server_default=text("0")),
    **_TABLE_ARGS,
)

#: The lock names the migration inserts; a node refuses to start without them.
LOCK_NAMES = ("job", "session")

sessions = Table(
    "ql_sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    _instant("started_at", nullable=False),
    _instant("heartbeat_at", nullable=False),
    Column("clock_offset_ms", DOUBLE(asdecimal=False), nullable=False, server_default=text("0")),
    Column("capacity", Integer, nullable=False),
    Column("tags", String(512), nullable=False, server_default=text("''")),
    Column("version", String(32), nullable=False, server_default=text("''")),
    # The database server (host:port of the URL's host list) the node's heartbeat
    # reached last (added by 0009, hence last).
    Column("db_member", String(300), nullable=False, server_default=text("''")),
    Index("ix_ql_sessions_heartbeat", "heartbeat_at"),
    **_TABLE_ARGS,
)

jobs = Table(
    "ql_jobs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    # ``name`` is kept for history after a delete; ``active_name`` (NULL once
    # deleted) carries the uniqueness, so a deleted job's name can be used again.
    Column("name", String(128), nullable=False),
    Column("active_name", String(128), nullable=True),
    Column("schedule", String(255), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("target_kind", String(16), nullable=False),
    Column("command", Text, nullable=True),
    Column("callable", String(255), nullable=True),
    Column("kwargs", Text, nullable=False),
    Column("timeout_s", DOUBLE(asdecimal=False), nullable=True),
    Column("max_attempts", Integer, nullable=False),
    Column("retry_backoff_s", DOUBLE(asdecimal=False), nullable=False),
    Column("retry_max_backoff_s", DOUBLE(asdecimal=False), nullable=False),
    Column("misfire_policy", String(16), nullable=False),
    Column("misfire_grace_s", DOUBLE(asdecimal=False), nullable=False),
    Column("recovery_policy", String(16), nullable=False),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    # Sorted, comma-joined; '' = any node.
    Column("tags", String(512), nullable=False, server_default=text("''")),
    Column("description", String(1024), nullable=False, server_default=text("''")),
    Column("paused", Boolean, nullable=False, server_default=text("0")),
    Column("deleted", Boolean, nullable=False, server_default=text("0")),
    # Runtime state (go-crontab): idle -> prepared -> executing -> idle.
    Column("state", String(16), nullable=False),
    _instant("next_fire_at"),
    _instant("next_slot_at"),
    Column("next_attempt", Integer, nullable=False, server_default=text("1")),
    Column("owner_session", String(64), nullable=True),
    Column("fire_id", String(96), nullable=True),
    Column("kill_requested", Boolean, nullable=False, server_default=text("0")),
    _instant("prepared_at"),
    _instant("started_at"),
    _instant("last_ended_at"),
    _instant("created_at", nullable=False),
    _instant("updated_at", nullable=False),
    # Why the scheduler quarantined (paused) the job; NULL when it did not.
    Column("error", Text, nullable=True),
    # skip | catch_up: the slots that came due while the job's own run ran (added by
    # 0005, hence last; rows stored before it got catch_up).
    Column("overrun_policy", String(16), nullable=False),
    # The job's bounds (added by 0006, hence last): no slot before start_at or after
    # end_at fires; at most max_runs slots run; each slot is planned at the slot plus a
    # stable offset in [0, jitter_s]. NULL: no bound.
    _instant("start_at"),
    _instant("end_at"),
    Column("max_runs", Integer, nullable=True),
    Column("jitter_s", DOUBLE(asdecimal=False), nullable=False, server_default=text("0")),
    # Slots the job has run to their end (counted by the results transaction and
    # recovery); never reset, not even when max_runs or the schedule changes.
    Column("runs_done", Integer, nullable=False, server_default=text("0")),
    # Names of the job's exclusion calendars (ql_calendars.name), sorted, comma-joined;
    # '' = none (added by 0007, hence last).
    Column("calendars", String(1040), nullable=False, server_default=text("''")),
    # The status of the job's last run that ended with a known outcome (succeeded,
    # failed, timed_out, killed), set by the results transaction: a success after a
    # failure is a run.recovered event. NULL: none yet (added by 0011, hence last).
    Column("last_outcome", String(16), nullable=True),
    # Dependencies (added by 0013, hence last). ``upstream``: the names of the jobs whose
    # runs trigger this one, sorted, comma-joined ('' = none); ``upstream_on``: how their
    # slot must end (quartzlite.enums.UpstreamCondition). ``has_downstream``: some live
    # job names this one upstream; kept under the job lock by the writes that add or
    # remove a dependency, and read by the results transaction, which looks for the
    # downstream jobs to trigger only then.
    Column("upstream", String(1040), nullable=False, server_default=text("''")),
    Column("upstream_on", String(16), nullable=False, server_default=text("'success'")),
    Column("has_downstream", Boolean, nullable=False, server_default=text("0")),
    # Concurrency and broadcast (added by 0014, hence last). ``max_concurrency``: up to
    # this many runs of the job at once across the cluster (1: one at a time);
    # ``broadcast``: every live node matching the job's tags runs each slot (its shard).
    # Such a job's row plans the slots; its runs execute on *lanes*: hidden rows of this
    # table (``parent_id``: the job's row; ``active_name`` NULL) that copy its definition
    # and go idle -> prepared -> executing -> idle like any job. A lane takes one slot
    # at a time from its job (under the job lock) and keeps it through its retries. A
    # broadcast lane is pinned to one node's session (``pinned_session``) and carries
    # the slot's ``shard`` and ``shard_total``. ``saturated``: every lane the job may use
    # is busy, so its due slot waits (the due scan skips it); cleared under the job
    # row's lock when a lane frees.
    Column("max_concurrency", Integer, nullable=False, server_default=text("1")),
    Column("broadcast", Boolean, nullable=False, server_default=text("0")),
    Column("parent_id", BigInteger, nullable=True),
    Column("pinned_session", String(64), nullable=True),
    Column("shard", Integer, nullable=True),
    Column("shard_total", Integer, nullable=True),
    Column("saturated", Boolean, nullable=False, server_default=text("0")),
    # Moved by every write that gives a slot to the job's lanes or frees one: on Galera
    # (where a row lock holds on one member only) two such writes on two members then
    # conflict at certification, and the later runs again on what the other committed.
    Column("lanes_version", BigInteger, nullable=False, server_default=text("0")),
    UniqueConstraint("active_name", name="uq_ql_jobs_active_name"),
    # The due scan: state='idle' AND paused=0 AND deleted=0 AND next_fire_at <= :horizon.
    Index("ix_ql_jobs_due", "state", "paused", "deleted", "next_fire_at"),
    # Compensation, expiry and kill: what a session owns.
    Index("ix_ql_jobs_owner", "owner_session", "state"),
    Index("ix_ql_jobs_name", "name"),
    # The jobs with upstream jobs (upstream > ''): finding a job's downstream jobs reads
    # those only (a prefix: the column is longer than an index key may be).
    Index("ix_ql_jobs_upstream", "upstream", mysql_length=64),
    # A job's lanes.
    Index("ix_ql_jobs_parent", "parent_id", "state"),
    **_TABLE_ARGS,
)

runs = Table(
    "ql_runs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("job_name", String(128), nullable=False),
    Column("fire_id", String(96), nullable=True),
    # The instant this run was planned for: a schedule slot, or for a retry the
    # instant the retry was due. UNIQUE with the job (and shard): a slot can run only
    # once (once per shard for a broadcast job).
    _instant("planned_at", nullable=False),
    # The schedule slot this run belongs to (planned_at for a first attempt).
    _instant("slot_at", nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    _instant("started_at"),
    _instant("ended_at"),
    Column("session_id", String(64), nullable=True),
    Column("node", String(255), nullable=True),
    Column("status", String(16), nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("output", MEDIUMTEXT, nullable=True),
    Column("error", Text, nullable=True),
    # The parameters the slot was triggered with: a JSON object copied from its
    # ql_requests row by the fire transaction (every attempt of the slot gets them);
    # NULL: none (added by 0012, hence last).
    Column("params", Text, nullable=True),
    # The upstream job's run whose end triggered the slot, copied from its ql_requests
    # row like ``params``; NULL: none (added by 0013, hence last).
    Column("upstream_run_id", BigInteger, nullable=True),
    # A broadcast run's shard (0..shard_total-1); 0 for every other run, so that the key
    # below keeps one run per slot for them. ``shard_total``: NULL but for broadcast
    # runs (added by 0014, hence last).
    Column("shard", Integer, nullable=False, server_default=text("0")),
    Column("shard_total", Integer, nullable=True),
    UniqueConstraint("job_id", "planned_at", "shard", name="uq_ql_runs_job_planned"),
    Index("ix_ql_runs_job_name", "job_name", "id"),
    Index("ix_ql_runs_status", "status", "planned_at"),
    Index("ix_ql_runs_session", "session_id", "status"),
    # Pruning by age, and the dashboard's chart of the last hours (covering: it reads
    # lateness from the index alone).
    Index("ix_ql_runs_planned", "planned_at", "started_at"),
    **_TABLE_ARGS,
)

#: What a slot was asked for with (added by 0012): one row per (job, slot) written by the
#: transaction that made the slot due (a trigger with parameters: ``cause`` 'trigger'; a
#: dependency: 'upstream', with the run that triggered it). The fire transaction joins
#: it on (job_id, slot_at) to copy ``params`` (a JSON object, or NULL) into every run row
#: of the slot. Pruned with the run history once the job has moved on from the slot.
requests = Table(
    "ql_requests",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    _instant("slot_at", nullable=False),
    Column("params", Text, nullable=True),
    Column("cause", String(16), nullable=False),
    Column("upstream_run_id", BigInteger, nullable=True),
    _instant("created_at", nullable=False),
    # Added by 0013, hence last. ``planned_at``: the instant the slot runs at (an
    # upstream request: the upstream run's planned instant); NULL for a trigger.
    # ``taken_at``: when a scan made the slot the job's next fire; NULL: pending (an
    # upstream request waits for its job to be idle with nothing planned, not paused).
    # A trigger's request is taken when written (the trigger plans the slot itself).
    _instant("planned_at"),
    _instant("taken_at"),
    # The fire transaction's join, and at most one request per slot.
    UniqueConstraint("job_id", "slot_at", name="uq_ql_requests_job_slot"),
    # Pruning by age.
    Index("ix_ql_requests_created", "created_at"),
    # The scan's probe for pending requests (taken_at IS NULL): each job's oldest, by a
    # loose index scan (one dive per job, however many wait).
    Index("ix_ql_requests_pending", "taken_at", "job_id", "id"),
    **_TABLE_ARGS,
)

#: Exclusion calendars, by name (a small table: nodes read it whole when the job lock's
#: version moves). ``rules``: a JSON object (dates, yearly, ranges, windows).
calendars = Table(
    "ql_calendars",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("description", String(1024), nullable=False, server_default=text("''")),
    Column("timezone", String(64), nullable=False),
    Column("rules", Text, nullable=False),
    _instant("created_at", nullable=False),
    _instant("updated_at", nullable=False),
    UniqueConstraint("name", name="uq_ql_calendars_name"),
    **_TABLE_ARGS,
)

#: API tokens. Only the sha256 (hex) of a secret is kept; the secret is shown once.
tokens = Table(
    "ql_tokens",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    _instant("created_at", nullable=False),
    UniqueConstraint("name", name="uq_ql_tokens_name"),
    # Every authenticated request looks its token up by hash.
    UniqueConstraint("token_hash", name="uq_ql_tokens_hash"),
    **_TABLE_ARGS,
)

#: Dashboard sign-ins (/ui): one row per browser session. ``id`` is the sha256 (hex) of
#: the cookie's secret; ``token_hash`` the signed-in token's, so that revoking the token
#: ends its sessions (a session is valid only while a token with that hash exists).
#: ``csrf`` is the session's form token. Idle and absolute expiry are checked against
#: ``seen_at`` and ``created_at`` by the database clock.
ui_sessions = Table(
    "ql_ui_sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("client_address", String(64), nullable=True),
    _instant("created_at", nullable=False),
    _instant("seen_at", nullable=False),
    Index("ix_ql_ui_sessions_token", "token_hash"),
    Index("ix_ql_ui_sessions_seen", "seen_at"),
    **_TABLE_ARGS,
)

#: One row per write made through the HTTP API (who, what, which job, from where).
audit = Table(
    "ql_audit",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    _instant("recorded_at", nullable=False),
    Column("token_name", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("job_name", String(128), nullable=True),
    Column("client_address", String(64), nullable=True),
    # A JSON object.
    Column("details", Text, nullable=False),
    # api, ui, cli or library (quartzlite.enums.AuditSource); added by 0010, hence last.
    Column("source", String(16), nullable=False, server_default=text("'api'")),
    # Paging is newest first by id; these serve the job, token and source filters.
    Index("ix_ql_audit_job_name", "job_name", "id"),
    Index("ix_ql_audit_token_name", "token_name", "id"),
    Index("ix_ql_audit_source", "source", "id"),
    Index("ix_ql_audit_recorded", "recorded_at"),
    **_TABLE_ARGS,
)

#: Webhook subscriptions (added by 0011). ``events``: event types, comma-joined.
#: ``secret`` is kept as it is (not hashed): it signs every delivery (HMAC-SHA256).
webhooks = Table(
    "ql_webhooks",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("events", String(255), nullable=False),
    Column("job_prefix", String(128), nullable=True),
    Column("tag", String(32), nullable=True),
    Column("secret", String(64), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("1")),
    _instant("created_at", nullable=False),
    UniqueConstraint("name", name="uq_ql_webhooks_name"),
    **_TABLE_ARGS,
)

#: The outbox (added by 0011): one row per event, written by the transaction that makes
#: it happen (see quartzlite.storage.webhooks). ``payload``: the event's JSON document,
#: completed when a node fans it out into deliveries (``fanned_out``).
events = Table(
    "ql_events",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("type", String(32), nullable=False),
    _instant("occurred_at", nullable=False),
    Column("job_id", BigInteger, nullable=True),
    Column("job_name", String(128), nullable=True),
    Column("run_id", BigInteger, nullable=True),
    Column("payload", Text, nullable=True),
    Column("fanned_out", Boolean, nullable=False, server_default=text("0")),
    # One event per run and type: a transaction run again after a commit of unknown
    # outcome writes no second one (NULL run ids never collide).
    UniqueConstraint("run_id", "type", name="uq_ql_events_run_type"),
    # The fan-out: the oldest events not fanned out yet.
    Index("ix_ql_events_fan_out", "fanned_out", "id"),
    # Pruning by age.
    Index("ix_ql_events_occurred", "occurred_at"),
    **_TABLE_ARGS,
)

#: One event's delivery to one subscription (added by 0011): its id is the delivery id
#: receivers see on every attempt. ``claimed_by``/``claim_until``: the node session
#: attempting it now, and until when.
deliveries = Table(
    "ql_deliveries",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("webhook_id", BigInteger, nullable=False),
    Column("event_id", BigInteger, nullable=False),
    # pending | paused | delivered | failed (quartzlite.enums.DeliveryStatus)
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    _instant("next_attempt_at"),
    Column("claimed_by", String(64), nullable=True),
    _instant("claim_until"),
    Column("last_status_code", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    _instant("delivered_at"),
    _instant("created_at", nullable=False),
    # Once per subscription and event; also a subscription's log, newest event first.
    UniqueConstraint("webhook_id", "event_id", name="uq_ql_deliveries_webhook_event"),
    # The claim: due pending deliveries, earliest first.
    Index("ix_ql_deliveries_due", "status", "next_attempt_at"),
    # Pruning (deliveries of old events).
    Index("ix_ql_deliveries_event", "event_id"),
    **_TABLE_ARGS,
)
