"""Row <-> model mapping; the only place that knows both shapes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from quartzlite.clock import utc
from quartzlite.codec import calendar_rules_to_dict, spec_to_dict
from quartzlite.enums import (
    JobState,
    MisfirePolicy,
    OverrunPolicy,
    RecoveryPolicy,
    RunStatus,
    UpstreamCondition,
)
from quartzlite.models import Calendar, CalendarRules, Job, JobSpec, Run, Session, Shard

#: A database row as SQLAlchemy hands it over (RowMapping), or any mapping like it.
Row = Mapping[Any, Any]


def join_tags(tags: Iterable[str]) -> str:
    return ",".join(sorted(set(tags)))


def split_tags(value: str | None) -> tuple[str, ...]:
    return tuple(t for t in (value or "").split(",") if t)


def instant(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def to_db(value: datetime | None) -> datetime | None:
    """Aware datetime -> naive UTC for a DATETIME(6) column."""
    return None if value is None else utc(value).replace(tzinfo=None)


def spec_values(spec: JobSpec) -> dict[str, Any]:
    """The columns a JobSpec fills: its JSON shape, with kwargs, tags and instants as
    stored."""
    return {
        **spec_to_dict(spec),
        "target_kind": spec.target_kind.value,
        "kwargs": json.dumps(spec.kwargs, sort_keys=True, separators=(",", ":")),
        "tags": join_tags(spec.tags),
        "calendars": join_tags(spec.calendars),
        "upstream": join_tags(spec.upstream),
        "start_at": to_db(spec.start_at),
        "end_at": to_db(spec.end_at),
    }


def spec_from_row(row: Row) -> JobSpec:
    return JobSpec(
        name=row["name"],
        schedule=row["schedule"],
        timezone=row["timezone"],
        start_at=instant(row["start_at"]),
        end_at=instant(row["end_at"]),
        max_runs=row["max_runs"],
        jitter_s=row["jitter_s"],
        command=row["command"],
        callable=row["callable"],
        kwargs=json.loads(row["kwargs"] or "{}"),
        timeout_s=row["timeout_s"],
        max_attempts=row["max_attempts"],
        retry_backoff_s=row["retry_backoff_s"],
        retry_max_backoff_s=row["retry_max_backoff_s"],
        misfire_policy=MisfirePolicy(row["misfire_policy"]),
        misfire_grace_s=row["misfire_grace_s"],
        overrun_policy=OverrunPolicy(row["overrun_policy"]),
        recovery_policy=RecoveryPolicy(row["recovery_policy"]),
        priority=row["priority"],
        tags=split_tags(row["tags"]),
        description=row["description"],
        paused=bool(row["paused"]),
        calendars=split_tags(row["calendars"]),
        upstream=split_tags(row["upstream"]),
        upstream_on=UpstreamCondition(row["upstream_on"]),
        max_concurrency=row["max_concurrency"],
        broadcast=bool(row["broadcast"]),
    )


def calendar_values(calendar: Calendar) -> dict[str, Any]:
    """The columns a calendar fills (its rules as a JSON object)."""
    return {
        "name": calendar.name,
        "description": calendar.description,
        "timezone": calendar.timezone,
        "rules": json.dumps(calendar_rules_to_dict(calendar.rules), sort_keys=True,
                            separators=(",", ":")),
    }


def calendar_from_row(row: Row) -> Calendar:
    """A stored calendar, its rules as stored (the engine checks them again when it
    compiles them: a row edited by hand fails there, naming the calendar)."""
    data = json.loads(row["rules"] or "{}")
    if not isinstance(data, dict):
        data = {}
    return Calendar(
        name=row["name"],
        timezone=row["timezone"],
        description=row["description"],
        rules=CalendarRules(
            dates=tuple(map(str, data.get("dates") or ())),
            yearly=tuple(map(str, data.get("yearly") or ())),
            ranges=tuple(
                (str(r.get("from")), str(r.get("to")))
                for r in data.get("ranges") or () if isinstance(r, dict)
            ),
            windows=tuple(map(str, data.get("windows") or ())),
        ),
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
    )


def job_from_row(row: Row) -> Job:
    return Job(
        id=row["id"],
        spec=spec_from_row(row),
        state=JobState(row["state"]),
        deleted=bool(row["deleted"]),
        next_fire_at=instant(row["next_fire_at"]),
        next_slot_at=instant(row["next_slot_at"]),
        next_attempt=row["next_attempt"],
        owner_session=row["owner_session"],
        fire_id=row["fire_id"],
        kill_requested=bool(row["kill_requested"]),
        error=row["error"],
        prepared_at=instant(row["prepared_at"]),
        started_at=instant(row["started_at"]),
        last_ended_at=instant(row["last_ended_at"]),
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
        runs_done=row["runs_done"],
    )


def run_from_row(row: Row) -> Run:
    return Run(
        id=row["id"],
        job_id=row["job_id"],
        job_name=row["job_name"],
        fire_id=row["fire_id"],
        planned_at=utc(row["planned_at"]),
        slot_at=utc(row["slot_at"]),
        attempt=row["attempt"],
        started_at=instant(row["started_at"]),
        ended_at=instant(row["ended_at"]),
        session_id=row["session_id"],
        node=row["node"],
        status=RunStatus(row["status"]),
        exit_code=row["exit_code"],
        output=row["output"] or "",
        error=row["error"],
        params=params_from_db(row.get("params")),
        upstream_run_id=row.get("upstream_run_id"),
        shard=shard_of(row.get("shard"), row.get("shard_total")),
    )


def shard_of(index: int | None, total: int | None) -> Shard | None:
    """A broadcast run's (or lane's) shard; None when ``total`` is NULL."""
    return None if total is None else Shard(index=index or 0, total=total)


def params_to_db(params: Mapping[str, Any] | None) -> str | None:
    """Run parameters as stored (compact JSON, sorted keys; NULL for none)."""
    if not params:
        return None
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def params_from_db(value: str | None) -> dict[str, Any] | None:
    """Stored run parameters (None for none, or for anything but a JSON object: a row
    edited by hand)."""
    if not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data else None


def session_from_row(row: Row, running: tuple[str, ...] = ()) -> Session:
    return Session(
        id=row["id"],
        host=row["host"],
        pid=row["pid"],
        started_at=utc(row["started_at"]),
        heartbeat_at=utc(row["heartbeat_at"]),
        clock_offset_ms=row["clock_offset_ms"],
        capacity=row["capacity"],
        tags=split_tags(row["tags"]),
        version=row["version"],
        running_jobs=running,
        db_member=row["db_member"],
    )
