"""Sign-in, sign-out, the session cookie and CSRF protection of the dashboard.

- The cookie (:data:`COOKIE`) holds 256 random bits; the database keeps their sha256 with
  the token's hash, the CSRF token and the sign-in and last-seen instants
  (:meth:`SchedulerClient.open_ui_session`). HttpOnly, SameSite=Strict, Path=/ui, Secure
  when the request came over https (behind a TLS proxy: waitress's ``trusted_proxy``
  settings make it so).
- A session ends after :data:`~quartzlite.client.UI_SESSION_IDLE_S` without a request,
  :data:`~quartzlite.client.UI_SESSION_MAX_S` after sign-in, at sign-out, and when its
  token is revoked.
- Every POST needs the session's CSRF token (form field ``csrf_token`` or header
  ``X-CSRF-Token``, compared in constant time) and, when the browser sends an Origin,
  this server's origin. The sign-in form, which has no session yet, is protected by a
  double-submit cookie. A refused POST changes nothing and answers 403.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from quartzlite import auth as secrets_
from quartzlite.enums import Role
from quartzlite.errors import AuthError, Forbidden
from quartzlite.models import UiSession

from ..context import get_client

log = logging.getLogger("quartzlite.api.ui")

COOKIE = "quartzlite_ui"
#: The sign-in form's double-submit cookie (it has no session yet).
LOGIN_COOKIE = "quartzlite_ui_login"
COOKIE_PATH = "/ui"
#: The views that answer without a session.
OPEN_ENDPOINTS = frozenset({"ui.login", "ui.static"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def current() -> UiSession:
    """The signed-in session (views behind :func:`load_session` only)."""
    ui: UiSession = g.ui_session
    return ui


def is_admin() -> bool:
    ui: UiSession | None = g.get("ui_session")
    return ui is not None and ui.token.role is Role.ADMIN


def safe_next(target: str | None, default: str) -> str:
    """``target`` when it is a path of this dashboard, else ``default`` (no open redirect)."""
    if not target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(COOKIE_PATH) or "\\" in target:
        return default
    return target


def _same_origin() -> bool:
    """No Origin (an older browser, a script): the CSRF token decides alone. The host
    is compared, not the scheme: behind a TLS proxy that is not trusted the request
    arrives as http while the browser's Origin says https."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _csrf_ok(expected: str) -> bool:
    given = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token") or ""
    return hmac.compare_digest(given.encode(), expected.encode())


def load_session() -> Response | None:
    """before_request of the blueprint: the session, its role, and CSRF on every POST."""
    if request.endpoint in OPEN_ENDPOINTS or request.url_rule is None:
        return None
    client = get_client()
    ui = client.ui_session(request.cookies.get(COOKIE))
    if ui is None:
        if request.headers.get("HX-Request"):
            response = Response("signed out", status=401)
            response.headers["HX-Redirect"] = url_for("ui.login")
            return response
        if request.method not in SAFE_METHODS:
            raise AuthError("sign in first: this session ended", details={"reason": "no_session"})
        return redirect(url_for("ui.login", next=request.full_path.rstrip("?")), 303)
    g.ui_session = ui
    g.token = ui.token  # the API's audit trail and rate limits key on it
    if request.method not in SAFE_METHODS:
        if not _same_origin() or not _csrf_ok(ui.csrf):
            raise Forbidden(
                "this form is stale or did not come from this dashboard (CSRF check failed): "
                "reload the page and try again",
                details={"reason": "csrf"},
            )
        if ui.token.role is not Role.ADMIN:
            raise Forbidden(
                f"token {ui.token.name!r} has role {ui.token.role.value}: it may only read",
                details={"role": ui.token.role.value, "required": "admin"},
            )
    return None


def _set_cookie(response: Response, name: str, value: str, **kwargs: Any) -> None:
    response.set_cookie(
        name, value, path=COOKIE_PATH, httponly=True, samesite="Strict", secure=request.is_secure,
        **kwargs,
    )


def login() -> Response | tuple[str, int]:
    """GET: the sign-in form; POST: sign in with an API token."""
    next_url = safe_next(request.values.get("next"), url_for("ui.overview"))
    if request.method == "GET":
        return _login_form(next_url, None, 200)
    double = request.cookies.get(LOGIN_COOKIE) or ""
    given = request.form.get("csrf_token") or ""
    if not double or not _same_origin() or not hmac.compare_digest(double.encode(), given.encode()):
        return _login_form(next_url, "The sign-in form expired: try again.", 403)
    secret = (request.form.get("token") or "").strip()
    client = get_client()
    try:
        cookie, ui = client.open_ui_session(secret, client_address=request.remote_addr)
    except AuthError:
        log.info("dashboard sign-in refused from %s", request.remote_addr,
                 extra={"action": "ui_sign_in_refused"})
        message = "Enter an API token." if not secret else "Unknown or revoked API token."
        return _login_form(next_url, message, 401)
    g.ui_session = ui
    g.token = ui.token  # recorded in the audit trail as ui.login
    response = redirect(next_url, 303)
    _set_cookie(response, COOKIE, cookie)
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)
    return response


def _login_form(next_url: str, error: str | None, status: int) -> tuple[str, int] | Response:
    token = secrets_.new_session_secret()
    body = render_template("ui/login.html", next_url=next_url, error=error, login_csrf=token)
    response = Response(body, status=status, mimetype="text/html")
    _set_cookie(response, LOGIN_COOKIE, token, max_age=3600)
    return response


def logout() -> Response:
    get_client().close_ui_session(request.cookies.get(COOKIE))
    response = redirect(url_for("ui.login"), 303)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


def register(bp: Blueprint) -> None:
    bp.before_request(load_session)
    bp.add_url_rule("/login", "login", login, methods=["GET", "POST"])
    bp.add_url_rule("/logout", "logout", logout, methods=["POST"])
