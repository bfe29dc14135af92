"""The one JSON error shape, and the one place exceptions become HTTP responses.

Every 4xx and 5xx the API sends is::

    {"error": {"code": "validation_error", "message": "schedule: ...",
               "details": {"field": "schedule", "reason": "..."}}}

quartzlite's exceptions map by class (below); Werkzeug's (unknown route, wrong method,
body too large) keep their status; anything else is a 500 that is logged with its
traceback and answered without one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge

from quartzlite import errors

log = logging.getLogger("quartzlite.api")

#: Most specific class first; the first match wins.
STATUS_BY_ERROR: tuple[tuple[type[errors.QuartzliteError], int], ...] = (
    (errors.ValidationError, 400),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.Forbidden, 403),
    (errors.AuthError, 401),
    (errors.TransientStoreError, 503),
    (errors.StoreError, 500),
)


def status_of(error: errors.QuartzliteError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(error, cls):
            return status
    return 500


def error_response(
    status: int,
    code: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    response = jsonify({"error": {"code": code, "message": message, "details": dict(details or {})}})
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _quartzlite_error(error: errors.QuartzliteError) -> Response:
    status = status_of(error)
    headers: dict[str, str] = {}
    if status == 401:
        reason = error.details.get("reason")
        headers["WWW-Authenticate"] = (
            'Bearer realm="quartzlite"'
            + ("" if reason == "missing" else ', error="invalid_token"')
        )
    if status == 503:
        headers["Retry-After"] = "1"
    if status >= 500:
        log.error(
            "%s %s failed: %s", request.method, request.path, error.message,
            extra={"action": "api_error", "code": error.code},
        )
        if isinstance(error, errors.TransientStoreError):  # "unavailable": no SQL in it
            details = {k: v for k, v in error.details.items() if k == "mysql_error"}
            return error_response(status, error.code, error.message, details, headers)
        # The driver's text names schemas, tables and columns, and may quote values:
        # it stays in the server log.
        message = "a database error (the server log has the details)"
        return error_response(status, error.code, message, None, headers)
    return error_response(status, error.code, error.message, error.details, headers)


def _code(exc: HTTPException) -> str:
    return re.sub(r"[^a-z0-9]+", "_", (exc.name or "error").lower()).strip("_")


def _http_error(exc: HTTPException) -> Response | HTTPException:
    status = exc.code or 500
    if status < 400:
        return exc
    headers = {k: v for k, v in exc.get_headers() if k.lower() not in ("content-type",)}
    details: dict[str, Any] = {}
    if isinstance(exc, NotFound):
        message = f"no route for {request.method} {request.path}"
    elif isinstance(exc, MethodNotAllowed):
        allowed = sorted(exc.valid_methods or [])
        message = f"{request.method} is not allowed on {request.path}"
        details = {"allowed": allowed}
    elif isinstance(exc, RequestEntityTooLarge):
        limit = request.max_content_length
        message = f"the request body is larger than {limit} bytes"
        details = {"field": "body", "reason": f"larger than {limit} bytes"}
        return error_response(413, "payload_too_large", message, details, headers)
    else:
        message = exc.description or exc.name or "error"
    return error_response(status, _code(exc), message, details, headers)


def _unexpected(exc: Exception) -> Response:
    log.error(
        "%s %s: unexpected error", request.method, request.path, exc_info=exc,
        extra={"action": "api_unexpected_error"},
    )
    return error_response(
        500, "internal_error", "internal server error (the server log has the details)"
    )


def register(app: Flask) -> None:
    app.register_error_handler(errors.QuartzliteError, _quartzlite_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
