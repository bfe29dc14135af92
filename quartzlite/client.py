"""SchedulerClient: the management use cases shared by the library, the CLI and the
HTTP API. It validates input into :class:`JobSpec` values (every error names the
field and the reason), plans first fire times with :mod:`quartzlite.schedule`, and
leaves SQL to :mod:`quartzlite.storage`. Every change it makes (or refuses) is recorded
in the audit trail with who made it (see :class:`SchedulerClient`).
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from quartzlite import auth, codec
from quartzlite import schedule as schedules
from quartzlite.config import MAX_RETENTION_S
from quartzlite.enums import (
    AuditSource,
    DeliveryStatus,
    JobState,
    MisfirePolicy,
    OverrunPolicy,
    RecoveryPolicy,
    Role,
    RunStatus,
    UpstreamCondition,
)
from quartzlite.errors import AuthError, Conflict, NotFound, QuartzliteError, ValidationError
from quartzlite.models import (
    AuditEntry,
    Calendar,
    Delivery,
    Job,
    JobSpec,
    Overview,
    Page,
    Pruned,
    Reschedule,
    Run,
    Session,
    Token,
    UiSession,
    Webhook,
)
from quartzlite.redact import MASK, bounded, clip, redact
from quartzlite.storage import history, migrate
from quartzlite.storage.auth import AuditStore, TokenStore
from quartzlite.storage.calendars import CalendarStore
from quartzlite.storage.engine import Database, RetryPolicy
from quartzlite.storage.jobs import NEVER_RAN, JobFilter, JobStore, RunFilter
from quartzlite.storage.ui import DashboardStore, UiSessionStore
from quartzlite.storage.webhooks import WebhookStore
from quartzlite.validation import (
    NAME_RE,
    TAG_RE,
    check_unicode,
    type_name,
    validate_callable,
    validate_name,
    validate_params,
    validate_tags,
    validate_text,
    validate_token_name,
)
from quartzlite.webhooks import new_secret as new_webhook_secret
from quartzlite.webhooks import validate_events, validate_url

MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_BACKOFF_S = 24 * 3600.0
MAX_ATTEMPTS = 100
MAX_COMMAND_BYTES = 65_535
MAX_KWARGS_BYTES = 65_535
MAX_PAGE = 1000
#: The largest ``max_runs`` (an INT column).
MAX_RUNS = 2_147_483_647
MAX_JITTER_S = schedules.MAX_JITTER_S
#: The most calendars a job names.
MAX_JOB_CALENDARS = 8
#: The most upstream jobs a job names (``JobSpec.upstream``).
MAX_UPSTREAM = 16
#: The most runs of one job at once across the cluster (``JobSpec.max_concurrency``).
MAX_CONCURRENCY = 100
#: What ``list_jobs(last_status=...)`` accepts: a run status, or ``never``.
LAST_STATUSES = (*(s.value for s in RunStatus), NEVER_RAN)

E = TypeVar("E", MisfirePolicy, OverrunPolicy, RecoveryPolicy, UpstreamCondition)
T = TypeVar("T")

log = logging.getLogger("quartzlite.client")

SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))
CALENDAR_FIELDS = ("name", "timezone", "description", "rules")


def _number(field: str, value: object, *, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"must be a number, not {type_name(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the range of a float
        number = math.inf if value > 0 else -math.inf
    if math.isnan(number) or math.isinf(number):
        raise ValidationError(field, "must be a finite number")
    if (number <= low if low_open else number < low) or number > high:
        bound = f"greater than {low:g}" if low_open else f"at least {low:g}"
        raise ValidationError(field, f"must be {bound} and at most {high:g}, got {number:g}")
    return number


def _integer(field: str, value: object, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValidationError(field, f"must be an integer, not {type_name(value)}")
    if not low <= value <= high:
        raise ValidationError(field, f"must be between {low} and {high}, got {value}")
    return value


def _instant(field: str, value: object) -> datetime | None:
    """An optional instant: an aware datetime, or an ISO-8601 string with a UTC offset
    (``Z`` or ``+02:00``), within the supported range; as UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            if len(value) > 64:
                raise ValueError(value)
            found = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValidationError(
                field, f"is not an ISO-8601 instant (e.g. 2026-01-31T12:00:00Z): {value[:60]!r}"
            ) from None
    elif isinstance(value, datetime):
        found = value
    else:
        raise ValidationError(
            field, f"must be an ISO-8601 instant such as 2026-01-31T12:00:00Z, not {type_name(value)}"
        )
    return schedules.check_instant(field, found)


def _choice(field: str, value: object, enum: type[E]) -> E:
    allowed = ", ".join(e.value for e in enum)
    if isinstance(value, enum):
        return value
    if not isinstance(value, str) or value not in {e.value for e in enum}:
        raise ValidationError(field, f"must be one of {allowed}, got {value!r}")
    return enum(value)


def _name_list(field: str, value: object, what: str, most: int) -> set[str]:
    """A list of names of ``what`` (jobs, calendars), as a set; at most ``most``."""
    if not isinstance(value, (list, tuple)):
        raise ValidationError(field, f"must be a list of {what} names, not {type_name(value)}")
    names: set[str] = set()
    for item in value:
        if not isinstance(item, str) or not NAME_RE.fullmatch(item):
            raise ValidationError(
                field, f"{str(item)[:60]!r} is not a {what} name (1-128 letters, digits, '.', "
                "'_' or '-', starting with a letter or digit)",
            )
        names.add(item)
    if len(names) > most:
        raise ValidationError(field, f"at most {most} {what}s, got {len(names)}")
    return names


def validate_calendar_names(field: str, value: object) -> tuple[str, ...]:
    """A list of calendar names, sorted, without repeats."""
    return tuple(sorted(_name_list(field, value, "calendar", MAX_JOB_CALENDARS)))


def validate_upstream(field: str, value: object, *, name: str) -> tuple[str, ...]:
    """The upstream jobs of job ``name``: job names, sorted, without repeats, at most
    :data:`MAX_UPSTREAM`, not ``name`` itself (that they exist, and make no cycle, is
    checked where the job is written)."""
    names = _name_list(field, value, "job", MAX_UPSTREAM)
    if name in names:
        raise ValidationError(field, "a job cannot be its own upstream")
    return tuple(sorted(names))


