"""API token secrets: how they are made, recognised and hashed. No I/O.

A secret is ``qlt_`` followed by ``secrets.token_urlsafe(32)`` (256 random bits); the
database keeps only its sha256 (hex), so a leaked database gives no usable token.
The secret is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import secrets

from quartzlite.enums import Role

#: Every secret starts with this, so that scanners (and people) recognise one.
TOKEN_PREFIX = "qlt_"
#: A secret is the prefix plus 43 URL-safe characters; anything much longer is not one.
MAX_SECRET_LENGTH = 128


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


#: A dashboard session's cookie secret (and its form token): 256 random bits, URL-safe.
SESSION_SECRET_LENGTH = 43


def new_session_secret() -> str:
    return secrets.token_urlsafe(32)


def looks_like_session_secret(value: str) -> bool:
    return len(value) == SESSION_SECRET_LENGTH and all(c.isalnum() or c in "-_" for c in value)


def hash_secret(secret: str) -> str:
    """The stored form of a secret: sha256, hex (64 characters)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_secret(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX) and 8 < len(value) <= MAX_SECRET_LENGTH


def may(role: Role, *, write: bool, admin_only: bool = False) -> bool:
    """Whether ``role`` may make a request: viewers read, admins do everything."""
    if role is Role.ADMIN:
        return True
    return not write and not admin_only


__all__ = [
    "MAX_SECRET_LENGTH", "SESSION_SECRET_LENGTH", "TOKEN_PREFIX", "hash_secret", "looks_like_secret",
    "looks_like_session_secret", "may", "new_secret", "new_session_secret",
]
