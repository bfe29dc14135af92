"""The dashboard's pages. Each view parses its query or form, calls the client and
renders a template; ``?fragment=<region>`` renders only a live region, for htmx's polling.

Rejections render the page again with the reason next to the field (a form) or in the
page's flash (an action), with the status the API would answer (400, 404, 409); other
errors reach :func:`error_page`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Blueprint, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from quartzlite.client import LAST_STATUSES
from quartzlite.enums import AuditSource, JobState, RunStatus
from quartzlite.errors import Conflict, Forbidden, NotFound, QuartzliteError, ValidationError
from quartzlite.models import Job, Page, Run, Session

from .. import auth as api_auth
from ..context import get_client
from ..errors import status_of
from ..serialize import node_name
from . import charts, forms, session

log = logging.getLogger("quartzlite.api.ui")

#: Rows per page of the jobs, runs and audit lists.
PAGE_SIZE = 50
#: Runs shown on a job's page.
HISTORY_SIZE = 25
#: How many upcoming instants a job page and the preview show.
UPCOMING = 10
#: The messages an action's redirect may ask the next page to show (no free text in URLs).
FLASHES = {
    "created": "Job created.", "saved": "Job saved.", "triggered": "Triggered: a node runs it now.",
    "paused": "Paused.", "resumed": "Resumed.", "kill": "Kill requested: the owning node kills the run.",
    "deleted": "Job deleted.",
}
Rendered = str | tuple[str, int] | Response
#: The live regions each page renders alone for htmx (``?fragment=``).
FRAGMENTS = {"overview": ("live", "chart"), "job": ("history", "controls")}


@api_auth.public
def root() -> Response:
    return redirect(url_for("ui.overview"), 302)


def _render(template: str, status: int = 200, /, **context: Any) -> tuple[str, int]:
    fragment = request.args.get("fragment")
    if fragment and request.headers.get("HX-Request"):
        page = template.removeprefix("ui/").removesuffix(".html")
        if fragment not in FRAGMENTS.get(page, ()):
            raise NotFound(f"no region {fragment!r} on this page", details={"fragment": fragment})
        template = f"ui/_{page}_{fragment}.html"
    flash_code = request.args.get("done")
    context.setdefault("flash", (FLASHES[flash_code], "ok") if flash_code in FLASHES else None)
    return render_template(template, **context), status


def _text_arg(name: str) -> str | None:
    value = (request.args.get(name) or "").strip()
    return value[:255] or None


def _pager(endpoint: str, filters: dict[str, str | None], page: Page[Any]) -> dict[str, str | None]:
    """Links to the first page (when not on it) and the next one, filters kept."""
    active: dict[str, Any] = {k: v for k, v in filters.items() if v}
    return {
        "first_url": url_for(endpoint, **active) if request.args.get("cursor") else None,
        "next_url": url_for(endpoint, **active, cursor=page.next_cursor) if page.next_cursor else None,
    }


def _nodes_by_session(sessions: list[Session]) -> dict[str, str]:
    return {s.id: node_name(s) for s in sessions}


# -- overview ---------------------------------------------------------------------


def overview() -> Rendered:
    # The live region (every 2 s) leaves the chart out; the chart refreshes every 30 s.
    live_only = request.args.get("fragment") == "live" and bool(request.headers.get("HX-Request"))
    view = get_client().overview(activity=not live_only)
    buckets = [
        charts.Bucket(start=m.start, fires=m.fires, late_fires=m.late, p50_ms=m.mean_ms,
                      p99_ms=m.max_ms)
        for m in view.activity
    ]
    chart = charts.fires_chart(buckets, title="Runs started per minute, last 3 hours (UTC)",
                               p50_label="mean", p99_label="max")
    return _render("ui/overview.html", view=view, chart=chart, node_names=_nodes_by_session(view.sessions))


# -- jobs -------------------------------------------------------------------------


def jobs() -> Rendered:
    client = get_client()
    filters = {k: _text_arg(k) for k in ("prefix", "state", "paused", "tag", "last_status")}
    paused = {"yes": True, "no": False}.get(filters["paused"] or "")
    error: ValidationError | None = None
    page: Page[Job]
    try:
        page = client.list_jobs(
            state=filters["state"], paused=paused, tag=filters["tag"], name_prefix=filters["prefix"],
            last_status=filters["last_status"], limit=PAGE_SIZE, cursor=_text_arg("cursor"),
        )
    except ValidationError as rejected:
        page, error = Page(items=[], next_cursor=None), rejected
    last = client.last_statuses([j.name for j in page.items])
    return _render(
        "ui/jobs.html", 400 if error else 200, page=page, filters=filters, last=last, error=error,
        states=[s.value for s in JobState], last_statuses=LAST_STATUSES,
        **_pager("ui.jobs", filters, page),
    )


def job(name: str, *, flash: tuple[str, str] | None = None, status: int = 200,
        params_text: str = "", params_error: str | None = None) -> Rendered:
    client = get_client()
    view = client.describe_job(name, upcoming=UPCOMING)
    if view.job.deleted:
        raise NotFound(f"no job named {name!r}", details={"job": name})
    sessions = client.cluster()
    history = client.list_runs(job=name, limit=HISTORY_SIZE, cursor=_text_arg("cursor"))
    context: dict[str, Any] = {"job": view.job, "view": view, "history": history,
                               "node_names": _nodes_by_session(sessions),
                               "params_text": params_text, "params_error": params_error}
    if flash is not None:
        context["flash"] = flash
    return _render("ui/job.html", status, **context)


def job_new() -> Rendered:
    if request.method == "GET":
        if not session.is_admin():
            raise Forbidden("only an admin token may create jobs", details={"required": "admin"})
        return _render("ui/job_form.html", fields=forms.FIELDS, values={"timezone": "UTC"}, error=None, editing=None)
    return _save(None)


def job_edit(name: str) -> Rendered:
    if request.method == "GET":
        if not session.is_admin():
            raise Forbidden("only an admin token may edit jobs", details={"required": "admin"})
        found = get_client().get_job(name)
        return _render("ui/job_form.html", fields=forms.FIELDS, values=forms.from_spec(found.spec), error=None, editing=name)
    return _save(name)


def _save(name: str | None) -> Rendered:
    client = get_client()
    values = {f: request.form.get(f, "") for f in forms.FIELD_NAMES}
    try:
        data = forms.to_job_data(request.form, name=name)
        if name is None:
            saved = client.add_job(data)
        else:
            client.get_job(name)  # an edit never creates: 404 for a job deleted meanwhile
            saved, _ = client.put_job(data)
    except (ValidationError, Conflict) as rejected:
        if isinstance(rejected, ValidationError):
            field = rejected.field
        else:  # a conflict about a field (max_concurrency changed while a run is in flight)
            named = rejected.details.get("field")  # names it; else the name's (it exists)
            field = named if named in forms.FIELD_NAMES else "name"
        return _render("ui/job_form.html", status_of(rejected), fields=forms.FIELDS, values=values, editing=name,
                       error=(field, rejected.reason if isinstance(rejected, ValidationError)
                              else rejected.message))
    return redirect(url_for("ui.job", name=saved.name, done="created" if name is None else "saved"), 303)


def job_delete(name: str) -> Rendered:
    client = get_client()
    if request.method == "GET":
        if not session.is_admin():
            raise Forbidden("only an admin token may delete jobs", details={"required": "admin"})
        return _render("ui/job_delete.html", job=client.get_job(name))
    client.delete_job(name)
    return redirect(url_for("ui.jobs", done="deleted"), 303)


def _trigger(name: str) -> object:
    """Trigger with the form's parameters (lines of NAME=VALUE), if any."""
    text = request.form.get(forms.PARAMS_FIELD, "")
    return get_client().trigger_job(name, forms.trigger_params(text))


ACTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "trigger": ("triggered", _trigger),
    "pause": ("paused", lambda name: get_client().pause_job(name)),
    "resume": ("resumed", lambda name: get_client().resume_job(name)),
    "kill": ("kill", lambda name: get_client().kill_job(name)),
}


def job_action(name: str, action: str) -> Rendered:
    if action not in ACTIONS:
        raise NotFound(f"no action {action!r}: one of {', '.join(ACTIONS)}", details={"action": action})
    done, act = ACTIONS[action]
    params_text = request.form.get(forms.PARAMS_FIELD, "") if action == "trigger" else ""
    try:
        act(name)
    except Conflict as refused:  # e.g. trigger while it runs, kill when nothing runs
        return job(name, flash=(refused.message, "error"), status=409, params_text=params_text)
    except ValidationError as rejected:  # the trigger's parameters: shown next to their field
        if not (action == "trigger" and forms.is_params_error(rejected)):
            raise
        return job(name, status=400, params_text=params_text, params_error=rejected.message)
    back = session.safe_next(request.form.get("next"), url_for("ui.job", name=name))
    separator = "&" if "?" in back else "?"
    return redirect(f"{back}{separator}done={done}", 303)


# -- schedule preview -------------------------------------------------------------


def preview() -> Rendered:
    """The next instants of a schedule being typed (or why it is not valid)."""
    client = get_client()
    expression = (request.args.get("schedule") or "").strip()
    zone = (request.args.get("timezone") or "").strip() or "UTC"
    calendars = (request.args.get("calendars") or "").strip()
    start_text = (request.args.get("preview_from") or "").strip()
    instants: list[datetime] = []
    error = None
    if expression:
        try:
            start = client.now()
            if start_text:
                try:
                    start = datetime.fromisoformat(start_text).replace(tzinfo=UTC) - timedelta(microseconds=1)
                except ValueError:
                    raise ValidationError("preview_from", "must be a date (YYYY-MM-DD)") from None
            instants = client.preview(expression, zone, start=start, count=UPCOMING, calendars=calendars)
        except ValidationError as rejected:
            error = rejected
    return render_template("ui/_preview.html", expression=expression, zone=zone, instants=instants,
                           error=error)


