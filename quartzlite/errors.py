"""The one exception tree of quartzlite.

::

    QuartzliteError
    ├── ValidationError        bad input: HTTP 400, CLI exit 2; names the field and the reason
    ├── NotFound               no such job / run: HTTP 404
    ├── Conflict               the name exists, the job runs / does not run: HTTP 409
    ├── StoreError             the database did something we cannot use
    │   ├── TransientStoreError   lock wait timeout, deadlock, lost connection:
    │   │                         retried with backoff in one place, then HTTP 503
    │   └── SchemaError           schema not at head, a lock row missing: refuse to run
    ├── AuthError              missing / unknown token: HTTP 401
    │   └── Forbidden          a viewer tried to write: HTTP 403
    └── Fenced                 this node lost its session; it must stop everything

Foreign exceptions (PyMySQL, SQLAlchemy, croniter) are mapped into this tree at the
boundary that calls them, with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class QuartzliteError(Exception):
    """Base class of every error quartzlite raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class ValidationError(QuartzliteError):
    """Input that cannot be accepted; ``field`` names it and ``reason`` says why."""

    code = "validation_error"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", details={"field": field, "reason": reason})
        self.field = field
        self.reason = reason


class NotFound(QuartzliteError):
    code = "not_found"


class Conflict(QuartzliteError):
    code = "conflict"


class StoreError(QuartzliteError):
    code = "store_error"


class TransientStoreError(StoreError):
    """A database error that may succeed when retried (1205, 1213, 2006, 2013, ...)."""

    code = "database_unavailable"


class SchemaError(StoreError):
    code = "schema_error"


class AuthError(QuartzliteError):
    code = "unauthorized"


class Forbidden(AuthError):
    code = "forbidden"


class Fenced(QuartzliteError):
    """The node lost its session (evicted, or no heartbeat for ``fence_after_s``)."""

    code = "fenced"
