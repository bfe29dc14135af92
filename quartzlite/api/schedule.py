"""/api/v1/schedule/preview: the next fire instants of a schedule expression."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from quartzlite import codec

from .context import get_client
from .parse import Query

bp = Blueprint("schedule", __name__)


@bp.get("/schedule/preview")
def preview() -> Response:
    """``schedule`` (required), ``timezone`` (default UTC), ``count`` (default 10,
    1-1000), ``from`` (ISO-8601 with offset; default: the database's now), ``calendars``
    (comma-separated names: their excluded slots are left out)."""
    q = Query(("schedule", "timezone", "count", "from", "calendars"))
    expression = q.required("schedule")
    timezone = q.string("timezone") or "UTC"
    count = q.integer("count", 10)
    client = get_client()
    start = q.instant("from") or client.now()
    calendars = q.string("calendars") or ""
    times = client.preview(expression, timezone, start=start, count=count, calendars=calendars)
    return jsonify(
        {
            "schedule": expression,
            "timezone": timezone,
            "calendars": sorted({n.strip() for n in calendars.split(",") if n.strip()}),
            "from": codec.iso(start),
            "times": [codec.iso(t) for t in times],
        }
    )
