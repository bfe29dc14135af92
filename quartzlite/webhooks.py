"""Webhooks without I/O: the signature, the retry backoff, which subscription an event
goes to, and the shapes of a subscription's fields.

Every delivery is a ``POST`` of a JSON body with these headers::

    X-Quartzlite-Event: run.failed
    X-Quartzlite-Delivery: 4711
    X-Quartzlite-Signature: t=1767225600,v1=<hex HMAC-SHA256 of "1767225600.<body>">

The HMAC key is the subscription's secret (``whsec_...``, shown once when the
subscription is created), the message the timestamp, a dot and the body's bytes exactly
as received. A receiver checks the HMAC (constant time) and that ``t`` is recent (say,
five minutes), so that a captured request cannot be replayed later. Delivery is at least
once: an attempt whose answer was lost is sent again with the same delivery id, which a
receiver uses to drop repeats (exactly-once delivery over HTTP does not exist).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from quartzlite.enums import SUBSCRIBABLE_EVENTS, EventType
from quartzlite.errors import ValidationError

#: Every secret starts with this, so that scanners (and people) recognise one.
SECRET_PREFIX = "whsec_"
SIGNATURE_HEADER = "X-Quartzlite-Signature"
DELIVERY_HEADER = "X-Quartzlite-Delivery"
EVENT_HEADER = "X-Quartzlite-Event"
#: How old a signature's timestamp :func:`verify` accepts by default (seconds).
TOLERANCE_S = 300
#: The longest URL a subscription may have (``ql_webhooks.url``).
MAX_URL = 2048
#: The first retry's delay (seconds); each next one doubles, up to :data:`MAX_BACKOFF_S`.
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 600.0


def new_secret() -> str:
    """A subscription's signing secret: the prefix and 256 random bits, URL-safe."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The ``X-Quartzlite-Signature`` value of ``body`` sent at ``timestamp`` (Unix
    seconds): ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<timestamp>.<body>">``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, now: float,
           tolerance_s: float = TOLERANCE_S) -> bool:
    """Whether ``header`` (an ``X-Quartzlite-Signature`` value) signs ``body`` with
    ``secret`` at an instant within ``tolerance_s`` of ``now`` (Unix seconds). What a
    receiver does; here for tests and Python receivers."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, body, timestamp).rpartition("v1=")[2]
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))


def backoff_s(attempts: int) -> float:
    """The delay before the next attempt after ``attempts`` failed ones: 1 s, 2, 4, ...
    capped at 10 minutes."""
    return min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** max(0, min(attempts - 1, 30)))


def matches(
    *, events: Iterable[str], job_prefix: str | None, tag: str | None, event: str,
    job_name: str | None, job_tags: Sequence[str],
) -> bool:
    """Whether a subscription (its ``events``, ``job_prefix`` and ``tag``) gets an event
    of type ``event`` about ``job_name`` (None: not about a job) whose job has
    ``job_tags``. The job filters apply to job events only: a node event goes to every
    subscription that lists it."""
    if event not in events:
        return False
    if job_name is None:
        return True
    if job_prefix and not job_name.startswith(job_prefix):
        return False
    return not tag or tag in job_tags


def validate_url(value: object) -> str:
    """An absolute URL starting ``http://`` or ``https://`` (lower case), with a host,
    ASCII, at most :data:`MAX_URL` characters, without spaces or control characters."""
    if not isinstance(value, str):
        raise ValidationError("url", f"must be a string, not {type(value).__name__}")
    if not value.strip():
        raise ValidationError("url", "must not be empty")
    if len(value) > MAX_URL:
        raise ValidationError("url", f"must be at most {MAX_URL} characters, got {len(value)}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValidationError("url", "must not contain spaces or control characters")
    if not value.isascii():
        raise ValidationError("url", "must be ASCII (percent-encode other characters, "
                                     "punycode an international host)")
    if not value.startswith(("http://", "https://")):
        raise ValidationError("url", f"must be an http:// or https:// URL, got {value[:40]!r}")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as error:
        raise ValidationError("url", f"is not a valid URL: {error}") from None
    if not parts.hostname:
        raise ValidationError("url", "must name a host (http://host/path)")
    if port == 0:
        raise ValidationError("url", "must not name port 0")
    return value


def validate_events(value: object) -> tuple[EventType, ...]:
    """A non-empty list of subscribable event types, in their canonical order."""
    allowed = ", ".join(e.value for e in SUBSCRIBABLE_EVENTS)
    if not isinstance(value, (list, tuple)):
        raise ValidationError("events", f"must be a list of event types ({allowed})")
    if not value:
        raise ValidationError("events", f"must name at least one event type ({allowed})")
    wanted: set[str] = set()
    for item in value:
        if not isinstance(item, str) or item not in {e.value for e in SUBSCRIBABLE_EVENTS}:
            raise ValidationError("events", f"unknown event type {str(item)[:60]!r} (allowed: {allowed})")
        wanted.add(item)
    return tuple(e for e in SUBSCRIBABLE_EVENTS if e.value in wanted)


__all__ = [
    "DELIVERY_HEADER", "EVENT_HEADER", "MAX_URL", "SECRET_PREFIX", "SIGNATURE_HEADER",
    "TOLERANCE_S", "backoff_s", "matches", "new_secret", "signature", "validate_events",
    "validate_url", "verify",
]
