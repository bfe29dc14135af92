"""The dashboard: server-rendered pages under ``/ui`` for operators, served by the same
app (and port, and tokens) as the HTTP API.

A browser signs in with an API token once; the token becomes a server-side session
(:mod:`.session`: an HttpOnly, SameSite=Strict cookie holding a random secret whose
sha256 is the row's key, with idle and absolute expiry, ended by sign-out or by revoking
the token). Every POST carries the session's CSRF token. Viewers see every page but no
control that writes, and the server refuses their writes whatever the page shows.

Pages are Jinja templates; htmx (vendored in ``static/``, no build step, no CDN)
refreshes the live regions. Every response carries a Content-Security-Policy that allows
scripts, styles and requests from this origin only: no inline script or style anywhere.
Views call :class:`~quartzlite.client.SchedulerClient` as the API's do; the writes go
through the API's audit trail (the action is the view's endpoint, ``ui.*``; the source
``ui``).
"""

from __future__ import annotations

from flask import Blueprint, Flask, Response, request

from . import filters, pages, session

#: Where the dashboard lives.
UI_PREFIX = "/ui"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: On every dashboard response (the static files' too).
UI_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
#: The static files are the package's own and change only with its version.
STATIC_MAX_AGE_S = 3600

bp = Blueprint(
    "ui", __name__, url_prefix=UI_PREFIX, template_folder="templates", static_folder="static",
)
session.register(bp)
pages.register(bp)
filters.register(bp)


def _headers(response: Response) -> Response:
    if request.blueprint == "ui" or request.path.startswith(UI_PREFIX + "/"):
        response.headers.update(UI_HEADERS)
        if request.endpoint == "ui.static" and response.status_code == 200:
            response.headers["Cache-Control"] = f"private, max-age={STATIC_MAX_AGE_S}"
    return response


def register(app: Flask) -> None:
    """Mount the dashboard on ``app`` (``/ui``, and ``/`` redirecting to it)."""
    app.register_blueprint(bp)
    app.add_url_rule("/", "ui_root", pages.root)
    app.after_request(_headers)


__all__ = ["CONTENT_SECURITY_POLICY", "UI_PREFIX", "bp", "register"]