def build_calendar(data: Mapping[str, Any]) -> Calendar:
    """Validate user input into a :class:`Calendar` (name, timezone, description,
    rules). Raises :class:`ValidationError` naming the first bad field
    (``rules.dates[1]``, ``timezone``, ...)."""
    if not isinstance(data, Mapping):
        raise ValidationError("body", f"must be an object, not {type_name(data)}")
    for key in data:
        if key not in CALENDAR_FIELDS:
            raise ValidationError(
                str(key)[:40], f"unknown field (allowed: {', '.join(CALENDAR_FIELDS)})"
            )
    if data.get("name") is None:
        raise ValidationError("name", "is required")
    name = validate_name(data["name"])
    timezone = validate_text("timezone", data.get("timezone", "UTC"), max_chars=64)
    schedules.parse_schedule("@every 1s", timezone)  # the timezone exists (or says why not)
    if "rules" not in data:
        raise ValidationError("rules", "is required: give dates, yearly, ranges or windows")
    return Calendar(
        name=name,
        timezone=timezone,
        description=validate_text(
            "description", data.get("description", ""), max_chars=1024, allow_empty=True
        ),
        rules=schedules.parse_rules(data["rules"]),
    )


def _engines(calendars: Sequence[Calendar]) -> list[schedules.Calendar]:
    """The engines of a job's calendars; one that no longer compiles (a row edited by
    hand) is a ValidationError naming ``calendars``."""
    found = []
    for c in calendars:
        try:
            found.append(schedules.compile_calendar(c.name, c.timezone, c.rules))
        except ValidationError as error:
            raise ValidationError(
                "calendars", f"calendar {c.name!r} cannot be used: {error.message}"
            ) from None
    return found


def build_spec(data: Mapping[str, Any], *, base: JobSpec | None = None) -> JobSpec:
    """Validate user input into a JobSpec; with ``base``, ``data`` is a partial change.

    Raises :class:`ValidationError` naming the first bad field.
    """
    merged = _merged(data, base)
    name = validate_name(merged["name"])
    schedule_text = validate_text("schedule", merged["schedule"], max_chars=255)
    timezone = validate_text("timezone", merged.get("timezone", "UTC"), max_chars=64)
    parsed = schedules.parse_schedule(schedule_text, timezone)
    command, target, kwargs = _target(merged)
    timeout = merged.get("timeout_s")
    if timeout is not None:
        timeout = _number("timeout_s", timeout, low=0, high=MAX_TIMEOUT_S, low_open=True)
    backoff = _number("retry_backoff_s", merged.get("retry_backoff_s", 1.0), low=0, high=MAX_BACKOFF_S)
    max_backoff = _number(
        "retry_max_backoff_s", merged.get("retry_max_backoff_s", 300.0), low=0, high=MAX_BACKOFF_S
    )
    if max_backoff < backoff:
        raise ValidationError("retry_max_backoff_s", "must be at least retry_backoff_s")
    paused = merged.get("paused", False)
    if not isinstance(paused, bool):
        raise ValidationError("paused", f"must be a boolean, not {type_name(paused)}")
    start_at = _instant("start_at", merged.get("start_at"))
    end_at = _instant("end_at", merged.get("end_at"))
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise ValidationError(
            "end_at", f"must be after start_at ({start_at.isoformat()}), got {end_at.isoformat()}"
        )
    max_runs = merged.get("max_runs")
    if max_runs is not None:
        max_runs = _integer("max_runs", max_runs, low=1, high=MAX_RUNS)
    upstream = validate_upstream("upstream", merged.get("upstream", ()), name=name)
    if upstream and not parsed.manual:
        # The job row holds one next slot: a run for an upstream's slot (in the past, say
        # after a retry) would be planned over the job's own next slot, and the slot
        # after it computed from the upstream's, replaying the job's own past slots.
        raise ValidationError(
            "upstream", "a job with upstream jobs runs only when they end: give it the "
            f"schedule {schedules.MANUAL}",
        )
    max_concurrency = _integer(
        "max_concurrency", merged.get("max_concurrency", 1), low=1, high=MAX_CONCURRENCY
    )
    broadcast = merged.get("broadcast", False)
    if not isinstance(broadcast, bool):
        raise ValidationError("broadcast", f"must be a boolean, not {type_name(broadcast)}")
    if broadcast and max_concurrency > 1:
        raise ValidationError(
            "max_concurrency",
            "a broadcast job runs once per node per slot: max_concurrency must be 1",
        )
    return JobSpec(
        name=name,
        schedule=parsed.expression,
        timezone=parsed.timezone,
        start_at=start_at,
        end_at=end_at,
        max_runs=max_runs,
        jitter_s=_number("jitter_s", merged.get("jitter_s", 0.0), low=0, high=MAX_JITTER_S),
        command=command,
        callable=target,
        kwargs=kwargs,
        timeout_s=timeout,
        max_attempts=_integer("max_attempts", merged.get("max_attempts", 1), low=1, high=MAX_ATTEMPTS),
        retry_backoff_s=backoff,
        retry_max_backoff_s=max_backoff,
        misfire_policy=_choice(
            "misfire_policy", merged.get("misfire_policy", MisfirePolicy.FIRE_ONCE), MisfirePolicy
        ),
        misfire_grace_s=_number("misfire_grace_s", merged.get("misfire_grace_s", 60.0), low=0, high=MAX_BACKOFF_S),
        overrun_policy=_choice(
            "overrun_policy", merged.get("overrun_policy", OverrunPolicy.SKIP), OverrunPolicy
        ),
        recovery_policy=_choice(
            "recovery_policy", merged.get("recovery_policy", RecoveryPolicy.RERUN), RecoveryPolicy
        ),
        priority=_integer("priority", merged.get("priority", 0), low=-1000, high=1000),
        tags=validate_tags("tags", merged.get("tags", ())),
        description=validate_text(
            "description", merged.get("description", ""), max_chars=1024, allow_empty=True
        ),
        paused=paused,
        calendars=validate_calendar_names("calendars", merged.get("calendars", ())),
        upstream=upstream,
        upstream_on=_choice(
            "upstream_on", merged.get("upstream_on", UpstreamCondition.SUCCESS), UpstreamCondition
        ),
        max_concurrency=max_concurrency,
        broadcast=broadcast,
    )


