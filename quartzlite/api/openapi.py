"""The OpenAPI 3.1 document of the API, as a Python dict, served at
/api/v1/openapi.json (without a token). tests/api checks it against the live app with
schemathesis, so a route and its description cannot drift apart silently."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from quartzlite import __version__
from quartzlite.client import (
    LAST_STATUSES,
    MAX_ATTEMPTS,
    MAX_BACKOFF_S,
    MAX_COMMAND_BYTES,
    MAX_CONCURRENCY,
    MAX_JITTER_S,
    MAX_JOB_CALENDARS,
    MAX_PAGE,
    MAX_RUNS,
    MAX_TIMEOUT_S,
    MAX_UPSTREAM,
)
from quartzlite.enums import (
    SUBSCRIBABLE_EVENTS,
    AuditSource,
    DeliveryStatus,
    EventType,
    JobState,
    MisfirePolicy,
    OverrunPolicy,
    RecoveryPolicy,
    RunStatus,
    UpstreamCondition,
)
from quartzlite.schedule.calendars import MAX_ENTRIES
from quartzlite.validation import (
    MAX_PARAM_STRING_BYTES,
    MAX_PARAMS,
    MAX_PARAMS_BYTES,
    MAX_TAGS,
    NAME_PATTERN,
    PARAM_NAME_PATTERN,
    TAG_PATTERN,
)
from quartzlite.webhooks import MAX_URL

from .auth import public

bp = Blueprint("openapi", __name__)

Schema = dict[str, Any]

CALLABLE_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    kind = schema["type"]
    return {**schema, "type": [kind, "null"]}


INSTANT: Schema = {"type": "string", "format": "date-time"}


def _values(enum: Any) -> list[str]:
    return [e.value for e in enum]


#: The fields a user writes (quartzlite.models.JobSpec), with the client's limits.
JOB_FIELDS: dict[str, Schema] = {
    "name": {"type": "string", "pattern": NAME_PATTERN, "description": "unique; the key"},
    "schedule": {
        "type": "string", "minLength": 1, "maxLength": 255,
        "description": "5/6/7-field cron, Quartz cron (? L W #), '@every 90s', '@at ISO-8601', "
                       "'@manual' (no slots: runs when triggered or by its upstream jobs)",
        "examples": ["*/5 * * * *", "@every 90s"],
    },
    "timezone": {"type": "string", "minLength": 1, "maxLength": 64, "default": "UTC"},
    "start_at": nullable({
        **INSTANT,
        "description": "no slot before this instant fires (ISO-8601 with an offset or Z); "
                       "the first fire is the schedule's first slot at or after it (@every: "
                       "start_at + k * period); null: from now",
    }),
    "end_at": nullable({
        **INSTANT,
        "description": "no slot after this instant fires (after start_at); once past it the "
                       "job has no next fire and shows finished; null: no end",
    }),
    "max_runs": nullable({
        "type": "integer", "minimum": 1, "maximum": MAX_RUNS,
        "description": "the job runs at most this many slots (a slot's retries are one run), "
                       "then shows finished; null: no limit",
    }),
    "jitter_s": {
        "type": "number", "minimum": 0, "maximum": MAX_JITTER_S, "default": 0.0,
        "description": "each slot's planned instant is the slot plus a stable offset in "
                       "[0, jitter_s] (milliseconds), the same on every node",
    },
    "command": nullable({
        "type": "string", "minLength": 1, "maxLength": MAX_COMMAND_BYTES,
        "description": "shell command run with bash -c (give this or callable)",
    }),
    "callable": nullable({
        "type": "string", "pattern": CALLABLE_PATTERN, "maxLength": 255,
        "description": "package.module:function (give this or command)",
    }),
    "kwargs": {"type": "object", "description": "keyword arguments of the callable"},
    "timeout_s": nullable({"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S}),
    "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS, "default": 1},
    "retry_backoff_s": {"type": "number", "minimum": 0, "maximum": MAX_BACKOFF_S, "default": 1.0},
    "retry_max_backoff_s": {
        "type": "number", "minimum": 0, "maximum": MAX_BACKOFF_S, "default": 300.0,
    },
    "misfire_policy": {"type": "string", "enum": _values(MisfirePolicy), "default": "fire_once"},
    "misfire_grace_s": {"type": "number", "minimum": 0, "maximum": MAX_BACKOFF_S, "default": 60.0},
    "overrun_policy": {
        "type": "string", "enum": _values(OverrunPolicy), "default": "skip",
        "description": "the slots that came due while the job's own run ran: recorded missed, "
                       "the job goes on at its next slot (skip), or left to the misfire policy "
                       "(catch_up)",
    },
    "recovery_policy": {"type": "string", "enum": _values(RecoveryPolicy), "default": "rerun"},
    "priority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0},
    "tags": {
        "type": "array", "maxItems": MAX_TAGS,
        "items": {"type": "string", "pattern": TAG_PATTERN},
        "description": "the job runs only on nodes having all of these tags",
    },
    "description": {"type": "string", "maxLength": 1024, "default": ""},
    "paused": {"type": "boolean", "default": False},
    "calendars": {
        "type": "array", "maxItems": MAX_JOB_CALENDARS,
        "items": {"type": "string", "pattern": NAME_PATTERN},
        "description": "names of exclusion calendars (GET /calendars): a slot in a time one "
                       "of them excludes is skipped, neither run nor recorded missed",
    },
    "upstream": {
        "type": "array", "maxItems": MAX_UPSTREAM,
        "items": {"type": "string", "pattern": NAME_PATTERN},
        "description": "names of existing jobs whose runs trigger this one: when a slot of "
                       "one ends as upstream_on says, this job runs once for that slot (same "
                       "planned instant and slot); needs the schedule @manual; no cycle",
    },
    "upstream_on": {
        "type": "string", "enum": _values(UpstreamCondition), "default": "success",
        "description": "how an upstream slot must end: success (succeeded), failure (failed, "
                       "timed out, killed, or abandoned for good) or completion (either)",
    },
    "max_concurrency": {
        "type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY, "default": 1,
        "description": "up to this many runs of the job at once across the cluster, each slot "
                       "still run once; must be 1 for a broadcast job; changing it between 1 "
                       "and more is refused (409) while the job has a run in flight",
    },
    "broadcast": {
        "type": "boolean", "default": False,
        "description": "every live node whose tags match the job's runs each slot, each run "
                       "with its shard (index, total); changing it is refused (409) while the "
                       "job has a run in flight",
    },
}

DATE: Schema = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
                "examples": ["2026-12-25"]}

#: What a calendar excludes, each read in the calendar's timezone.
CALENDAR_RULES: Schema = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "description": "at least one entry in all; each list holds at most "
                   f"{MAX_ENTRIES} entries",
    "properties": {
        "dates": {"type": "array", "maxItems": MAX_ENTRIES, "items": DATE,
                  "description": "whole local days (YYYY-MM-DD, years 1970-9997)"},
        "yearly": {"type": "array", "maxItems": MAX_ENTRIES,
                   "items": {"type": "string", "pattern": r"^[0-9]{2}-[0-9]{2}$",
                             "examples": ["12-25", "02-29"]},
                   "description": "whole local days every year (MM-DD)"},
        "ranges": {"type": "array", "maxItems": MAX_ENTRIES, "items": {
            "type": "object", "additionalProperties": False, "required": ["from", "to"],
            "properties": {"from": DATE, "to": DATE},
        }, "description": "whole local days from..to, inclusive (from <= to)"},
        "windows": {"type": "array", "maxItems": MAX_ENTRIES,
                    "items": {"type": "string", "minLength": 1, "maxLength": 255,
                              "examples": ["* * 0-7 ? * *", "* 12 * * MON-FRI"]},
                    "description": "5-field cron or 6/7-field Quartz expressions: an instant "
                                   "whose wall time matches (its minute for 5 fields, its "
                                   "second for Quartz) is excluded"},
    },
}

CALENDAR_FIELDS: dict[str, Schema] = {
    "name": {"type": "string", "pattern": NAME_PATTERN, "description": "unique; the key"},
    "timezone": {"type": "string", "minLength": 1, "maxLength": 64, "default": "UTC",
                 "description": "IANA timezone the rules are read in"},
    "description": {"type": "string", "maxLength": 1024, "default": ""},
    "rules": CALENDAR_RULES,
}


#: Trigger parameters (quartzlite.validation.validate_params): scalars by name.
PARAMS: Schema = {
    "type": "object",
    "maxProperties": MAX_PARAMS,
    "propertyNames": {"pattern": PARAM_NAME_PATTERN},
    "additionalProperties": {
        "type": ["string", "number", "boolean", "null"],
        "maxLength": MAX_PARAM_STRING_BYTES,
        "description": f"a string (at most {MAX_PARAM_STRING_BYTES} bytes of UTF-8, no NUL), "
                       "a number, a boolean or null",
    },
}


def _job_input(required: list[str], description: str, *, min_properties: int = 0) -> Schema:
    schema: Schema = {
        "type": "object",
        "description": description,
        "properties": JOB_FIELDS,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    if min_properties:
        schema["minProperties"] = min_properties
    return schema


def _page(item: str) -> Schema:
    return {
        "type": "object",
        "required": ["items", "next_cursor"],
        "properties": {
            "items": {"type": "array", "items": ref(item)},
            "next_cursor": nullable({
                "type": "string", "description": "pass as ?cursor= for the next page; null on the last",
            }),
        },
    }


def _object(properties: dict[str, Schema], *, optional: tuple[str, ...] = ()) -> Schema:
    return {
        "type": "object",
        "required": [name for name in properties if name not in optional],
        "properties": properties,
    }


#: The fields of a webhook subscription a user writes (the client's checks).
WEBHOOK_FIELDS: dict[str, Schema] = {
    "name": {"type": "string", "pattern": NAME_PATTERN, "description": "unique; the key"},
    "url": {"type": "string", "pattern": "^https?://", "minLength": 8, "maxLength": MAX_URL,
            "description": "where deliveries are POSTed (http or https, ASCII)"},
    "events": {
        "type": "array", "minItems": 1,
        "items": {"type": "string", "enum": [e.value for e in SUBSCRIBABLE_EVENTS]},
        "description": "the event types to deliver",
    },
    "job_prefix": {
        "type": ["string", "null"], "pattern": "^([A-Za-z0-9][A-Za-z0-9._-]{0,127})?$",
        "description": "only events of jobs whose name starts with this (null or '': any job; "
                       "node events always)",
    },
    "tag": {
        "type": ["string", "null"], "pattern": "^([a-z0-9][a-z0-9_.-]{0,31})?$",
        "description": "only events of jobs having this tag (null or '': any job; node events "
                       "always)",
    },
    "enabled": {"type": "boolean", "default": True},
}

WEBHOOK_OUT: dict[str, Schema] = {
    "name": {"type": "string"},
    "url": {"type": "string"},
    "events": {"type": "array", "items": {"type": "string", "enum": _values(EventType)}},
    "job_prefix": nullable({"type": "string"}),
    "tag": nullable({"type": "string"}),
    "enabled": {"type": "boolean"},
    "created_at": INSTANT,
}

SCHEMAS: dict[str, Schema] = {
    "CalendarInput": {
        "type": "object", "description": "A new exclusion calendar (POST /calendars).",
        "properties": CALENDAR_FIELDS, "additionalProperties": False,
        "required": ["name", "rules"],
        "examples": [{"name": "holidays", "timezone": "Europe/Paris",
                      "rules": {"dates": ["2026-12-25"], "yearly": ["01-01"]}}],
    },
    "CalendarReplace": {
        "type": "object",
        "description": "A whole calendar (PUT /calendars/{name}); name optional, must match.",
        "properties": CALENDAR_FIELDS, "additionalProperties": False, "required": ["rules"],
        "examples": [{"rules": {"windows": ["* * 0-7 ? * *"]}}],
    },
    "Calendar": _object({
        "name": {"type": "string"},
        "timezone": {"type": "string"},
        "description": {"type": "string"},
        "rules": _object({
            "dates": {"type": "array", "items": {"type": "string"}},
            "yearly": {"type": "array", "items": {"type": "string"}},
            "ranges": {"type": "array", "items": _object({
                "from": {"type": "string"}, "to": {"type": "string"}})},
            "windows": {"type": "array", "items": {"type": "string"}},
        }),
        "created_at": INSTANT,
        "updated_at": INSTANT,
    }),
    "CalendarList": _object({"items": {"type": "array", "items": ref("Calendar")}}),
    "JobInput": {
        **_job_input(["name", "schedule"], "A new job (POST /jobs)."),
        "examples": [
            {"name": "nightly-report", "schedule": "30 2 * * *", "timezone": "Europe/Paris",
             "command": "echo report", "timeout_s": 600, "tags": ["reports"]},
            {"name": "heartbeat", "schedule": "@every 90s", "command": "true", "paused": True},
        ],
    },
    "JobReplace": {
        **_job_input(
            ["schedule"], "A whole job definition (PUT /jobs/{name}); name optional, must match."
        ),
        "examples": [{"schedule": "0 */6 * * *", "command": "echo replaced", "max_attempts": 3}],
    },
    "JobChanges": {
        **_job_input([], "Some fields of a job (PATCH); the rest stay.", min_properties=1),
        "examples": [{"description": "changed"}, {"schedule": "@every 5m"}],
    },
    "Job": _object({
        "name": {"type": "string"},
        "schedule": {"type": "string"},
        "timezone": {"type": "string"},
        "start_at": nullable(INSTANT),
        "end_at": nullable(INSTANT),
        "max_runs": nullable({"type": "integer"}),
        "jitter_s": {"type": "number"},
        "command": nullable({"type": "string"}),
        "callable": nullable({"type": "string"}),
        "kwargs": {"type": "object"},
        "timeout_s": nullable({"type": "number"}),
        "max_attempts": {"type": "integer"},
        "retry_backoff_s": {"type": "number"},
        "retry_max_backoff_s": {"type": "number"},
        "misfire_policy": JOB_FIELDS["misfire_policy"],
        "misfire_grace_s": {"type": "number"},
        "overrun_policy": JOB_FIELDS["overrun_policy"],
        "recovery_policy": JOB_FIELDS["recovery_policy"],
        "priority": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "description": {"type": "string"},
        "paused": {"type": "boolean"},
        "calendars": {"type": "array", "items": {"type": "string"}},
        "upstream": {"type": "array", "items": {"type": "string"}},
        "upstream_on": JOB_FIELDS["upstream_on"],
        "max_concurrency": JOB_FIELDS["max_concurrency"],
        "broadcast": JOB_FIELDS["broadcast"],
        "id": {"type": "integer"},
        "state": {"type": "string", "enum": _values(JobState)},
        "finished": {
            "type": "boolean",
            "description": "idle, not paused and no next fire: its end_at passed, it ran "
                           "max_runs slots, or its schedule has no slot left (an @at that "
                           "fired; a @manual job only after max_runs); state stays idle",
        },
        "runs_done": {
            "type": "integer",
            "description": "slots the job has run (counted toward max_runs; never reset)",
        },
        "deleted": {"type": "boolean"},
        "next_fire_at": nullable(INSTANT),
        "next_attempt": {"type": "integer"},
        "owner_session": nullable({"type": "string"}),
        "fire_id": nullable({"type": "string"}),
        "kill_requested": {"type": "boolean"},
        "error": nullable({"type": "string"}),
        "prepared_at": nullable(INSTANT),
        "started_at": nullable(INSTANT),
        "last_ended_at": nullable(INSTANT),
        "created_at": INSTANT,
        "updated_at": INSTANT,
    }),
    "JobDetail": {
        "allOf": [
            ref("Job"),
            _object({
                "owner_node": nullable({"type": "string", "description": "host:pid"}),
                "upcoming": {"type": "array", "items": INSTANT},
                "last_run": nullable(ref("Run")),
                "downstream": {
                    "type": "array", "items": {"type": "string"},
                    "description": "the live jobs that name this one upstream (read-only)",
                },
            }),
        ],
    },
    "Run": _object(
        {
            "id": {"type": "integer"},
            "job": {"type": "string"},
            "job_id": {"type": "integer"},
            "fire_id": nullable({"type": "string"}),
            "planned_at": INSTANT,
            "slot_at": INSTANT,
            "attempt": {"type": "integer"},
            "started_at": nullable(INSTANT),
            "ended_at": nullable(INSTANT),
            "lateness_ms": nullable({"type": "number"}),
            "session_id": nullable({"type": "string"}),
            "node": nullable({"type": "string", "description": "host:pid"}),
            "status": {"type": "string", "enum": _values(RunStatus)},
            "exit_code": nullable({"type": "integer"}),
            "error": nullable({"type": "string"}),
            "params": nullable({**PARAMS, "description": "the parameters the run's slot was "
                                "triggered with (every attempt of the slot has them)"}),
            "upstream_run_id": nullable({
                "type": "integer", "description": "the upstream job's run whose end triggered "
                "this run's slot (GET /runs/{id}); null: not triggered by an upstream job"}),
            "shard": nullable({
                **_object({"index": {"type": "integer", "minimum": 0},
                           "total": {"type": "integer", "minimum": 1}}),
                "description": "a broadcast run's part of its slot: index in 0..total-1, total "
                               "the live nodes that matched the job when the slot fired; null: "
                               "not a broadcast run"}),
            "output": {"type": "string", "description": "the output tail (GET /runs/{id} "
                       "only); while a shell run runs, what it printed so far"},
            "output_live": {"type": "boolean", "description": "the run is still running: "
                            "its output is the output so far (GET /runs/{id} only)"},
        },
        optional=("output", "output_live"),
    ),
    "TriggerInput": {
        "type": "object",
        "description": "What POST /jobs/{name}/trigger may carry (the body is optional).",
        "additionalProperties": False,
        "properties": {"params": nullable({
            **PARAMS,
            "description": "parameters of the run: merged over a callable's kwargs (they "
                           "win), exported to a shell command as QUARTZLITE_PARAM_<NAME> (the "
                           "name upper-cased: no two names may differ only in case; null is "
                           "the empty string, numbers and booleans their JSON spelling); at "
                           f"most {MAX_PARAMS_BYTES} bytes of JSON in all",
        })},
    },
    "Node": _object({
        "id": {"type": "string", "description": "the session id"},
        "name": {"type": "string", "description": "host:pid, as runs name it"},
        "host": {"type": "string"},
        "pid": {"type": "integer"},
        "started_at": INSTANT,
        "heartbeat_at": INSTANT,
        "heartbeat_age_s": {"type": "number", "description": "by the database clock"},
        "clock_offset_ms": {"type": "number", "description": "database clock minus node clock"},
        "capacity": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "version": {"type": "string"},
        "running_jobs": {"type": "array", "items": {"type": "string"}},
        "db_member": {"type": "string",
                      "description": "the database server (host:port) its heartbeat reached last"},
    }),
    "Cluster": _object({"now": INSTANT, "nodes": {"type": "array", "items": ref("Node")}}),
    "AuditEntry": _object({
        "id": {"type": "integer"},
        "at": INSTANT,
        "token": {"type": "string", "description": "who: the token's name (source api or ui), "
                                                   "or the actor (cli: user@host; library: what "
                                                   "the program gave, user@host by default)"},
        "action": {"type": "string", "description": "api and ui: the endpoint, e.g. jobs.create; "
                                                    "cli and library: the use case, e.g. job.add"},
        "job": nullable({"type": "string"}),
        "client_address": nullable({"type": "string"}),
        "details": {"type": "object", "description": "api and ui: method, path, status, error, "
                                                     "body; cli and library: the input (body), "
                                                     "what it did, error"},
        "source": {"type": "string", "enum": _values(AuditSource),
                   "description": "which way the change came"},
    }),
    "WebhookInput": {
        "type": "object", "description": "A new webhook subscription (POST /webhooks).",
        "properties": WEBHOOK_FIELDS, "additionalProperties": False,
        "required": ["name", "url", "events"],
        "examples": [{"name": "ops-alerts", "url": "https://alerts.example.com/quartzlite",
                      "events": ["run.failed", "run.timed_out", "node.expired"],
                      "job_prefix": "etl-"}],
    },
    "WebhookChanges": {
        "type": "object", "description": "Some fields of a subscription (PATCH); the rest stay.",
        "properties": {k: v for k, v in WEBHOOK_FIELDS.items() if k != "name"},
        "additionalProperties": False, "minProperties": 1,
        "examples": [{"enabled": False}, {"events": ["run.failed"]}],
    },
    "Webhook": _object(WEBHOOK_OUT),
    "WebhookCreated": _object({
        **WEBHOOK_OUT,
        "secret": {"type": "string", "description": "signs every delivery (HMAC-SHA256); "
                   "shown this once"},
    }),
    "WebhookList": _object({"items": {"type": "array", "items": ref("Webhook")}}),
    "Delivery": _object({
        "id": {"type": "integer", "description": "the delivery id, sent as X-Quartzlite-Delivery "
               "on every attempt"},
        "webhook": {"type": "string"},
        "event": {"type": "string", "enum": _values(EventType)},
        "event_id": {"type": "integer"},
        "occurred_at": INSTANT,
        "job": nullable({"type": "string"}),
        "run_id": nullable({"type": "integer"}),
        "status": {"type": "string", "enum": _values(DeliveryStatus),
                   "description": "pending (due at next_attempt_at), paused (its webhook is "
                                  "disabled), delivered (a 2xx), failed (gave up)"},
        "attempts": {"type": "integer", "minimum": 0},
        "next_attempt_at": nullable(INSTANT),
        "last_status_code": nullable({"type": "integer"}),
        "last_error": nullable({"type": "string"}),
        "delivered_at": nullable(INSTANT),
        "created_at": INSTANT,
    }),
    "DeliveryPage": _page("Delivery"),
    "JobPage": _page("Job"),
    "RunPage": _page("Run"),
    "AuditPage": _page("AuditEntry"),
    "Preview": _object({
        "schedule": {"type": "string"},
        "timezone": {"type": "string"},
        "calendars": {"type": "array", "items": {"type": "string"}},
        "from": INSTANT,
        "times": {"type": "array", "items": INSTANT},
    }),
    "PruneInput": {
        "type": "object",
        "required": ["older_than"],
        "additionalProperties": False,
        "properties": {"older_than": {
            "oneOf": [{"type": "string", "examples": ["90d", "12h"]},
                      {"type": "number", "minimum": 60, "maximum": 3153600000}],
            "description": "finished runs planned longer ago than this go (seconds, or a "
                           "duration; 60 s to 100 years)",
        }},
    },
    "Pruned": _object({
        "runs": {"type": "integer", "minimum": 0},
        "jobs": {"type": "integer", "minimum": 0, "description": "deleted jobs removed"},
        "events": {"type": "integer", "minimum": 0, "description": "webhook events removed"},
        "deliveries": {"type": "integer", "minimum": 0,
                       "description": "their deliveries removed, whatever their status"},
        "before": INSTANT,
    }),
    "Health": _object({"status": {"type": "string", "enum": ["ok"]}}),
    "Ready": _object({
        "status": {"type": "string", "enum": ["ready"]},
        "checks": {"type": "object", "additionalProperties": {"type": "string"}},
    }),
    "Error": _object({
        "error": _object({
            "code": {"type": "string", "examples": ["validation_error", "not_found"]},
            "message": {"type": "string"},
            "details": {
                "type": "object",
                "description": "for validation errors: field and reason",
                "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
            },
        }),
    }),
}

ERROR_TEXT = {
    400: "Invalid input: details.field names the field, details.reason says why",
    401: "No token, or an unknown or revoked one",
    403: "The token's role may not do this (viewers only read)",
    404: "No such job, run, calendar, webhook or route",
    409: "Conflict: the name exists, the job runs (trigger) or does not run (kill), the "
         "calendar is in use (delete), the webhook is disabled (test), max_concurrency or "
         "broadcast changed while the job has a run in flight (update, replace)",
    413: "The body is larger than the limit (1 MiB)",
    429: "Too many refused writes from this token or address: retry after Retry-After seconds",
    503: "The database is unavailable (retry) or, for /readyz, not ready",
}


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


#: What a client can do next with the job a response names (OpenAPI links).
JOB_LINKS: dict[str, Schema] = {
    f"{operation}": {"operationId": operation, "parameters": {"name": "$response.body#/name"}}
    for operation in ("getJob", "updateJob", "deleteJob", "pauseJob", "resumeJob", "triggerJob",
                      "killJob", "listJobRuns")
}


def _linked(response: Schema) -> Schema:
    return {**response, "links": JOB_LINKS}


def _errors(*statuses: int) -> dict[str, Schema]:
    out = {str(s): _json(ref("Error"), ERROR_TEXT[s]) for s in statuses}
    out["default"] = _json(ref("Error"), "Any other error, in the same shape")
    return out


def _param(name: str, where: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema, "description": description}


JOB_NAME = _param("name", "path", {"type": "string", "pattern": NAME_PATTERN}, "the job's name")
WEBHOOK_NAME = _param("name", "path", {"type": "string", "pattern": NAME_PATTERN},
                      "the webhook's name")
CALENDAR_NAME = _param("name", "path", {"type": "string", "pattern": NAME_PATTERN},
                       "the calendar's name")
LIMIT = _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE,
                                  "default": 100}, "page size")
CURSOR = _param("cursor", "query", {"type": "string"}, "next_cursor of the previous page")
RUN_FILTERS = [
    _param("status", "query", {"type": "string", "enum": _values(RunStatus)}, "run status"),
    _param("since", "query", INSTANT, "planned at or after (with offset, e.g. ...Z)"),
    _param("until", "query", INSTANT, "planned before (with offset)"),
    LIMIT,
    CURSOR,
]
WRITE = (400, 401, 403, 404, 409, 429, 503)


def _op(operation_id: str, summary: str, responses: dict[str, Schema], *,
        tag: str, parameters: list[Schema] | None = None, body: Schema | None = None,
        public_: bool = False, body_required: bool = True) -> Schema:
    op: Schema = {"operationId": operation_id, "summary": summary, "tags": [tag],
                  "responses": responses}
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {"application/json": {"schema": body}}}
    if public_:
        op["security"] = []
    return op


def _control(verb: str, summary: str, status: int, conflict: bool,
             body: Schema | None = None) -> Schema:
    """``body``: an optional request body (413 when too large)."""
    codes = (400, 401, 403, 404, 409, 429, 503) if conflict else (400, 401, 403, 404, 429, 503)
    if body is not None:
        codes = tuple(sorted((*codes, 413)))
    return {"parameters": [JOB_NAME], "post": _op(
        f"{verb}Job", summary, {str(status): _json(ref("Job"), "The job"), **_errors(*codes)},
        tag="jobs", body=body, body_required=False,
    )}


PATHS: dict[str, Schema] = {
    "/api/v1/jobs": {
        "post": _op("createJob", "Create a job", {
            "201": _linked(_json(ref("Job"), "Created")),
            **_errors(400, 401, 403, 409, 413, 429, 503),
        }, tag="jobs", body=ref("JobInput")),
        "get": _op("listJobs", "List jobs by name", {
            "200": _json(ref("JobPage"), "A page of jobs"), **_errors(400, 401, 503),
        }, tag="jobs", parameters=[
            _param("state", "query", {"type": "string", "enum": _values(JobState)}, "job state"),
            _param("paused", "query", {"type": "boolean"}, "paused or active jobs only"),
            _param("tag", "query", {"type": "string"}, "jobs having this tag"),
            _param("prefix", "query", {"type": "string"}, "names starting with this"),
            _param("last_status", "query", {"type": "string", "enum": list(LAST_STATUSES)},
                   "the status of the job's newest run, or never (no run yet)"),
            LIMIT,
            CURSOR,
        ]),
    },
    "/api/v1/jobs/{name}": {
        "parameters": [JOB_NAME],
        "get": _op("getJob", "A job: definition, state, next fire times, owner node, last run", {
            "200": _json(ref("JobDetail"), "The job"), **_errors(400, 401, 404, 503),
        }, tag="jobs"),
        "put": _op("putJob", "Create or replace a job (idempotent)", {
            "200": _linked(_json(ref("Job"), "Replaced (or unchanged)")),
            "201": _linked(_json(ref("Job"), "Created")),
            **_errors(400, 401, 403, 409, 413, 429, 503),
        }, tag="jobs", body=ref("JobReplace")),
        "patch": _op("updateJob", "Change some fields of a job", {
            "200": _json(ref("Job"), "Changed"), **_errors(400, 401, 403, 404, 409, 413, 429, 503),
        }, tag="jobs", body=ref("JobChanges")),
        "delete": _op("deleteJob", "Delete a job (its runs stay in the history)", {
            "200": _json(ref("Job"), "Deleted"), **_errors(*WRITE),
        }, tag="jobs"),
    },
    "/api/v1/jobs/{name}/pause": _control("pause", "Pause a job", 200, False),
    "/api/v1/jobs/{name}/resume": _control("resume", "Resume a job", 200, False),
    "/api/v1/jobs/{name}/trigger": _control(
        "trigger", "Run a job now, with the parameters given (409 while it runs or is paused)",
        202, True, body=ref("TriggerInput")),
    "/api/v1/jobs/{name}/kill": _control(
        "kill", "Kill the running run of a job (409 when none runs)", 202, True),
    "/api/v1/jobs/{name}/runs": {
        "parameters": [JOB_NAME],
        "get": _op("listJobRuns", "Runs of a job, newest first", {
            "200": _json(ref("RunPage"), "A page of runs"), **_errors(400, 401, 503),
        }, tag="runs", parameters=RUN_FILTERS),
    },
    "/api/v1/calendars": {
        "post": _op("createCalendar", "Create an exclusion calendar", {
            "201": _json(ref("Calendar"), "Created"),
            **_errors(400, 401, 403, 409, 413, 429, 503),
        }, tag="calendars", body=ref("CalendarInput")),
        "get": _op("listCalendars", "Every exclusion calendar, by name", {
            "200": _json(ref("CalendarList"), "The calendars"), **_errors(400, 401, 503),
        }, tag="calendars"),
    },
    "/api/v1/calendars/{name}": {
        "parameters": [CALENDAR_NAME],
        "get": _op("getCalendar", "An exclusion calendar", {
            "200": _json(ref("Calendar"), "The calendar"), **_errors(400, 401, 404, 503),
        }, tag="calendars"),
        "put": _op("putCalendar", "Create or replace a calendar (idempotent); no job is "
                   "planned anew: nodes use the new rules from their next plan of each job", {
            "200": _json(ref("Calendar"), "Replaced (or unchanged)"),
            "201": _json(ref("Calendar"), "Created"),
            **_errors(400, 401, 403, 409, 413, 429, 503),
        }, tag="calendars", body=ref("CalendarReplace")),
        "delete": _op("deleteCalendar", "Delete a calendar (409 while a job names it)", {
            "200": _json(ref("Calendar"), "Deleted"), **_errors(*WRITE),
        }, tag="calendars"),
    },
    "/api/v1/runs": {
        "get": _op("listRuns", "Runs, newest first", {
            "200": _json(ref("RunPage"), "A page of runs"), **_errors(400, 401, 503),
        }, tag="runs", parameters=[
            _param("job", "query", {"type": "string"}, "job name"),
            _param("node", "query", {"type": "string"}, "node (host:pid) or session id"),
            *RUN_FILTERS,
        ]),
    },
    "/api/v1/runs/prune": {
        "post": _op("pruneRuns", "Delete old run history (finished runs; deleted jobs with "
                    "no runs left; webhook events and their deliveries). Nodes also do it "
                    "hourly past history_retention_s", {
            "200": _json(ref("Pruned"), "What was deleted"),
            **_errors(400, 401, 403, 413, 429, 503),
        }, tag="runs", body=ref("PruneInput")),
    },
    "/api/v1/runs/{id}": {
        "parameters": [_param("id", "path", {"type": "integer", "minimum": 1,
                                              "maximum": 10**18 - 1}, "run id")],
        "get": _op("getRun", "A run, with the tail of its output", {
            "200": _json(ref("Run"), "The run"), **_errors(400, 401, 404, 503),
        }, tag="runs"),
    },
    "/api/v1/cluster": {
        "get": _op("getCluster", "The nodes of the cluster", {
            "200": _json(ref("Cluster"), "Every registered node"), **_errors(401, 503),
        }, tag="cluster"),
    },
    "/api/v1/schedule/preview": {
        "get": _op("previewSchedule", "The next fire instants of a schedule", {
            "200": _json(ref("Preview"), "The instants"), **_errors(400, 401, 503),
        }, tag="schedule", parameters=[
            _param("schedule", "query", {"type": "string", "minLength": 1,
                                         "examples": ["*/15 * * * *", "@every 1h"]},
                   "expression", required=True),
            _param("timezone", "query", {"type": "string"}, "IANA timezone (default UTC)"),
            _param("count", "query", {"type": "integer", "minimum": 1, "maximum": 1000,
                                      "default": 10}, "how many instants"),
            _param("from", "query", INSTANT, "start after this instant (default: now)"),
            _param("calendars", "query", {"type": "string", "maxLength": 255},
                   "comma-separated calendar names: the slots they exclude are left out"),
        ]),
    },
    "/api/v1/audit": {
        "get": _op("listAudit", "The audit trail of every write (API, dashboard, CLI, library), "
                   "newest first (admins)", {
            "200": _json(ref("AuditPage"), "A page of entries"), **_errors(400, 401, 403, 503),
        }, tag="audit", parameters=[
            _param("job", "query", {"type": "string"}, "entries about this job"),
            _param("token", "query", {"type": "string"},
                   "entries made with this token (or by this CLI or library actor)"),
            _param("source", "query", {"type": "string", "enum": _values(AuditSource)},
                   "entries that came this way"),
            _param("since", "query", INSTANT, "recorded at or after"),
            LIMIT,
            CURSOR,
        ]),
    },
    "/api/v1/webhooks": {
        "post": _op("createWebhook", "Create a webhook subscription; its signing secret is "
                    "in the answer, this once (admins)", {
            "201": _json(ref("WebhookCreated"), "Created"),
            **_errors(400, 401, 403, 409, 413, 429, 503),
        }, tag="webhooks", body=ref("WebhookInput")),
        "get": _op("listWebhooks", "Every webhook subscription, by name (admins)", {
            "200": _json(ref("WebhookList"), "The subscriptions"), **_errors(400, 401, 403, 503),
        }, tag="webhooks"),
    },
    "/api/v1/webhooks/{name}": {
        "parameters": [WEBHOOK_NAME],
        "get": _op("getWebhook", "A webhook subscription (admins)", {
            "200": _json(ref("Webhook"), "The subscription"), **_errors(400, 401, 403, 404, 503),
        }, tag="webhooks"),
        "patch": _op("updateWebhook", "Change a subscription: url, events, filters, enabled "
                     "(a disabled one gets no events; its pending deliveries wait)", {
            "200": _json(ref("Webhook"), "Changed"),
            **_errors(400, 401, 403, 404, 413, 429, 503),
        }, tag="webhooks", body=ref("WebhookChanges")),
        "delete": _op("deleteWebhook", "Delete a subscription and its delivery log", {
            "200": _json(ref("Webhook"), "Deleted"), **_errors(400, 401, 403, 404, 429, 503),
        }, tag="webhooks"),
    },
    "/api/v1/webhooks/{name}/deliveries": {
        "parameters": [WEBHOOK_NAME],
        "get": _op("listDeliveries", "A subscription's delivery log, newest event first "
                   "(admins)", {
            "200": _json(ref("DeliveryPage"), "A page of deliveries"),
            **_errors(400, 401, 403, 404, 503),
        }, tag="webhooks", parameters=[
            _param("status", "query", {"type": "string", "enum": _values(DeliveryStatus)},
                   "deliveries in this status"),
            LIMIT,
            CURSOR,
        ]),
    },
    "/api/v1/webhooks/{name}/test": {
        "parameters": [WEBHOOK_NAME],
        "post": _op("testWebhook", "Queue a webhook.test event for this subscription alone "
                    "(409 when it is disabled)", {
            "202": _json(ref("Delivery"), "Queued: its delivery"),
            **_errors(400, 401, 403, 404, 409, 429, 503),
        }, tag="webhooks"),
    },
    "/api/v1/openapi.json": {
        "get": _op("getOpenApi", "This document", {
            "200": {"description": "OpenAPI 3.1", "content": {"application/json": {
                "schema": {"type": "object"}}}},
        }, tag="meta", public_=True),
    },
    "/healthz": {
        "get": _op("healthz", "The process answers", {
            "200": _json(ref("Health"), "Alive"), **_errors(),
        }, tag="meta", public_=True),
    },
    "/readyz": {
        "get": _op("readyz", "Ready: database answers, schema at head, node live (serve)", {
            "200": _json(ref("Ready"), "Ready"),
            "503": _json(ref("Error"), "Not ready: details.checks says why"),
        }, tag="meta", public_=True),
    },
    "/metrics": {
        "get": _op("metrics", "Prometheus metrics (text format)", {
            "200": {"description": "Prometheus text exposition",
                    "content": {"text/plain": {"schema": {"type": "string"}}}},
        }, tag="meta", public_=True),
    },
}

DOCUMENT: Schema = {
    "openapi": "3.1.0",
    "info": {
        "title": "quartzlite",
        "version": __version__,
        "description": (
            "Operate a quartzlite cluster: jobs (keyed by name), runs, nodes. Every request "
            "under /api/v1 except this document needs `Authorization: Bearer <token>` "
            "(`quartzlite token create`); viewers may only read. Errors are "
            "`{\"error\": {\"code\", \"message\", \"details\"}}`."
        ),
    },
    "servers": [{"url": "/"}],
    "security": [{"bearerAuth": []}],
    "tags": [{"name": t} for t in ("jobs", "calendars", "runs", "cluster", "schedule", "audit",
                                   "webhooks",
                                   "meta")],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "securitySchemes": {
            "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "qlt_ token"},
        },
    },
}


@bp.get("/openapi.json")
@public
def document() -> Response:
    return jsonify(DOCUMENT)
