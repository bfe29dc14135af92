"""/api/v1/calendars: exclusion calendars by name (create, replace, show, list, delete)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, url_for

from quartzlite import codec
from quartzlite.errors import ValidationError

from .context import get_client
from .parse import Query, json_object

bp = Blueprint("calendars", __name__)


@bp.post("/calendars")
def create() -> tuple[Response, int, dict[str, str]]:
    Query(())
    calendar = get_client().add_calendar(json_object())
    return (jsonify(codec.calendar_to_dict(calendar)), 201,
            {"Location": url_for("calendars.show", name=calendar.name)})


@bp.put("/calendars/<name>")
def put(name: str) -> tuple[Response, int]:
    """Create or replace (idempotent). Replacing plans no job anew: the nodes use the
    new rules from their next plan of each job that names it."""
    Query(())
    body = json_object()
    if "name" in body and body["name"] != name:
        raise ValidationError("name", f"must match the name in the path ({name!r}) or be left out")
    calendar, changed = get_client().put_calendar({**body, "name": name})
    created = changed and calendar.created_at == calendar.updated_at
    return jsonify(codec.calendar_to_dict(calendar)), 201 if created else 200


@bp.get("/calendars")
def list_() -> Response:
    Query(())
    return jsonify({"items": [codec.calendar_to_dict(c) for c in get_client().list_calendars()]})


@bp.get("/calendars/<name>")
def show(name: str) -> Response:
    Query(())
    return jsonify(codec.calendar_to_dict(get_client().get_calendar(name)))


@bp.delete("/calendars/<name>")
def delete(name: str) -> Response:
    """409 while a job names it (the message and details.jobs name them)."""
    Query(())
    return jsonify(codec.calendar_to_dict(get_client().delete_calendar(name)))
