"""Request parsing shared by the views: JSON bodies and query strings. Every failure
is a :class:`ValidationError` naming the field (``body``, or the parameter) and why."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from flask import request

from quartzlite.errors import ValidationError
from quartzlite.schedule import check_instant
from quartzlite.validation import check_unicode

#: Longest value accepted for a free-text query parameter.
MAX_PARAM_LENGTH = 255


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_object(*, required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object (any content type is read as JSON)."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if required:
            raise ValidationError("body", "is required: send a JSON object")
        return {}
    try:
        data = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError) as error:
        raise ValidationError("body", f"is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValidationError("body", f"must be a JSON object, not {type(data).__name__}")
    return data


class Query:
    """The query string, checked against the parameters a view accepts."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = tuple(allowed)
        args = request.args
        for key in args:
            if key not in self.allowed:
                raise ValidationError(
                    key, f"unknown query parameter (allowed: {', '.join(self.allowed) or 'none'})"
                )
            if len(args.getlist(key)) > 1:
                raise ValidationError(key, "given more than once")

    def required(self, name: str) -> str:
        value = self.string(name)
        if value is None:
            raise ValidationError(name, "is required")
        return value

    def string(self, name: str) -> str | None:
        value = request.args.get(name)
        if value is None:
            return None
        if len(value) > MAX_PARAM_LENGTH:
            raise ValidationError(name, f"must be at most {MAX_PARAM_LENGTH} characters")
        if "\x00" in value:
            raise ValidationError(name, "must not contain NUL characters")
        return check_unicode(name, value)

    def cursor(self) -> str | None:
        """``cursor``: the next_cursor of a previous page; empty means the first page."""
        return self.string("cursor") or None

    def integer(self, name: str, default: int) -> int:
        value = request.args.get(name)
        if value is None:
            return default
        try:
            number = int(value.strip())
        except ValueError:
            raise ValidationError(name, f"must be an integer, got {value[:40]!r}") from None
        if abs(number) > 10**9:
            raise ValidationError(name, f"is out of range: {value[:40]}")
        return number

    def boolean(self, name: str) -> bool | None:
        value = request.args.get(name)
        if value is None:
            return None
        lowered = value.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValidationError(name, f"must be true or false, got {value[:40]!r}")

    def instant(self, name: str) -> datetime | None:
        value = request.args.get(name)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(
                name, f"is not an ISO-8601 instant (e.g. 2026-01-31T12:00:00Z): {value[:60]!r}"
            ) from None
        return check_instant(name, parsed)
