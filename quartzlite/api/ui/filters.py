"""Template filters and globals: instants (UTC in the markup; app.js shows them in the
viewer's zone, UTC on hover), durations, lateness, and the session's role."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from flask import Blueprint
from markupsafe import Markup, escape

from quartzlite.models import Run

from . import session


def instant(value: datetime | None, empty: str = "-") -> Markup:
    """``<time>`` with the instant in UTC (app.js rewrites the text into local time)."""
    if value is None:
        return Markup(escape(empty))
    iso = value.isoformat().replace("+00:00", "Z")
    text = value.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    return Markup(f'<time datetime="{escape(iso)}" title="{escape(iso)}">{escape(text)}</time>')


def in_zone(value: datetime, zone: str) -> str:
    """The instant as wall time in ``zone`` with its offset (the job's own zone)."""
    try:
        local = value.astimezone(ZoneInfo(zone))
    except (KeyError, ValueError):
        return value.isoformat()
    return local.strftime("%Y-%m-%d %H:%M:%S %z (%Z)")


def utc_text(value: datetime) -> str:
    """The instant in UTC, whatever zone it carries: ``2027-03-28 00:30:00 UTC``."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + " UTC"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def lateness(run: Run) -> str:
    if run.started_at is None:
        return "-"
    return duration(max((run.started_at - run.planned_at).total_seconds(), 0.0))


def run_duration(run: Run) -> str:
    if run.started_at is None or run.ended_at is None:
        return "-"
    return duration(max((run.ended_at - run.started_at).total_seconds(), 0.0))


def tail(text: str | None, chars: int = 2000) -> str:
    if not text:
        return ""
    return text if len(text) <= chars else "…" + text[-chars:]


def register(bp: Blueprint) -> None:
    for name, fn in (("instant", instant), ("in_zone", in_zone), ("utc_text", utc_text), ("duration", duration),
                     ("lateness", lateness), ("run_duration", run_duration), ("tail", tail)):
        bp.add_app_template_filter(fn, name)

    @bp.app_context_processor
    def _globals() -> dict[str, object]:
        return {"is_admin": session.is_admin}