# -- runs and audit ---------------------------------------------------------------


def runs() -> Rendered:
    client = get_client()
    filters = {k: _text_arg(k) for k in ("job", "status", "node", "since", "until")}
    error: ValidationError | None = None
    page: Page[Run]
    try:
        since, until = (_instant(k, filters[k]) for k in ("since", "until"))
        page = client.list_runs(job=filters["job"], status=filters["status"], node=filters["node"],
                                since=since, until=until, limit=PAGE_SIZE, cursor=_text_arg("cursor"))
    except ValidationError as rejected:
        page, error = Page(items=[], next_cursor=None), rejected
    return _render("ui/runs.html", 400 if error else 200, page=page, filters=filters, error=error,
                   statuses=[s.value for s in RunStatus], **_pager("ui.runs", filters, page))


def _instant(field: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(field, "must be an ISO-8601 instant, e.g. 2026-11-24T08:00:00Z") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def run(run_id: int) -> Rendered:
    return _render("ui/run.html", run=get_client().get_run(run_id))


def audit() -> Rendered:
    if not session.is_admin():
        raise Forbidden("the audit trail is for admin tokens", details={"required": "admin"})
    filters = {k: _text_arg(k) for k in ("job", "token", "source")}
    page = get_client().list_audit(job=filters["job"], token=filters["token"], limit=PAGE_SIZE,
                                   source=filters["source"], cursor=_text_arg("cursor"))
    return _render("ui/audit.html", page=page, filters=filters,
                   sources=[s.value for s in AuditSource], **_pager("ui.audit", filters, page))


def error_page(error: QuartzliteError) -> Response | tuple[str, int]:
    """A rejection or failure as a page (401 of an ended session: the sign-in page)."""
    status = status_of(error)
    if status == 401:
        return redirect(url_for("ui.login"), 303)
    message = error.message if status < 500 else "a database error (the server log has the details)"
    return render_template("ui/error.html", status=status, message=message), status


def unexpected_page(error: Exception) -> HTTPException | tuple[str, int]:
    """Anything else: logged with its traceback, answered with a page without it."""
    if isinstance(error, HTTPException):
        return error
    log.error("%s %s: unexpected error", request.method, request.path, exc_info=error,
              extra={"action": "ui_unexpected_error"})
    return render_template("ui/error.html", status=500,
                           message="internal server error (the server log has the details)"), 500


def register(bp: Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
        ("/", "overview", overview, ["GET"]),
        ("/jobs", "jobs", jobs, ["GET"]),
        ("/jobs/new", "job_new", job_new, ["GET", "POST"]),
        ("/job/<name>", "job", job, ["GET"]),
        ("/job/<name>/edit", "job_edit", job_edit, ["GET", "POST"]),
        ("/job/<name>/delete", "job_delete", job_delete, ["GET", "POST"]),
        ("/job/<name>/<action>", "job_action", job_action, ["POST"]),
        ("/preview", "preview", preview, ["GET"]),
        ("/runs", "runs", runs, ["GET"]),
        ("/runs/<int:run_id>", "run", run, ["GET"]),
        ("/audit", "audit", audit, ["GET"]),
    ]
    for rule, endpoint, view, methods in rules:
        bp.add_url_rule(rule, endpoint, view, methods=methods)
    bp.register_error_handler(QuartzliteError, error_page)
    bp.register_error_handler(Exception, unexpected_page)
