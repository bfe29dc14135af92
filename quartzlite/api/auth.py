"""Who may do what: the bearer-token check before every request, the role check, and
the audit record after every write.

The API is closed by default: a view answers without a token only when it is marked
:func:`public` (health, readiness, metrics, the OpenAPI document). Viewers may read
(GET/HEAD); writes, and views marked :func:`admin_only`, need an admin token. Every
write made with a valid token (allowed or not) is recorded in the audit trail with its
outcome, bounded (:data:`AUDIT_ENTRY_BYTES`) and with secret shapes masked
(:mod:`quartzlite.redact`), with the source ``api`` (``ui`` for the dashboard's). The
app's client records nothing itself (:func:`quartzlite.api.create_app` gives it one
with ``audit=False``), so each write is recorded once, here. Refused writes (4xx) are
rate-limited per token and per client address (:mod:`quartzlite.api.limits`): the ones
over the limit are answered 429 and not recorded, so a token cannot grow the audit
trail faster than
``REFUSED_PER_S * AUDIT_ENTRY_BYTES`` bytes a second after its first burst.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, Response, current_app, g, request

from quartzlite import auth
from quartzlite.enums import AuditSource
from quartzlite.errors import AuthError, Forbidden, QuartzliteError
from quartzlite.models import Token
from quartzlite.redact import bounded, clip, redact

from .context import get_client, get_state
from .errors import error_response

log = logging.getLogger("quartzlite.api")

F = TypeVar("F", bound=Callable[..., Any])

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PUBLIC = "_quartzlite_public"
_ADMIN_ONLY = "_quartzlite_admin_only"
#: Largest request body (bytes) parsed for an audit entry; a larger one is summarised.
AUDIT_BODY_READ_BYTES = 65_536
#: Most bytes of a request body kept (as JSON) in an audit entry; beyond, its head.
AUDIT_BODY_BYTES = 2048
#: Most characters of a path or query string kept in an audit entry.
AUDIT_TEXT_CHARS = 512
#: Most bytes of one audit entry's details (JSON).
AUDIT_ENTRY_BYTES = 4096


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
    if request.blueprint == "ui":
        return  # the dashboard signs in with a session cookie (quartzlite.api.ui.session)
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
    if request.blueprint not in ("jobs", "ui"):  # a calendar's name is in the path, not the job
        return None
    args = request.view_args or {}
    if isinstance(args.get("name"), str):
        return str(args["name"])
    body = _body()
    if isinstance(body, dict) and isinstance(body.get("name"), str):
        return str(body["name"])
    return None


#: Form fields never recorded: the dashboard's CSRF token and a sign-in's API token.
_UNRECORDED_FIELDS = frozenset({"csrf_token", "token"})


def _body() -> Any:
    if request.mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = {k: v for k, v in request.form.items() if k not in _UNRECORDED_FIELDS}
        return form or None
    length = request.content_length
    if length is not None and length > AUDIT_BODY_READ_BYTES:
        return {"unparsed_bytes": length}
    raw = request.get_data(cache=True) if length else b""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return {"unparsed_bytes": len(raw)}


def _text(value: str) -> str:
    return redact(clip(value, AUDIT_TEXT_CHARS))


def _audit_details(status: int, error_code: str | None) -> dict[str, Any]:
    """What an entry keeps of the request: bounded, secrets masked."""
    details: dict[str, Any] = {"method": request.method, "path": _text(request.path), "status": status}
    if request.query_string:
        details["query"] = _text(request.query_string.decode(errors="replace"))
    if error_code is not None:
        details["error"] = error_code
    body = _body()
    if body is not None:
        details.update(bounded(body, AUDIT_BODY_BYTES))
    if len(json.dumps(details).encode()) > AUDIT_ENTRY_BYTES:
        details.pop("body", None)
        details.pop("body_head", None)
    return details


def audit_write(response: Response) -> Response:
    """after_request: record every write made with a valid token, and its outcome.

    The entry is written after the change (in its own transaction): when the database
    fails just then, the change stands and the failure is logged as an error. A refused
    write over the rate limit is answered 429 instead, and not recorded.
    """
    token = current_token()
    if token is None or request.method in READ_METHODS:
        return response
    status = response.status_code
    if 400 <= status < 500:
        wait_s = get_state().refusals.take(token.name, request.remote_addr or "-")
        if wait_s:
            return error_response(
                429, "too_many_requests",
                f"too many refused writes from token {token.name!r} or this address: "
                f"retry in {math.ceil(wait_s)} s",
                {"retry_after_s": math.ceil(wait_s)},
                {"Retry-After": str(math.ceil(wait_s))},
            )
    error_code = None
    if status >= 400 and response.is_json:
        error_code = ((response.get_json(silent=True) or {}).get("error") or {}).get("code")
    try:
        get_client().record_audit(
            token_name=token.name,
            action=request.endpoint or "unknown",
            job_name=_job_name(),
            client_address=request.remote_addr,
            details=_audit_details(status, error_code),
            source=AuditSource.UI if request.blueprint == "ui" else AuditSource.API,
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
