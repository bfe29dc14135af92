"""The job form: its fields, and the conversion between a form and the job fields the
client validates (the same :func:`~quartzlite.client.build_spec` as the API's). A blank
field means the field's default; a value that is not a number where one is needed is a
ValidationError naming the field, like every other rejection. Also the job page's
trigger parameters (:func:`trigger_params`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quartzlite import codec
from quartzlite.enums import MisfirePolicy, OverrunPolicy, RecoveryPolicy, UpstreamCondition
from quartzlite.errors import ValidationError
from quartzlite.models import JobSpec
from quartzlite.validation import parse_params


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    name: str
    label: str
    kind: str = "text"  # text | textarea | number | integer | select | checkbox | list | json
    hint: str = ""
    choices: tuple[str, ...] = ()
    placeholder: str = ""


FIELDS: tuple[Field, ...] = (
    Field(name="name", label="Name", hint="Letters, digits, . _ - (up to 128); unique."),
    Field(name="schedule", label="Schedule",
          hint="5-field cron, 6/7-field Quartz, @every 30s, @at 2027-01-01T00:00:00Z, @daily ...",
          placeholder="*/5 * * * *"),
    Field(name="timezone", label="Time zone", hint="IANA zone the schedule is read in.",
          placeholder="UTC"),
    Field(name="calendars", label="Calendars", kind="list",
          hint="Exclusion calendars, comma-separated."),
    Field(name="upstream", label="Upstream jobs", kind="list",
          hint="Jobs whose runs trigger this one, comma-separated (schedule @manual)."),
    Field(name="upstream_on", label="Run when upstream", kind="select",
          choices=tuple(c.value for c in UpstreamCondition),
          hint="How an upstream run must end: success, failure or completion."),
    Field(name="command", label="Shell command", kind="textarea",
          hint="Run with bash -c. Give this or a callable."),
    Field(name="callable", label="Python callable", hint="package.module:function",
          placeholder="myapp.jobs:nightly"),
    Field(name="kwargs", label="Keyword arguments", kind="json",
          hint="A JSON object passed to the callable.", placeholder="{}"),
    Field(name="timeout_s", label="Timeout (s)", kind="number", hint="Blank: no timeout."),
    Field(name="max_attempts", label="Max attempts", kind="integer", hint="1 = no retry.",
          placeholder="1"),
    Field(name="retry_backoff_s", label="Retry backoff (s)", kind="number", placeholder="1"),
    Field(name="retry_max_backoff_s", label="Largest retry backoff (s)", kind="number",
          placeholder="300"),
    Field(name="misfire_policy", label="Misfire policy", kind="select",
          choices=tuple(p.value for p in MisfirePolicy),
          hint="What a node does with slots it finds late."),
    Field(name="misfire_grace_s", label="Misfire grace (s)", kind="number", placeholder="60"),
    Field(name="overrun_policy", label="Overrun policy", kind="select",
          choices=tuple(p.value for p in OverrunPolicy),
          hint="Slots that come due while the job's run still runs."),
    Field(name="recovery_policy", label="Recovery policy", kind="select",
          choices=tuple(p.value for p in RecoveryPolicy),
          hint="A run whose node died: run it again, or not."),
    Field(name="priority", label="Priority", kind="integer", hint="-1000..1000; higher first.",
          placeholder="0"),
    Field(name="tags", label="Tags", kind="list",
          hint="Comma-separated; only nodes with every tag run the job."),
    Field(name="max_concurrency", label="Max concurrency", kind="integer",
          hint="1..100 runs at once across the cluster; each slot still runs once.",
          placeholder="1"),
    Field(name="broadcast", label="Broadcast", kind="checkbox",
          hint="Every live node with the job's tags runs each slot (max concurrency 1)."),
    Field(name="start_at", label="Start at", hint="ISO-8601 with offset; no slot before it.",
          placeholder="2027-01-01T00:00:00Z"),
    Field(name="end_at", label="End at", hint="ISO-8601 with offset; no slot after it.",
          placeholder="2027-12-31T23:59:59Z"),
    Field(name="max_runs", label="Max runs", kind="integer", hint="Blank: no limit."),
    Field(name="jitter_s", label="Jitter (s)", kind="number",
          hint="Each slot runs at a stable offset in [0, jitter].", placeholder="0"),
    Field(name="description", label="Description", kind="textarea"),
    Field(name="paused", label="Paused", kind="checkbox", hint="Created or kept paused."),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)


def to_job_data(form: Mapping[str, str], *, name: str | None = None) -> dict[str, Any]:
    """The job fields a submitted form gives (blank fields left out: their defaults)."""
    data: dict[str, Any] = {}
    for field in FIELDS:
        if field.kind == "checkbox":
            data[field.name] = form.get(field.name) in ("on", "true", "1")
            continue
        raw = (form.get(field.name) or "").strip()
        if field.name == "name" and name is not None:
            raw = name
        if not raw:
            continue
        data[field.name] = _convert(field, raw)
    return data


def _convert(field: Field, raw: str) -> Any:
    if field.kind == "number":
        try:
            return float(raw)
        except ValueError:
            raise ValidationError(field.name, f"must be a number, got {raw[:40]!r}") from None
    if field.kind == "integer":
        try:
            return int(raw)
        except ValueError:
            raise ValidationError(field.name, f"must be a whole number, got {raw[:40]!r}") from None
    if field.kind == "list":
        return [part.strip() for part in raw.split(",") if part.strip()]
    if field.kind == "json":
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as error:
            raise ValidationError(field.name, f"is not valid JSON: {error}") from None
    return raw


#: The job page's trigger parameters: a textarea of the trigger form.
PARAMS_FIELD = "params"


def trigger_params(text: str) -> dict[str, str] | None:
    """The trigger form's parameters, one ``NAME=VALUE`` a line, values strings (as the
    CLI's ``--param``; blank lines skipped); None when there are none. The client
    validates the names and values (:func:`~quartzlite.validation.validate_params`)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return parse_params(lines, PARAMS_FIELD) or None


def is_params_error(error: ValidationError) -> bool:
    """Whether a rejected trigger is about its parameters (``params``, ``params.NAME``)."""
    return error.field == PARAMS_FIELD or error.field.startswith(PARAMS_FIELD + ".")


def from_spec(spec: JobSpec) -> dict[str, str]:
    """A stored job as form values (for the edit form)."""
    data = codec.spec_to_dict(spec)
    values: dict[str, str] = {}
    for field in FIELDS:
        value = data.get(field.name)
        if value is None:
            values[field.name] = ""
        elif field.kind == "checkbox":
            values[field.name] = "on" if value else ""
        elif field.kind == "list":
            values[field.name] = ", ".join(value)
        elif field.kind == "json":
            values[field.name] = json.dumps(value) if value else ""
        elif isinstance(value, float) and value.is_integer():
            values[field.name] = str(int(value))
        else:
            values[field.name] = str(value)
    return values
