"""Models as JSON-ready dicts: one shape for the CLI's --json and the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from quartzlite.enums import RunStatus
from quartzlite.models import (
    Calendar,
    CalendarRules,
    Delivery,
    Job,
    JobSpec,
    Run,
    Session,
    Webhook,
)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "schedule": spec.schedule,
        "timezone": spec.timezone,
        "start_at": iso(spec.start_at),
        "end_at": iso(spec.end_at),
        "max_runs": spec.max_runs,
        "jitter_s": spec.jitter_s,
        "command": spec.command,
        "callable": spec.callable,
        "kwargs": spec.kwargs,
        "timeout_s": spec.timeout_s,
        "max_attempts": spec.max_attempts,
        "retry_backoff_s": spec.retry_backoff_s,
        "retry_max_backoff_s": spec.retry_max_backoff_s,
        "misfire_policy": spec.misfire_policy.value,
        "misfire_grace_s": spec.misfire_grace_s,
        "overrun_policy": spec.overrun_policy.value,
        "recovery_policy": spec.recovery_policy.value,
        "priority": spec.priority,
        "tags": list(spec.tags),
        "description": spec.description,
        "paused": spec.paused,
        "calendars": list(spec.calendars),
        "upstream": list(spec.upstream),
        "upstream_on": spec.upstream_on.value,
        "max_concurrency": spec.max_concurrency,
        "broadcast": spec.broadcast,
    }


def calendar_rules_to_dict(rules: CalendarRules) -> dict[str, Any]:
    """A calendar's rules as JSON: ranges as ``{"from": ..., "to": ...}`` objects."""
    return {
        "dates": list(rules.dates),
        "yearly": list(rules.yearly),
        "ranges": [{"from": low, "to": high} for low, high in rules.ranges],
        "windows": list(rules.windows),
    }


def calendar_to_dict(calendar: Calendar) -> dict[str, Any]:
    return {
        "name": calendar.name,
        "timezone": calendar.timezone,
        "description": calendar.description,
        "rules": calendar_rules_to_dict(calendar.rules),
        "created_at": iso(calendar.created_at),
        "updated_at": iso(calendar.updated_at),
    }


def job_to_dict(job: Job) -> dict[str, Any]:
    return {
        **spec_to_dict(job.spec),
        "id": job.id,
        "state": job.state.value,
        "finished": job.finished,
        "runs_done": job.runs_done,
        "deleted": job.deleted,
        "next_fire_at": iso(job.next_fire_at),
        "next_attempt": job.next_attempt,
        "owner_session": job.owner_session,
        "fire_id": job.fire_id,
        "kill_requested": job.kill_requested,
        "error": job.error,
        "prepared_at": iso(job.prepared_at),
        "started_at": iso(job.started_at),
        "last_ended_at": iso(job.last_ended_at),
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
    }


def run_to_dict(run: Run, *, output: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": run.id,
        "job": run.job_name,
        "job_id": run.job_id,
        "fire_id": run.fire_id,
        "planned_at": iso(run.planned_at),
        "slot_at": iso(run.slot_at),
        "attempt": run.attempt,
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at),
        "lateness_ms": (
            None
            if run.started_at is None
            else round((run.started_at - run.planned_at).total_seconds() * 1000, 3)
        ),
        "session_id": run.session_id,
        "node": run.node,
        "status": run.status.value,
        "exit_code": run.exit_code,
        "error": run.error,
        "params": run.params,
        "upstream_run_id": run.upstream_run_id,
        "shard": None if run.shard is None else {"index": run.shard.index,
                                                 "total": run.shard.total},
    }
    if output:
        data["output"] = run.output
        # Still running: the output so far (its node writes it as it comes).
        data["output_live"] = run.status is RunStatus.RUNNING
    return data


def session_to_dict(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "host": session.host,
        "pid": session.pid,
        "started_at": iso(session.started_at),
        "heartbeat_at": iso(session.heartbeat_at),
        "clock_offset_ms": session.clock_offset_ms,
        "capacity": session.capacity,
        "tags": list(session.tags),
        "version": session.version,
        "running_jobs": list(session.running_jobs),
        "db_member": session.db_member,
    }


def webhook_to_dict(webhook: Webhook) -> dict[str, Any]:
    """A webhook subscription (never its secret)."""
    return {
        "name": webhook.name,
        "url": webhook.url,
        "events": [e.value for e in webhook.events],
        "job_prefix": webhook.job_prefix,
        "tag": webhook.tag,
        "enabled": webhook.enabled,
        "created_at": iso(webhook.created_at),
    }


def delivery_to_dict(delivery: Delivery) -> dict[str, Any]:
    """One entry of a webhook's delivery log."""
    return {
        "id": delivery.id,
        "webhook": delivery.webhook,
        "event": delivery.event.value,
        "event_id": delivery.event_id,
        "occurred_at": iso(delivery.occurred_at),
        "job": delivery.job_name,
        "run_id": delivery.run_id,
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "next_attempt_at": iso(delivery.next_attempt_at),
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "delivered_at": iso(delivery.delivered_at),
        "created_at": iso(delivery.created_at),
    }
