"""Response bodies: quartzlite.codec's shapes plus what only the API adds."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from quartzlite import codec
from quartzlite.client import JobView
from quartzlite.models import AuditEntry, Page, Session

T = TypeVar("T")


def page(result: Page[T], item: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    return {"items": [item(x) for x in result.items], "next_cursor": result.next_cursor}


def node_name(session: Session) -> str:
    """How runs name the node that ran them: host:pid."""
    return f"{session.host}:{session.pid}"


def job_detail(view: JobView, sessions: Iterable[Session]) -> dict[str, Any]:
    data = codec.job_to_dict(view.job)
    owner = next((s for s in sessions if s.id == view.job.owner_session), None)
    data["owner_node"] = None if owner is None else node_name(owner)
    data["upcoming"] = [codec.iso(t) for t in view.upcoming]
    data["last_run"] = None if view.last_run is None else codec.run_to_dict(view.last_run, output=False)
    data["downstream"] = list(view.downstream)
    return data


def node(session: Session, now: datetime) -> dict[str, Any]:
    data = codec.session_to_dict(session)
    data["name"] = node_name(session)
    data["heartbeat_age_s"] = round((now - session.heartbeat_at).total_seconds(), 3)
    return data


def audit_entry(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": codec.iso(entry.at),
        "token": entry.token_name,
        "action": entry.action,
        "job": entry.job_name,
        "client_address": entry.client_address,
        "details": entry.details,
        "source": entry.source.value,
    }
