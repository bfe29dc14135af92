"""The HTTP API: a Flask app factory with one blueprint per resource.

Views parse the request, call :class:`~quartzlite.client.SchedulerClient` and
serialize; they hold no SQL and no try/except. Errors become one JSON shape in
:mod:`quartzlite.api.errors`; tokens, roles and the audit trail are
:mod:`quartzlite.api.auth`; :mod:`quartzlite.api.server` serves the app with waitress.
"""

from __future__ import annotations

from flask import Flask, Response, current_app, request

from quartzlite import __version__
from quartzlite.client import SchedulerClient
from quartzlite.enums import AuditSource

from . import (
    access,
    audit,
    auth,
    calendars,
    cluster,
    errors,
    health,
    jobs,
    openapi,
    runs,
    schedule,
    ui,
    webhooks,
)
from .context import EXTENSION, ApiState, NodeView
from .metrics import build_registry

API_PREFIX = "/api/v1"
#: Largest request body accepted (bytes); larger ones get 413. Default 1 MiB.
MAX_BODY_BYTES = 1024 * 1024
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: On every response, the app's and waitress's own errors alike: answers are JSON for
#: programs, which no browser may sniff into HTML, and show state that changes with
#: every write and may be a token's to see, which no cache may keep.
RESPONSE_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


def create_app(
    client: SchedulerClient,
    *,
    node: NodeView | None = None,
    expect_node: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Flask:
    """An app serving ``client``'s database. ``node``: the node of this process, for
    /readyz and /metrics (``serve``); ``expect_node``: /readyz fails until
    :func:`set_node` gives one.

    The views use ``client.auditing(source="api", audit=False)`` (the same pool): the
    app records each write once itself, with its token (:mod:`.auth`), never the
    client's actor too."""
    app = Flask("quartzlite.api")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    state = ApiState(
        client=client.auditing(source=AuditSource.API, audit=False), node=node,
        expect_node=expect_node,
    )
    state.registry = build_registry(state, __version__)
    app.extensions[EXTENSION] = state
    app.url_map.converters["run_id"] = runs.RunIdConverter
    # after_request hooks run last-registered first: this one runs after every other,
    # on the response as it leaves (a 429 that replaced a refused write's, too).
    app.after_request(_response_headers)
    access.register(app)
    errors.register(app)
    auth.register(app)
    app.register_blueprint(health.bp)
    for module in (jobs, calendars, runs, cluster, schedule, audit, webhooks, openapi):
        app.register_blueprint(module.bp, url_prefix=API_PREFIX)
    ui.register(app)
    app.after_request(_poke_node)
    return app


def _response_headers(response: Response) -> Response:
    for name, value in RESPONSE_HEADERS.items():  # the dashboard's static files set their own
        if name != "Cache-Control" or request.endpoint != "ui.static":
            response.headers[name] = value
    return response


def _poke_node(response: Response) -> Response:
    """After a successful write, the node of this process (``serve``) looks for due work
    at once: a job added or triggered here starts without waiting for the next poll (and
    a calendar changed here is read again at once). The dashboard's writes answer 303."""
    node = current_app.extensions[EXTENSION].node
    if node is not None and request.method in WRITES and 200 <= response.status_code < 400:
        node.poke()
    return response


def set_node(app: Flask, node: NodeView | None) -> None:
    """Give the app this process's (new) node: ``serve`` calls it from ``on_started``."""
    state: ApiState = app.extensions[EXTENSION]
    state.node = node


__all__ = ["API_PREFIX", "MAX_BODY_BYTES", "RESPONSE_HEADERS", "NodeView", "create_app", "set_node"]
