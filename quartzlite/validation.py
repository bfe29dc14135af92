"""The shapes of names, tags and callables, in one place: the client checks them (and
through it the API and the CLI), and the OpenAPI document publishes the same patterns.
A bad value is a :class:`~quartzlite.errors.ValidationError` naming the field and the
reason."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from quartzlite.errors import ValidationError

# The patterns are published in the OpenAPI document (JSON Schema: anchored with ^ and
# $). Python's $ also matches before a final newline, so they are only ever applied
# with fullmatch, which anchors both ends itself.
#: A job name (also run filters, tokens: at most 64 for those).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: One tag of a job or a node.
TAG_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,31}$"
#: ``package.module:function`` (attributes allowed on both sides).
CALLABLE_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
#: The name of a trigger parameter (a Python identifier; a shell run sees it upper-cased
#: as ``QUARTZLITE_PARAM_<NAME>``).
PARAM_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
NAME_RE = re.compile(NAME_PATTERN.removeprefix("^").removesuffix("$"))
PARAM_NAME_RE = re.compile(PARAM_NAME_PATTERN.removeprefix("^").removesuffix("$"))
#: Most parameters of one trigger.
MAX_PARAMS = 32
#: Longest string value of a parameter (bytes of UTF-8).
MAX_PARAM_STRING_BYTES = 4096
#: Largest parameter object, encoded as stored (compact JSON, UTF-8).
MAX_PARAMS_BYTES = 16384
TAG_RE = re.compile(TAG_PATTERN.removeprefix("^").removesuffix("$"))
CALLABLE_RE = re.compile(CALLABLE_PATTERN.removeprefix("^").removesuffix("$"))
MAX_TAGS = 8
MAX_TOKEN_NAME = 64


def type_name(value: object) -> str:
    """How an error message names the type of a JSON-like value."""
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def check_unicode(field: str, value: str) -> str:
    """``value`` unless it holds a lone surrogate (text that no UTF-8 column, log or
    response can carry: JSON allows writing one as \\ud800)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(value[error.start])
        raise ValidationError(
            field, f"contains a lone surrogate (U+{code:04X}) at {error.start}: not valid Unicode text"
        ) from None
    return value


def validate_text(
    field: str, value: object, *, max_chars: int, max_bytes: int | None = None,
    allow_empty: bool = False,
) -> str:
    """A string that fits its column: at most ``max_chars`` characters and, for columns
    sized in bytes (TEXT), at most ``max_bytes`` bytes of UTF-8."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type_name(value)}")
    if not allow_empty and not value.strip():
        raise ValidationError(field, "must not be empty")
    if len(value) > max_chars:
        raise ValidationError(field, f"must be at most {max_chars} characters, got {len(value)}")
    check_unicode(field, value)
    if max_bytes is not None and len(value.encode()) > max_bytes:
        raise ValidationError(
            field, f"must be at most {max_bytes} bytes in UTF-8, got {len(value.encode())} bytes"
        )
    return value


def validate_name(name: object) -> str:
    if not isinstance(name, str):
        raise ValidationError("name", f"must be a string, not {type_name(name)}")
    if not NAME_RE.fullmatch(name):
        if not name:
            raise ValidationError("name", "must not be empty")
        if len(name) > 128:
            raise ValidationError("name", f"must be at most 128 characters, got {len(name)}")
        raise ValidationError(
            "name",
            "may contain only letters, digits, '.', '_' and '-', and must start with a "
            f"letter or digit: {name!r}",
        )
    return name


def validate_tags(field: str, value: object) -> tuple[str, ...]:
    """A list (or comma-separated string) of tags, sorted and without repeats."""
    if isinstance(value, str):
        value = [t.strip() for t in value.split(",") if t.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValidationError(field, f"must be a list of strings, not {type_name(value)}")
    tags: list[str] = []
    for tag in value:
        if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
            raise ValidationError(
                field,
                f"tag {tag!r} must be 1-32 lower-case letters, digits, '.', '_' or '-', "
                "starting with a letter or digit",
            )
        tags.append(tag)
    if len(set(tags)) > MAX_TAGS:
        raise ValidationError(field, f"at most {MAX_TAGS} tags, got {len(set(tags))}")
    return tuple(sorted(set(tags)))


def validate_callable(target: str) -> str:
    if not CALLABLE_RE.fullmatch(target):
        raise ValidationError("callable", f"must look like package.module:function, got {target!r}")
    return target


def parse_params(items: Iterable[str], field: str = "param") -> dict[str, str]:
    """``NAME=VALUE`` texts as string parameters (the CLI's repeated ``--param``, the
    dashboard's lines): the value is everything after the first ``=``, maybe empty. An
    item without ``=`` is refused naming ``field``, a name given twice naming
    ``params.NAME``; the names and values are left to :func:`validate_params`."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValidationError(field, f"must be NAME=VALUE, got {item[:70]!r}")
        if key in values:
            raise ValidationError(f"params.{key}", "given more than once")
        values[key] = value
    return values


def validate_params(value: object, field: str = "params") -> dict[str, Any]:
    """Trigger parameters: a JSON object of at most :data:`MAX_PARAMS` entries, each named
    like :data:`PARAM_NAME_PATTERN` (no two the same once upper-cased: a shell run sees
    them as environment variables) with a scalar value: a string (at most
    :data:`MAX_PARAM_STRING_BYTES` bytes, no NUL), a finite number, a boolean or null;
    at most :data:`MAX_PARAMS_BYTES` bytes encoded. None is no parameters ({})."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(field, f"must be an object, not {type_name(value)}")
    if len(value) > MAX_PARAMS:
        raise ValidationError(field, f"at most {MAX_PARAMS} parameters, got {len(value)}")
    upper: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not PARAM_NAME_RE.fullmatch(key):
            shown = key[:70] if isinstance(key, str) else key
            raise ValidationError(
                field, f"parameter name {shown!r} must be a letter or '_' followed by at most "
                "63 letters, digits or '_'",
            )
        where = f"{field}.{key}"
        if key.upper() in upper:
            raise ValidationError(
                where, f"is {upper[key.upper()]!r} upper-cased: both would be the environment "
                f"variable QUARTZLITE_PARAM_{key.upper()}",
            )
        upper[key.upper()] = key
        if isinstance(item, str):
            check_unicode(where, item)
            if "\x00" in item:
                raise ValidationError(where, "must not contain NUL characters")
            size = len(item.encode())
            if size > MAX_PARAM_STRING_BYTES:
                raise ValidationError(
                    where, f"must be at most {MAX_PARAM_STRING_BYTES} bytes in UTF-8, got {size}")
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValidationError(where, "must be a finite number")
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise ValidationError(
                where, f"must be a string, number, boolean or null, not {type_name(item)}")
    size = len(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_PARAMS_BYTES:
        raise ValidationError(field, f"must encode to at most {MAX_PARAMS_BYTES} bytes of JSON, "
                                     f"got {size}")
    return dict(value)


def validate_token_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or len(name) > MAX_TOKEN_NAME:
        raise ValidationError(
            "name", f"a token name is 1-{MAX_TOKEN_NAME} letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit: {name!r}",
        )
    return name


__all__ = [
    "CALLABLE_PATTERN", "MAX_PARAMS", "MAX_PARAMS_BYTES", "MAX_PARAM_STRING_BYTES", "MAX_TAGS",
    "NAME_PATTERN", "PARAM_NAME_PATTERN", "TAG_PATTERN", "check_unicode", "type_name",
    "validate_callable", "validate_name", "validate_params", "validate_tags", "validate_text",
    "validate_token_name",
]
