"""/api/v1/runs and /api/v1/jobs/{name}/runs: the history, newest first."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from werkzeug.routing import BaseConverter

from quartzlite import codec
from quartzlite.errors import ValidationError
from quartzlite.models import Run
from quartzlite.validation import validate_name

from . import serialize
from .context import get_client
from .parse import Query, json_object

bp = Blueprint("runs", __name__)


class RunIdConverter(BaseConverter):
    """Any path segment but ``prune``: ``/runs/prune`` is only POST, and OPTIONS there
    must not offer GET. Non-numeric ids still reach the view, which names the field."""

    regex = r"(?!prune(?:/|$))[^/]+"

FILTERS = ("status", "since", "until", "limit", "cursor")


def _summary(run: Run) -> dict[str, object]:
    return codec.run_to_dict(run, output=False)


@bp.get("/runs")
def list_() -> Response:
    q = Query(("job", "node", *FILTERS))
    result = get_client().list_runs(
        job=q.string("job"),
        status=q.string("status"),
        node=q.string("node"),
        since=q.instant("since"),
        until=q.instant("until"),
        limit=q.integer("limit", 100),
        cursor=q.cursor(),
    )
    return jsonify(serialize.page(result, _summary))


@bp.get("/jobs/<name>/runs")
def of_job(name: str) -> Response:
    """Runs of the jobs that had this name (a deleted job's history included)."""
    q = Query(FILTERS)
    result = get_client().list_runs(
        job=validate_name(name),
        status=q.string("status"),
        since=q.instant("since"),
        until=q.instant("until"),
        limit=q.integer("limit", 100),
        cursor=q.cursor(),
    )
    return jsonify(serialize.page(result, _summary))


@bp.get("/runs/<run_id:run_id>")
def show(run_id: str) -> Response:
    """One run with the tail of its output."""
    Query(())
    if not run_id.isascii() or not run_id.isdigit() or len(run_id) > 18:
        raise ValidationError("id", f"must be a positive integer, got {run_id[:40]!r}")
    return jsonify(codec.run_to_dict(get_client().get_run(int(run_id))))


@bp.post("/runs/prune")
def prune() -> Response:
    """Delete finished runs planned longer ago than ``older_than`` (seconds or a
    duration such as "90d"), deleted jobs with no runs left, and webhook events with
    their deliveries older than it (admins)."""
    Query(())
    body = json_object()
    unknown = sorted(set(body) - {"older_than"})
    if unknown:
        raise ValidationError(unknown[0], "unknown field (allowed: older_than)")
    if "older_than" not in body:
        raise ValidationError("older_than", "is required, e.g. \"90d\"")
    pruned = get_client().prune_history(body["older_than"])
    return jsonify({"runs": pruned.runs, "jobs": pruned.jobs, "events": pruned.events,
                    "deliveries": pruned.deliveries, "before": codec.iso(pruned.before)})