def _merged(data: Mapping[str, Any], base: JobSpec | None) -> dict[str, Any]:
    """The definition asked for: ``data`` over ``base`` (when it is a change), its
    fields known and the required ones there."""
    if not isinstance(data, Mapping):
        raise ValidationError("body", f"must be an object, not {type_name(data)}")
    unknown = sorted(set(data) - set(SPEC_FIELDS))
    if unknown:
        raise ValidationError(
            unknown[0], f"unknown field (allowed: {', '.join(SPEC_FIELDS)})"
        )
    if base is not None and "name" in data and data["name"] != base.name:
        raise ValidationError("name", "cannot be changed; create a new job instead")
    merged: dict[str, Any] = {} if base is None else {f: getattr(base, f) for f in SPEC_FIELDS}
    merged.update(data)
    # On update, giving one kind of target replaces the other.
    if base is not None and data.get("command") is not None and "callable" not in data:
        merged["callable"] = None
        merged["kwargs"] = data.get("kwargs", {})
    if base is not None and data.get("callable") is not None and "command" not in data:
        merged["command"] = None
    for required in ("name", "schedule"):
        if merged.get(required) is None:
            raise ValidationError(required, "is required")
    return merged


def _target(merged: Mapping[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
    """(command, callable, kwargs): exactly one of the two targets, validated."""
    command = merged.get("command")
    target = merged.get("callable")
    if command is not None and target is not None:
        raise ValidationError("command", "give either command or callable, not both")
    if command is None and target is None:
        raise ValidationError("command", "give one of command (a shell command) or callable")
    kwargs = merged.get("kwargs") or {}
    if command is not None:
        # A TEXT column: 65,535 bytes, whatever the characters.
        command = validate_text("command", command, max_chars=MAX_COMMAND_BYTES, max_bytes=MAX_COMMAND_BYTES)
        if "\x00" in command:
            raise ValidationError("command", "must not contain NUL characters")
        if kwargs:
            raise ValidationError("kwargs", "only a callable takes kwargs")
    else:
        target = validate_text("callable", target, max_chars=255)
        validate_callable(target)
    if not isinstance(kwargs, dict):
        raise ValidationError("kwargs", f"must be an object, not {type_name(kwargs)}")
    try:
        # Keep kwargs as they come back from storage (JSON: string keys, lists for
        # tuples), so that re-publishing the same definition compares equal, and so
        # that storage's sorted encoding cannot fail on keys of mixed types.
        kwargs = json.loads(json.dumps(kwargs, allow_nan=False))
        encoded = json.dumps(kwargs, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as error:
        raise ValidationError("kwargs", f"must be JSON-serialisable: {error}") from None
    check_unicode("kwargs", json.dumps(kwargs, ensure_ascii=False))
    if len(encoded.encode()) > MAX_KWARGS_BYTES:
        raise ValidationError("kwargs", f"must encode to at most {MAX_KWARGS_BYTES} bytes")
    return command, target, kwargs


def first_fire(
    spec: JobSpec, now: datetime, runs_done: int = 0, calendars: Sequence[Calendar] = ()
) -> Reschedule:
    """Where a job created or rescheduled (its schedule, bounds or calendars changed) at
    ``now`` goes first: its first slot after now, at or after ``start_at`` (for
    ``@every``: on ``start_at + k * period``) and not excluded by its ``calendars``,
    planned at the slot plus its jitter. A job that ran ``max_runs`` slots
    (``runs_done``) has no next fire (it is finished); a definition with no slot left
    (an ``@at`` in the past, an ``end_at`` before the next slot, calendars that exclude
    every slot) is refused, naming the field."""
    return _first_fire(spec, now, runs_done, calendars, refuse_ended=True)


def resumed_fire(
    spec: JobSpec, now: datetime, runs_done: int = 0, calendars: Sequence[Calendar] = ()
) -> Reschedule:
    """Where a job resumed at ``now`` goes first: as :func:`first_fire`, except that a
    job whose schedule or bounds have no slot left is not refused: it is finished (the
    operator changed nothing that could be wrong)."""
    return _first_fire(spec, now, runs_done, calendars, refuse_ended=False)


def _first_fire(
    spec: JobSpec, now: datetime, runs_done: int, calendars: Sequence[Calendar], *,
    refuse_ended: bool,
) -> Reschedule:
    ended = Reschedule(planned_at=None, slot_at=None)
    if spec.max_runs is not None and runs_done >= spec.max_runs:
        return ended
    schedule = schedules.parse_schedule(spec.schedule, spec.timezone)
    if schedule.manual:  # no slot of its own: it runs when triggered
        return ended
    engines = _engines(calendars)
    try:
        slot = schedules.first_slot(schedule, now, start_at=spec.start_at, calendars=engines)
    except schedules.ExclusionError as error:
        if not refuse_ended:
            return ended
        raise ValidationError("calendars", str(error)) from None
    if (slot is None or (spec.end_at is not None and slot > spec.end_at)) and not refuse_ended:
        return ended
    if slot is None and engines and schedules.first_slot(schedule, now, start_at=spec.start_at):
        raise ValidationError(
            "calendars", f"{', '.join(spec.calendars)} exclude every slot of {spec.schedule!r} "
            f"after now ({now.isoformat()}): it would never fire",
        )
    if slot is None:
        raise ValidationError("schedule", f"{spec.schedule!r} never fires after now ({now.isoformat()})")
    if spec.end_at is not None and slot > spec.end_at:
        raise ValidationError(
            "end_at",
            f"{spec.end_at.isoformat()} is before the job's next slot ({slot.isoformat()}): "
            "it would never fire",
        )
    return Reschedule(planned_at=schedules.jittered(spec.name, slot, spec.jitter_s), slot_at=slot)


def preview_schedule(
    expression: str, timezone: str = "UTC", *, start: datetime, count: int = 10,
    calendars: Sequence[Calendar] = (),
) -> list[datetime]:
    """The next ``count`` fire instants of ``expression`` after ``start`` (no database),
    without those ``calendars`` exclude."""
    count = _integer("count", count, low=1, high=1000)
    start = schedules.check_instant("start", start)
    parsed = schedules.parse_schedule(expression, timezone)
    try:
        return schedules.preview(parsed, start, count, calendars=_engines(calendars))
    except schedules.ExclusionError as error:
        raise ValidationError("calendars", str(error)) from None


def _limit(limit: int) -> int:
    return _integer("limit", limit, low=1, high=MAX_PAGE)


#: Audit details (JSON) longer than this are replaced by a note saying so.
MAX_AUDIT_DETAILS_BYTES = 60_000
#: A dashboard session ends after this long without a request (s; 30 minutes) ...
UI_SESSION_IDLE_S = 1800.0
#: ... and this long after its sign-in, whatever happens (s; 12 hours).
UI_SESSION_MAX_S = 12 * 3600.0


def _role(role: object) -> Role:
    if isinstance(role, Role):
        return role
    if not isinstance(role, str) or role not in {r.value for r in Role}:
        raise ValidationError("role", f"must be one of {', '.join(r.value for r in Role)}")
    return Role(role)


# -- the audit trail of the library's and the CLI's writes -----------------------------

#: The longest actor (who makes a client's changes; ``ql_audit.token_name``).
MAX_ACTOR_CHARS = 64
#: Most bytes (as JSON) kept in an audit entry of what a write was given (a job's
#: fields, a change, a calendar); beyond, its size and head. The API keeps as much of a
#: request body (``quartzlite.api.auth.AUDIT_BODY_BYTES``).
AUDIT_BODY_BYTES = 2048
#: Most bytes of the details (JSON) of one library or CLI entry: beyond, the given
#: fields and names are left out (``quartzlite.api.auth.AUDIT_ENTRY_BYTES``).
AUDIT_ENTRY_BYTES = 4096
#: Most job names listed in the entry of a bulk write (``jobs.add``); the rest counted.
AUDIT_NAMES = 20
#: The refusals that are recorded (the caller's mistakes, as the API's 4xx). Other
#: failures (the database away: the write's outcome may be unknown and the entry could
#: not be written either) record nothing.
AUDIT_REFUSALS: tuple[type[QuartzliteError], ...] = (ValidationError, Conflict, NotFound)
#: How long the entry of a refused write is retried while the database fails (s): the
#: refusal (often found before the database was asked) is not held up for long.
REFUSAL_AUDIT_DEADLINE_S = 1.0


def default_actor() -> str:
    """``user@host``: this process's operating-system user and the host's name; what
    the CLI records, and the library when it is given no actor."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError, ImportError):  # no login name and no passwd entry (a container)
        user = f"uid{os.getuid()}" if hasattr(os, "getuid") else "unknown"
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    actor = "".join(c if c.isprintable() else "?" for c in f"{user}@{host or 'localhost'}")
    return actor.strip()[:MAX_ACTOR_CHARS] or "unknown"


def validate_actor(actor: object) -> str:
    """Who makes a client's changes: 1-64 printable characters, not all blank."""
    if not isinstance(actor, str):
        raise ValidationError("actor", f"must be a string naming who makes the changes, "
                                       f"not {type_name(actor)}")
    if not actor.strip() or len(actor) > MAX_ACTOR_CHARS or not actor.isprintable():
        raise ValidationError(
            "actor", f"must be 1-{MAX_ACTOR_CHARS} printable characters naming who makes the "
            f"changes (e.g. 'billing-service'), got {clip(actor, MAX_ACTOR_CHARS)!r}",
        )
    return actor


def _source(source: object) -> AuditSource:
    if isinstance(source, AuditSource):
        return source
    if not isinstance(source, str) or source not in {s.value for s in AuditSource}:
        raise ValidationError(
            "source", f"must be one of {', '.join(s.value for s in AuditSource)}, got {source!r}"
        )
    return AuditSource(source)


def _json_ready(value: object) -> Any:
    """``value`` as JSON would give it back (tuples as lists, instants as text)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return {"unrecorded": type_name(value)}


def _given(data: object) -> dict[str, Any]:
    """What an audit entry keeps of a write's input: bounded, secrets masked."""
    if isinstance(data, JobSpec):
        data = codec.spec_to_dict(data)
    elif isinstance(data, Calendar):
        data = codec.calendar_to_dict(data)
    return bounded(_json_ready(data), AUDIT_BODY_BYTES)


def _name_of(data: object) -> str | None:
    """The name in a job's or a calendar's input, if any (for the audit entry)."""
    name = getattr(data, "name", None) if isinstance(data, JobSpec | Calendar) else (
        data.get("name") if isinstance(data, Mapping) else None
    )
    return name if isinstance(name, str) else None


def _optional_match(field: str, value: object, pattern: re.Pattern[str], what: str) -> str | None:
    """A string matching ``pattern`` (it must be ``what``), or None for null or ''."""
    if value is not None and not isinstance(value, str):
        raise ValidationError(field, f"must be a string or null, not {type_name(value)}")
    if value and not pattern.fullmatch(value):
        raise ValidationError(field, f"must be {what}")
    return value or None


def _webhook_fields(data: object, *, create: bool) -> dict[str, Any]:
    """A webhook subscription's input, checked: every key known, each value of its shape
    (``job_prefix`` and ``tag``: null or empty for none)."""
    if not isinstance(data, Mapping):
        raise ValidationError("body", f"must be an object, not {type_name(data)}")
    allowed = SchedulerClient.WEBHOOK_FIELDS if create else SchedulerClient.WEBHOOK_FIELDS[1:]
    for key in data:
        if key not in allowed:
            raise ValidationError(str(key)[:40], f"unknown field (allowed: {', '.join(allowed)})")
    if create:
        for key in ("name", "url", "events"):
            if data.get(key) is None:
                raise ValidationError(key, "is required")
    elif not data:
        raise ValidationError("body", "give at least one field to change")
    found: dict[str, Any] = {}
    if "name" in data:
        found["name"] = validate_name(data["name"])
    if "url" in data:
        found["url"] = validate_url(data["url"])
    if "events" in data:
        found["events"] = validate_events(data["events"])
    if "job_prefix" in data:
        found["job_prefix"] = _optional_match(
            "job_prefix", data["job_prefix"], NAME_RE, "the start of a job name (1-128 letters, "
            "digits, '.', '_' or '-', starting with a letter or digit)",
        )
    if "tag" in data:
        found["tag"] = _optional_match(
            "tag", data["tag"], TAG_RE, "a tag (1-32 lower-case letters, digits, '_', '.' or '-', "
            "starting with a letter or digit)",
        )
    if "enabled" in data:
        if not isinstance(data["enabled"], bool):
            raise ValidationError("enabled", f"must be a boolean, not {type_name(data['enabled'])}")
        found["enabled"] = data["enabled"]
    return found


def _short(value: object) -> Any:
    """A name or a duration for an audit entry: text cut to 128 characters."""
    return redact(clip(value, 128)) if isinstance(value, str) else _json_ready(value)


def _token_name(name: object) -> Any:
    """A token's name for an audit entry: masked when it is a secret given by mistake."""
    return MASK if isinstance(name, str) and auth.looks_like_secret(name) else _short(name)


def _token_details(name: object, role: object) -> dict[str, Any]:
    """A token write's entry: its name and role; never a secret."""
    return {"name": _token_name(name), "role": _short(role)}


def _names(items: Sequence[object]) -> dict[str, Any]:
    names = [clip(n, 128) for n in map(_name_of, items[:AUDIT_NAMES]) if n is not None]
    found: dict[str, Any] = {"count": len(items), "names": names}
    if len(items) > AUDIT_NAMES:
        found["names_more"] = len(items) - AUDIT_NAMES
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """A job with what an operator wants next to it."""

    job: Job
    upcoming: list[datetime]
    last_run: Run | None
    #: The live jobs that name this one upstream (its runs' ends trigger them).
    downstream: tuple[str, ...] = ()


class SchedulerClient:
    """Management API. Build it with a database URL (or a :class:`Database`).

    Every change it makes is recorded in the audit trail (``ql_audit``, the HTTP API's
    too), with who made it: ``actor`` (1-64 printable characters, e.g.
    ``"billing-service"``; by default ``user@host``, this process's operating-system user
    and host) and ``source`` (``library``; the CLI's client says ``cli``). The entry is
    written after the change, in its own transaction, with what the write was given
    (bounded, secret shapes masked: :mod:`quartzlite.redact`; a token's secret never)
    and what it did. A refused write (:class:`ValidationError`, :class:`Conflict`,
    :class:`NotFound`) is recorded too, with its error code (``details.error``, as the
    API's), then raised; other failures (the database away) record nothing. When the
    entry cannot be written (the database fails just then; a refusal's entry is retried
    for :data:`REFUSAL_AUDIT_DEADLINE_S` only), the change stands: the failure is logged
    as an error, not raised (the API's rule too).

    ``audit=False``: the client records nothing; its caller audits. The HTTP API's app
    works that way (:func:`quartzlite.api.create_app` takes any client and serves it
    through :meth:`auditing` ``(source="api", audit=False)``, then records each request
    once, with its token's name).
    """

    def __init__(
        self,
        database: str | Database,
        *,
        actor: str | None = None,
        source: AuditSource | str = AuditSource.LIBRARY,
        audit: bool = True,
    ) -> None:
        self.actor = default_actor() if actor is None else validate_actor(actor)
        self.source = _source(source)
        if not isinstance(audit, bool):
            raise ValidationError("audit", f"must be a boolean, not {type_name(audit)}")
        self.audit = audit
        self.db = database if isinstance(database, Database) else Database(database)
        self.store = JobStore(self.db)

    def auditing(
        self,
        *,
        actor: str | None = None,
        source: AuditSource | str = AuditSource.LIBRARY,
        audit: bool = True,
    ) -> SchedulerClient:
        """A client over the same database (the same connection pool: closing either
        closes it) that audits as ``actor`` and ``source``, or not at all (``audit=False``)."""
        other = SchedulerClient(self.db, actor=actor, source=source, audit=audit)
        other.store = self.store
        return other

    def close(self) -> None:
        self.db.dispose()

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the audit trail of this client's writes ----------------------------------------

    def _audited(
        self,
        action: str,
        write: Callable[[], T],
        *,
        job: str | None = None,
        details: Callable[[], Mapping[str, Any]] | None = None,
        outcome: Callable[[T], Mapping[str, Any]] | None = None,
    ) -> T:
        """``write()``, recorded (or its refusal) as ``action`` by this client's actor:
        ``details()`` (what it was given) and ``outcome(result)`` (what it did)."""
        if not self.audit:
            return write()
        given = {} if details is None else dict(details())
        try:
            result = write()
        except AUDIT_REFUSALS as error:
            self._record(action, job, {**given, "error": error.code}, refused=True)
            raise
        self._record(action, job, {**given, **(outcome(result) if outcome else {})})
        return result

    def _record(
        self, action: str, job: str | None, details: dict[str, Any], *, refused: bool = False
    ) -> None:
        if len(json.dumps(details, default=str).encode()) > AUDIT_ENTRY_BYTES:
            for key in ("body", "body_head", "names", "params", "params_head"):
                details.pop(key, None)
        try:
            self.record_audit(
                token_name=self.actor, action=action, job_name=job, details=details,
                retry=RetryPolicy(deadline_s=REFUSAL_AUDIT_DEADLINE_S) if refused else None,
            )
        except QuartzliteError as error:
            log.error(
                "could not record the audit entry of %s by %s: %s", action, self.actor,
                error.message, extra={"action": "audit_failed", "actor": self.actor},
            )

    # -- jobs --------------------------------------------------------------------

    def add_job(self, data: Mapping[str, Any] | JobSpec) -> Job:
        """Create a job; :class:`Conflict` when the name exists."""
        return self._audited(
            "job.add", lambda: self.store.add(self._spec(data), first_fire),
            job=_name_of(data), details=lambda: _given(data),
        )

    def add_jobs(self, items: Sequence[Mapping[str, Any] | JobSpec]) -> int:
        """Create many jobs in one transaction (the bulk path); all or nothing. Its audit
        entry (``jobs.add``) has the count and the first :data:`AUDIT_NAMES` names."""
        items = list(items)
        return self._audited(
            "jobs.add", lambda: self._add_jobs(items), details=lambda: _names(items)
        )

    def _add_jobs(self, items: Sequence[Mapping[str, Any] | JobSpec]) -> int:
        specs = []
        positions: dict[str, int] = {}
        for index, item in enumerate(items):
            try:
                spec = self._spec(item)
            except ValidationError as error:
                raise ValidationError(f"jobs[{index}].{error.field}", error.reason) from None
            if spec.name in positions:
                raise ValidationError(f"jobs[{index}].name", f"{spec.name!r} appears twice")
            positions[spec.name] = index
            specs.append(spec)

        planned: dict[tuple[Any, ...], Reschedule] = {}

        def plan(
            spec: JobSpec, now: datetime, runs_done: int = 0, calendars: Sequence[Calendar] = ()
        ) -> Reschedule:
            # Planning happens inside the transaction (it needs the database's now);
            # jobs sharing a schedule, bounds and calendars share the answer (jitter
            # depends on the name); an error there (an @at in the past) still names the
            # item.
            key = (spec.schedule, spec.timezone, spec.start_at, spec.end_at, spec.max_runs,
                   spec.jitter_s, spec.name if spec.jitter_s else None, now, runs_done,
                   tuple(calendars))
            if key not in planned:
                try:
                    planned[key] = first_fire(spec, now, runs_done, calendars)
                except ValidationError as error:
                    index = positions[spec.name]
                    raise ValidationError(f"jobs[{index}].{error.field}", error.reason) from None
            return planned[key]

        return self.store.add_many(specs, plan)

    def put_job(self, data: Mapping[str, Any] | JobSpec) -> tuple[Job, bool]:
        """Create or replace by name (idempotent). Returns (job, changed)."""
        return self._audited(
            "job.put", lambda: self.store.upsert(self._spec(data), first_fire),
            job=_name_of(data), details=lambda: _given(data), outcome=lambda r: {"changed": r[1]},
        )

    def update_job(self, name: str, changes: Mapping[str, Any]) -> Job:
        """Change some fields of a job; the rest stay."""

        def write() -> Job:
            validate_name(name)
            job, _ = self.store.update(
                name, lambda spec: build_spec(changes, base=spec), first_fire
            )
            return job

        return self._audited(
            "job.update", write, job=name if isinstance(name, str) else None,
            details=lambda: _given(changes),
        )

    def get_job(self, name: str) -> Job:
        return self.store.get(validate_name(name))

    def describe_job(self, name: str, *, upcoming: int = 5) -> JobView:
        """The job, its last run and its next fire instants: the next fire, then the
        planned instants (slot plus jitter) of the slots after it, within the job's
        bounds, its calendars (their excluded slots are left out) and the runs it has left
        (``max_runs``)."""
        job, last_run = self.store.with_last_run(validate_name(name))
        spec = job.spec
        times: list[datetime] = []
        if job.next_fire_at is not None and not job.deleted:
            times.append(job.next_fire_at)
            count = upcoming - 1
            if spec.max_runs is not None:  # the next fire's slot is one of the runs left
                count = min(count, spec.max_runs - job.runs_done - 1)
            try:  # a row written by hand or by an older version may no longer parse
                sched = schedules.parse_schedule(spec.schedule, spec.timezone)
                engines = _engines(CalendarStore(self.db).named(spec.calendars))
                slots = schedules.preview(
                    sched, job.next_slot_at or job.next_fire_at, max(count, 0),
                    start_at=spec.start_at, end_at=spec.end_at, calendars=engines,
                )
                times.extend(schedules.jittered(spec.name, s, spec.jitter_s) for s in slots)
            except (ValidationError, schedules.ExclusionError):
                pass
        downstream = () if job.deleted else tuple(self.store.downstream(job.name))
        return JobView(job=job, upcoming=times[:upcoming], last_run=last_run,
                       downstream=downstream)

    def list_jobs(
        self,
        *,
        state: str | None = None,
        paused: bool | None = None,
        tag: str | None = None,
        name_prefix: str | None = None,
        last_status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Job]:
        """Jobs by name; ``last_status``: the status of a job's newest run, or ``never``
        for jobs that have not run."""
        if state is not None and state not in {s.value for s in JobState}:
            raise ValidationError("state", f"must be one of {', '.join(s.value for s in JobState)}")
        if last_status is not None and last_status not in LAST_STATUSES:
            raise ValidationError("last_status", f"must be one of {', '.join(LAST_STATUSES)}")
        flt = JobFilter(
            state=JobState(state) if state else None,
            paused=paused,
            tag=tag,
            name_prefix=name_prefix,
            last_status=last_status,
        )
        return self.store.list_jobs(flt, limit=_limit(limit), cursor=cursor)

    def last_statuses(self, names: Sequence[str]) -> dict[str, RunStatus]:
        """The status of each named job's newest run (jobs that never ran are left out)."""
        return self.store.last_statuses(names)

    def _control(
        self, verb: str, name: str, write: Callable[[str], Job],
        details: Callable[[], Mapping[str, Any]] | None = None,
    ) -> Job:
        """A write to one job by name (pause, resume, ...), audited as ``job.<verb>``."""
        return self._audited(
            f"job.{verb}", lambda: write(validate_name(name)),
            job=name if isinstance(name, str) else None, details=details,
        )

    def pause_job(self, name: str) -> Job:
        return self._control("pause", name, lambda n: self.store.set_paused(n, True, first_fire))

    def resume_job(self, name: str) -> Job:
        """Resume; a job whose schedule or bounds have no slot left is finished."""
        return self._control(
            "resume", name, lambda n: self.store.set_paused(n, False, resumed_fire)
        )

    def delete_job(self, name: str) -> Job:
        return self._control("delete", name, self.store.delete)

    def trigger_job(self, name: str, params: Mapping[str, Any] | None = None) -> Job:
        """Run now; :class:`Conflict` while it runs or is paused. ``params`` (see
        :func:`~quartzlite.validation.validate_params`) go with the slot: merged over a
        callable's kwargs, exported to a shell command as ``QUARTZLITE_PARAM_<NAME>``,
        recorded on every attempt's run."""
        return self._control(
            "trigger", name, lambda n: self.store.trigger(n, validate_params(params)),
            lambda: {} if params is None else bounded(
                _json_ready(params), AUDIT_BODY_BYTES, key="params"
            ),
        )

    def kill_job(self, name: str) -> Job:
        """Ask the owning node to kill the running run; :class:`Conflict` if none runs."""
        return self._control("kill", name, self.store.request_kill)

    # -- runs, cluster, schedules ------------------------------------------------

    def list_runs(
        self,
        *,
        job: str | None = None,
        status: str | None = None,
        node: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Run]:
        if status is not None and status not in {s.value for s in RunStatus}:
            raise ValidationError(
                "status", f"must be one of {', '.join(s.value for s in RunStatus)}"
            )
        since = None if since is None else schedules.check_instant("since", since)
        until = None if until is None else schedules.check_instant("until", until)
        flt = RunFilter(
            job=job, status=RunStatus(status) if status else None, node=node, since=since, until=until
        )
        return self.store.runs(flt, limit=_limit(limit), cursor=cursor)

    def get_run(self, run_id: int) -> Run:
        return self.store.get_run(run_id)

    def cluster(self) -> list[Session]:
        return self.store.sessions()

    def prune_history(self, older_than: float | str) -> Pruned:
        """Delete finished runs planned longer ago than ``older_than`` (seconds, or a
        duration such as ``"30d"``), deleted jobs with no runs left, and webhook events
        (with their deliveries) that happened before the same cut-off. Running runs
        and live jobs are never touched. Nodes do this themselves every hour when
        ``history_retention_s`` is set."""
        return self._audited(
            "history.prune", lambda: self._prune_history(older_than),
            details=lambda: {"older_than": _short(older_than)},
            outcome=lambda p: {"runs": p.runs, "jobs": p.jobs, "events": p.events,
                               "deliveries": p.deliveries, "before": p.before.isoformat()},
        )

    def _prune_history(self, older_than: float | str) -> Pruned:
        if isinstance(older_than, str):
            try:
                seconds = schedules.parse_duration(older_than).total_seconds()
            except ValueError as error:
                raise ValidationError("older_than", str(error)) from None
        elif isinstance(older_than, bool) or not isinstance(older_than, int | float):
            raise ValidationError("older_than", "must be a number of seconds or a duration")
        else:
            try:
                seconds = float(older_than)
            except OverflowError:  # an int beyond the range of a float (as in _number)
                seconds = math.inf
        if math.isnan(seconds) or seconds < 60:
            raise ValidationError("older_than", "must be at least 60 seconds (1m)")
        if seconds > MAX_RETENTION_S:
            raise ValidationError("older_than", "must be at most 100 years (36500d)")
        return history.prune_history(self.db, seconds)

    def now(self) -> datetime:
        """The database's clock."""
        return self.store.now()

    def preview(
        self, expression: str, timezone: str = "UTC", *, start: datetime, count: int = 10,
        calendars: Sequence[str] | str = (),
    ) -> list[datetime]:
        """The next ``count`` fire instants of ``expression`` after ``start``, without
        those the named ``calendars`` exclude (a ValidationError naming ``calendars``
        for a name that does not exist)."""
        if isinstance(calendars, str):  # the API's query parameter: comma-separated
            calendars = [n.strip() for n in calendars.split(",") if n.strip()]
        names = validate_calendar_names("calendars", calendars)
        found = CalendarStore(self.db).named(names) if names else []
        return preview_schedule(expression, timezone, start=start, count=count, calendars=found)

    # -- calendars ---------------------------------------------------------------

    def add_calendar(self, data: Mapping[str, Any] | Calendar) -> Calendar:
        """Create a calendar; :class:`Conflict` when the name exists."""
        return self._audited(
            "calendar.add", lambda: CalendarStore(self.db).add(self._calendar(data)),
            details=lambda: {"name": _name_of(data), **_given(data)},
        )

    def put_calendar(self, data: Mapping[str, Any] | Calendar) -> tuple[Calendar, bool]:
        """Create or replace a calendar by name (idempotent): (calendar, changed).
        Replacing plans no job anew: the nodes use the new rules from their next plan
        of each job that names it (within about a poll interval)."""

        def write() -> tuple[Calendar, bool]:
            stored, changed, _ = CalendarStore(self.db).upsert(self._calendar(data))
            return stored, changed

        return self._audited(
            "calendar.put", write, details=lambda: {"name": _name_of(data), **_given(data)},
            outcome=lambda r: {"changed": r[1]},
        )

    def get_calendar(self, name: str) -> Calendar:
        return CalendarStore(self.db).get(validate_name(name))

    def list_calendars(self) -> list[Calendar]:
        """Every calendar, by name."""
        return CalendarStore(self.db).all()

    def delete_calendar(self, name: str) -> Calendar:
        """Delete a calendar; :class:`Conflict` naming the jobs that use it."""
        return self._audited(
            "calendar.delete", lambda: CalendarStore(self.db).delete(validate_name(name)),
            details=lambda: {"name": _short(name)},
        )

    @staticmethod
    def _calendar(data: Mapping[str, Any] | Calendar) -> Calendar:
        if isinstance(data, Calendar):
            data = {"name": data.name, "timezone": data.timezone,
                    "description": data.description, "rules": data.rules}
        return build_calendar(data)

    # -- readiness, API tokens, audit (added for the HTTP API) ----------------------

    def check_ready(self) -> None:
        """Raise unless the database answers and its schema is at head
        (:class:`~quartzlite.errors.SchemaError` says to run ``quartzlite db upgrade``)."""
        migrate.check_ready(self.db)

    def create_token(self, name: str, role: Role | str) -> tuple[Token, str]:
        """Create an API token; returns it with its secret, which is stored hashed and
        cannot be shown again. :class:`Conflict` when the name is taken. Its audit entry
        (``token.create``) has the name and the role, never the secret."""

        def write() -> tuple[Token, str]:
            secret = auth.new_secret()
            created = TokenStore(self.db).create(
                name=validate_token_name(name), role=_role(role), token_hash=auth.hash_secret(secret)
            )
            assert created is not None
            return created, secret

        return self._audited("token.create", write, details=lambda: _token_details(name, role))

    def ensure_token(self, name: str, role: Role | str = Role.ADMIN) -> tuple[Token, str] | None:
        """Create a token only when none exists (``make run``'s first start); None when
        one exists already. Audited as ``token.ensure`` (``created``: whether it did)."""

        def write() -> tuple[Token, str] | None:
            secret = auth.new_secret()
            created = TokenStore(self.db).create(
                name=validate_token_name(name), role=_role(role),
                token_hash=auth.hash_secret(secret), only_if_none=True,
            )
            return None if created is None else (created, secret)

        return self._audited(
            "token.ensure", write, details=lambda: _token_details(name, role),
            outcome=lambda r: {"created": r is not None},
        )

    def list_tokens(self) -> list[Token]:
        return TokenStore(self.db).list()

    def has_tokens(self) -> bool:
        return TokenStore(self.db).any()

    def revoke_token(self, name: str) -> Token:
        """Delete a token; requests carrying it are refused from now on."""
        return self._audited(
            "token.revoke", lambda: TokenStore(self.db).revoke(validate_token_name(name)),
            details=lambda: {"name": _token_name(name)},
        )

    def authenticate(self, secret: str | None) -> Token:
        """The token a secret belongs to; :class:`AuthError` when missing or unknown."""
        if not secret:
            raise AuthError(
                "missing API token: send Authorization: Bearer <token>",
                details={"reason": "missing"},
            )
        token = None
        if auth.looks_like_secret(secret):
            token = TokenStore(self.db).by_hash(auth.hash_secret(secret))
        if token is None:
            raise AuthError("unknown or revoked API token", details={"reason": "unknown"})
        return token

    # -- the dashboard's sessions and overview --------------------------------------

    def open_ui_session(
        self, secret: str | None, *, client_address: str | None = None,
        idle_s: float = UI_SESSION_IDLE_S, max_s: float = UI_SESSION_MAX_S,
    ) -> tuple[str, UiSession]:
        """Sign a browser in with an API token: (the session's cookie secret, the
        session). :class:`AuthError` for a missing or unknown token."""
        token = self.authenticate(secret)
        assert secret is not None
        cookie, csrf = auth.new_session_secret(), auth.new_session_secret()
        UiSessionStore(self.db).create(
            session_hash=auth.hash_secret(cookie), token_hash=auth.hash_secret(secret), csrf=csrf,
            client_address=client_address, idle_s=idle_s, max_s=max_s,
        )
        return cookie, UiSession(token=token, csrf=csrf, created_at=self.now())

    def ui_session(
        self, cookie: str | None, *, idle_s: float = UI_SESSION_IDLE_S, max_s: float = UI_SESSION_MAX_S,
    ) -> UiSession | None:
        """The live session a cookie secret belongs to; None when missing, unknown,
        expired (idle or absolute) or when its token was revoked."""
        if not cookie or not auth.looks_like_session_secret(cookie):
            return None
        return UiSessionStore(self.db).find(auth.hash_secret(cookie), idle_s=idle_s, max_s=max_s)

    def close_ui_session(self, cookie: str | None) -> None:
        """Sign out: the session ends now (nothing when there is none)."""
        if cookie and auth.looks_like_session_secret(cookie):
            UiSessionStore(self.db).delete(auth.hash_secret(cookie))

    def overview(self, *, activity: bool = True) -> Overview:
        """The cluster at a glance: nodes, runs executing, the last failures, missed
        slots in the last hour, nodes expired recently, and (``activity``) fires per
        minute over the last three hours."""
        return DashboardStore(self.db).overview(activity_minutes=180 if activity else 0)

    def record_audit(
        self,
        *,
        token_name: str,
        action: str,
        job_name: str | None = None,
        client_address: str | None = None,
        details: Mapping[str, Any] | None = None,
        source: AuditSource | str | None = None,
        retry: RetryPolicy | None = None,
    ) -> AuditEntry:
        """Append an entry to the audit trail (``details``: JSON-ready; cut when huge).
        ``token_name`` is who (a token's name, or an actor); ``source``: this client's
        when None; ``retry``: while the database fails (default: 10 s). Recorded whether
        or not this client audits its own writes."""
        encoded = json.dumps(dict(details or {}), sort_keys=True, default=str)
        if len(encoded.encode()) > MAX_AUDIT_DETAILS_BYTES:
            encoded = json.dumps({"truncated": True, "bytes": len(encoded.encode())})
        return AuditStore(self.db).record(
            token_name=token_name[:64],
            action=action[:64],
            job_name=None if job_name is None else job_name[:128],
            client_address=None if client_address is None else client_address[:64],
            details=encoded,
            source=self.source if source is None else _source(source),
            retry=retry,
        )

    def list_audit(
        self,
        *,
        job: str | None = None,
        token: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
        source: AuditSource | str | None = None,
    ) -> Page[AuditEntry]:
        """The audit trail, newest first; ``token``: who (a token's name, or the actor of
        a CLI or library entry); ``source``: api, ui, cli or library."""
        since = None if since is None else schedules.check_instant("since", since)
        return AuditStore(self.db).list(
            job=job, token=token, since=since, limit=_limit(limit), cursor=cursor,
            source=None if source is None else _source(source),
        )

    # -- webhooks ----------------------------------------------------------------

    #: The fields of a webhook subscription a user writes.
    WEBHOOK_FIELDS = ("name", "url", "events", "job_prefix", "tag", "enabled")

    def add_webhook(self, data: Mapping[str, Any]) -> tuple[Webhook, str]:
        """Create a webhook subscription (``name``, ``url``, ``events``; optional
        ``job_prefix``, ``tag``, ``enabled``): (the subscription, its signing secret).
        The secret is shown this once (the database keeps it to sign deliveries; no
        read returns it). :class:`Conflict` when the name is taken."""

        def write() -> tuple[Webhook, str]:
            fields_ = _webhook_fields(data, create=True)
            secret = new_webhook_secret()
            created = WebhookStore(self.db).create(
                name=fields_["name"], url=fields_["url"], events_=fields_["events"],
                job_prefix=fields_.get("job_prefix"), tag=fields_.get("tag"),
                enabled=fields_.get("enabled", True), secret=secret,
            )
            return created, secret

        return self._audited("webhook.add", write, details=lambda: _given(data))

    def list_webhooks(self) -> list[Webhook]:
        """Every webhook subscription, by name."""
        return WebhookStore(self.db).list()

    def get_webhook(self, name: str) -> Webhook:
        return WebhookStore(self.db).get(validate_name(name))

    def update_webhook(self, name: str, changes: Mapping[str, Any]) -> Webhook:
        """Change ``url``, ``events``, ``job_prefix``, ``tag`` (null: no filter) or
        ``enabled``. A disabled subscription gets no events; its pending deliveries
        wait and go out once it is enabled again."""
        return self._audited(
            "webhook.update",
            lambda: WebhookStore(self.db).update(
                validate_name(name), _webhook_fields(changes, create=False)),
            details=lambda: {"name": _short(name), **_given(changes)},
        )

    def delete_webhook(self, name: str) -> Webhook:
        """Delete a subscription and its delivery log."""
        return self._audited(
            "webhook.delete", lambda: WebhookStore(self.db).delete(validate_name(name)),
            details=lambda: {"name": _short(name)},
        )

    def list_deliveries(
        self, name: str, *, status: DeliveryStatus | str | None = None, limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Delivery]:
        """A subscription's delivery log, newest event first: status, attempts, the
        last status code and error, the next attempt."""
        wanted = None
        if status is not None:
            if not isinstance(status, str) or status not in {s.value for s in DeliveryStatus}:
                raise ValidationError("status", "must be one of "
                                      + ", ".join(s.value for s in DeliveryStatus))
            wanted = DeliveryStatus(status)
        return WebhookStore(self.db).deliveries(
            validate_name(name), status=wanted, limit=_limit(limit), cursor=cursor)

    def test_webhook(self, name: str) -> Delivery:
        """Send a ``webhook.test`` event to this subscription alone (a node delivers it
        like any other); :class:`Conflict` when it is disabled."""
        return self._audited(
            "webhook.test", lambda: WebhookStore(self.db).test(validate_name(name)),
            details=lambda: {"name": _short(name)},
        )

    @staticmethod
    def _spec(data: Mapping[str, Any] | JobSpec) -> JobSpec:
        if isinstance(data, JobSpec):
            data = {f: getattr(data, f) for f in SPEC_FIELDS}
        return build_spec(data)


__all__ = [
    "MAX_CONCURRENCY", "MAX_JITTER_S", "MAX_JOB_CALENDARS", "MAX_RUNS", "MAX_UPSTREAM", "JobView",
    "SchedulerClient", "build_calendar", "build_spec", "first_fire", "preview_schedule",
    "validate_upstream",
]
