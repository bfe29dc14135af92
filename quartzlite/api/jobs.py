"""/api/v1/jobs: create, replace, change, list, show, delete and control jobs by name."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, url_for

from quartzlite import codec
from quartzlite.errors import ValidationError
from quartzlite.models import Job

from . import serialize
from .context import get_client
from .parse import Query, json_object

bp = Blueprint("jobs", __name__)


def _job(job: Job, status: int = 200) -> tuple[Response, int]:
    return jsonify(codec.job_to_dict(job)), status


@bp.post("/jobs")
def create() -> tuple[Response, int, dict[str, str]]:
    Query(())
    job = get_client().add_job(json_object())
    return jsonify(codec.job_to_dict(job)), 201, {"Location": url_for("jobs.show", name=job.name)}


@bp.put("/jobs/<name>")
def put(name: str) -> tuple[Response, int]:
    Query(())
    body = json_object()
    if "name" in body and body["name"] != name:
        raise ValidationError("name", f"must match the name in the path ({name!r}) or be left out")
    job, changed = get_client().put_job({**body, "name": name})
    # put_job says whether anything changed, not whether it inserted: a job it just
    # inserted has updated_at == created_at (a replace stamps updated_at anew).
    created = changed and job.created_at == job.updated_at
    return _job(job, 201 if created else 200)


@bp.patch("/jobs/<name>")
def patch(name: str) -> tuple[Response, int]:
    Query(())
    body = json_object()
    if not body:
        raise ValidationError("body", "give at least one field to change")
    return _job(get_client().update_job(name, body))


@bp.get("/jobs")
def list_() -> Response:
    q = Query(("state", "paused", "tag", "prefix", "last_status", "limit", "cursor"))
    result = get_client().list_jobs(
        state=q.string("state"),
        paused=q.boolean("paused"),
        tag=q.string("tag"),
        name_prefix=q.string("prefix"),
        last_status=q.string("last_status"),
        limit=q.integer("limit", 100),
        cursor=q.cursor(),
    )
    return jsonify(serialize.page(result, codec.job_to_dict))


@bp.get("/jobs/<name>")
def show(name: str) -> Response:
    Query(())
    client = get_client()
    view = client.describe_job(name)
    sessions = client.cluster() if view.job.owner_session else []
    return jsonify(serialize.job_detail(view, sessions))


@bp.delete("/jobs/<name>")
def delete(name: str) -> tuple[Response, int]:
    Query(())
    return _job(get_client().delete_job(name))


@bp.post("/jobs/<name>/pause")
def pause(name: str) -> tuple[Response, int]:
    Query(())
    return _job(get_client().pause_job(name))


@bp.post("/jobs/<name>/resume")
def resume(name: str) -> tuple[Response, int]:
    Query(())
    return _job(get_client().resume_job(name))


@bp.post("/jobs/<name>/trigger")
def trigger(name: str) -> tuple[Response, int]:
    """Due now; a node fires it within about its poll interval (202: accepted, not yet run).
    Optional body ``{"params": {...}}``: the run's parameters."""
    Query(())
    body = json_object(required=False)
    unknown = sorted(set(body) - {"params"})
    if unknown:
        raise ValidationError(unknown[0], "unknown field (allowed: params)")
    return _job(get_client().trigger_job(name, body.get("params")), 202)


@bp.post("/jobs/<name>/kill")
def kill(name: str) -> tuple[Response, int]:
    """The owning node kills the run at its next heartbeat (202: requested)."""
    Query(())
    return _job(get_client().kill_job(name), 202)
