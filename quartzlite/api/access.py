"""The access log: one line per request on the ``quartzlite.api.access`` logger (INFO),
with the method, path, status, duration, client address and the token's name. Secrets
never appear: the Authorization header and request bodies are not logged, and secret
shapes in the query string are masked. Control characters in the path are escaped: a
request cannot write a line of its own into the log."""

from __future__ import annotations

import logging
import time

from flask import Flask, Response, g, request

from quartzlite.redact import clip, escape_controls, redact

from .auth import current_token

log = logging.getLogger("quartzlite.api.access")
#: Most characters of a path and query string logged (a line stays a line).
MAX_LOGGED_PATH = 2048


def _start() -> None:
    g.access_started = time.monotonic()


def _log(response: Response) -> Response:
    started: float | None = g.get("access_started")
    elapsed_ms = None if started is None else (time.monotonic() - started) * 1000
    token = current_token()
    who = token.name if token is not None else "-"
    path = escape_controls(redact(clip(request.full_path.rstrip("?"), MAX_LOGGED_PATH)))
    log.info(
        '%s "%s %s" %d %s ms token=%s', request.remote_addr or "-", escape_controls(request.method),
        path, response.status_code,
        "-" if elapsed_ms is None else f"{elapsed_ms:.1f}", who,
        extra={"action": "http_request", "method": request.method,
               "path": escape_controls(clip(request.path, MAX_LOGGED_PATH)),
               "status": response.status_code, "token": who,
               "duration_ms": None if elapsed_ms is None else round(elapsed_ms, 1)},
    )
    return response


def register(app: Flask) -> None:
    """Register first, so that the clock starts before authentication runs."""
    app.before_request(_start)
    app.after_request(_log)
