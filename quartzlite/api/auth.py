"""Who may do what: the bearer-token check before every request, the role check, and
the audit record after every write.

The API is closed by default: a view answers without a token only when it is marked
:func:`public` (health, readiness, metrics, the OpenAPI document). Viewers may read
(GET/HEAD); writes, and views marked :func:`admin_only`, need an admin token. Every
write made with a valid token (allowed or not) is recorded in the audit trail with its
outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, Response, current_app, g, request

from quartzlite import auth
from quartzlite.errors import AuthError, Forbidden, QuartzliteError
from quartzlite.models import Token

from .context import get_client

log = logging.getLogger("quartzlite.api")

F = TypeVar("F", bound=Callable[..., Any])

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PUBLIC = "_quartzlite_public"
_ADMIN_ONLY = "_quartzlite_admin_only"
#: Largest request body copied into an audit entry's details.
AUDIT_BODY_BYTES = 16_384


def public(view: F) -> F:
    """Mark a view as answering without a token."""
    setattr(view, _PUBLIC, True)
    return view


def admin_only(view: F) -> F:
    """Mark a view as needing an admin token even to read."""
    setattr(view, _ADMIN_ONLY, True)
    return view


def current_token() -> Token | None:
    token: Token | None = g.get("token")
    return token


def _bearer() -> str:
    header = request.headers.get("Authorization")
    if header is None or not header.strip():
        raise AuthError(
            "missing API token: send Authorization: Bearer <token>",
            details={"reason": "missing"},
        )
    scheme, _, secret = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise AuthError(
            "the Authorization header must be 'Bearer <token>'", details={"reason": "malformed"}
        )
    return secret.strip()


def check_request() -> None:
    """before_request: authenticate, then check the role against the method."""
    if request.method == "OPTIONS" or request.url_rule is None:
        return  # unknown routes and wrong methods answer 404/405 to anyone
    view = current_app.view_functions.get(request.endpoint or "")
    if view is None or getattr(view, _PUBLIC, False):
        return
    token = get_client().authenticate(_bearer())
    g.token = token
    write = request.method not in READ_METHODS
    admin = bool(getattr(view, _ADMIN_ONLY, False))
    if not auth.may(token.role, write=write, admin_only=admin):
        raise Forbidden(
            f"token {token.name!r} has role {token.role.value}: "
            + ("it may only read" if write else "this needs an admin token"),
            details={"role": token.role.value, "required": "admin"},
        )


def _job_name() -> str | None:
    args = request.view_args or {}
    if isinstance(args.get("name"), str):
        return str(args["name"])
    body = _body()
    if isinstance(body, dict) and isinstance(body.get("name"), str):
        return str(body["name"])
    return None


def _body() -> Any:
    length = request.content_length
    raw = request.get_data(cache=True) if length is not None and length <= AUDIT_BODY_BYTES else b""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return {"unparsed_bytes": len(raw)}


def audit_write(response: Response) -> Response:
    """after_request: record every write made with a valid token, and its outcome.

    The entry is written after the change (in its own transaction): when the database
    fails just then, the change stands and the failure is logged as an error.
    """
    token = current_token()
    if token is None or request.method in READ_METHODS:
        return response
    details: dict[str, Any] = {
        "method": request.method,
        "path": request.path,
        "status": response.status_code,
    }
    if request.query_string:
        details["query"] = request.query_string.decode(errors="replace")
    if response.status_code >= 400 and response.is_json:
        error = (response.get_json(silent=True) or {}).get("error") or {}
        details["error"] = error.get("code")
    body = _body()
    if body is not None:
        details["body"] = body
    try:
        get_client().record_audit(
            token_name=token.name,
            action=request.endpoint or "unknown",
            job_name=_job_name(),
            client_address=request.remote_addr,
            details=details,
        )
    except QuartzliteError as error:
        log.error(
            "could not record the audit entry of %s %s by token %s: %s",
            request.method, request.path, token.name, error.message,
            extra={"action": "audit_failed", "token": token.name},
        )
    return response


def register(app: Flask) -> None:
    app.before_request(check_request)
    app.after_request(audit_write)
