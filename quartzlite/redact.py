"""What leaves the process through logs and the audit trail: control characters escaped
(a request path cannot forge a log line) and well-known secret shapes masked (a
password typed into a job's command is not kept verbatim forever).

The masks are a safety net for the shapes people type, not a promise: anything else a
command holds is stored as it was sent (the README's security section says what is
kept).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Final

MASK: Final = "***"

#: C0 controls, DEL, C1 controls and the Unicode line and paragraph separators: each
#: can end or rewrite a line in a terminal or a log reader.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

#: (pattern, replacement): each keeps who or what, and masks the secret. Every pattern
#: starts at a literal or a bounded prefix: linear time on any input (a 60 KB command
#: of letters once took seconds per request with an unbounded ``[A-Za-z]*://``).
_SECRETS: Final = (
    # scheme://user:password@host
    (re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s/:@]*:)[^\s/@]+@"), r"\1" + MASK + "@"),
    # Authorization: Bearer xyz / Proxy-Authorization: Basic xyz / X-Api-Key: xyz
    (
        re.compile(
            r"((?:proxy-)?authorization|x-api-key|x-auth-token)(\s*[:=]\s*)"
            r"(?:(bearer|basic|token|digest)\s+)?[^\s'\",;]+",
            re.IGNORECASE,
        ),
        lambda m: m.group(1) + m.group(2) + (m.group(3) + " " if m.group(3) else "") + MASK,
    ),
    # curl -u user:password, --user user:password, --user=user:password
    (re.compile(r"((?:^|\s)(?:-u|--user|--proxy-user)(?:\s+|=)['\"]?[^\s:'\"]*:)[^\s'\"]+"), r"\1" + MASK),
    # password=..., "secret": ..., api_key: ..., token=..., and as flags: --password ...
    (
        re.compile(
            r"((?:^|[^A-Za-z0-9-])(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|"
            r"token|auth[_-]?token)['\"]?\s*[:=]\s*['\"]?)[^\s'\"&,;}]+",
            re.IGNORECASE,
        ),
        r"\1" + MASK,
    ),
    (
        re.compile(
            r"((?:^|\s)--?(?:password|passwd|secret|api-key|access-key|token|auth-token)(?:\s+|=)['\"]?)"
            r"[^\s'\"]+",
            re.IGNORECASE,
        ),
        r"\1" + MASK,
    ),
    # mysql -pPASSWORD (the password glued to -p)
    (re.compile(r"((?:^|\s)mysql(?:dump|admin)?\b[^\n|;&]{0,200}?\s-p)(?!\s)[^\s'\"]+"), r"\1" + MASK),
)
#: Keys whose values are secrets whatever they look like.
_SECRET_KEY: Final = re.compile(
    r"^(?:password|passwd|pwd|secret|.*_secret|api[_-]?key|access[_-]?key|token|auth[_-]?token|"
    r"authorization)$",
    re.IGNORECASE,
)


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a visible escape (\\r, \\x1b)."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_escape_one, text)


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def redact(text: str) -> str:
    """``text`` with the secret shapes above masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def redact_value(value: Any, max_chars: int | None = None) -> Any:
    """A JSON-like value with every string redacted (cut to ``max_chars`` first, with
    "..." after) and secret-named keys masked."""
    if isinstance(value, str):
        return redact(clip(value, max_chars))
    if isinstance(value, dict):
        return {
            k: MASK if isinstance(k, str) and _SECRET_KEY.match(k) and v else redact_value(v, max_chars)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_value(v, max_chars) for v in value]
    return value


def bounded(value: Any, max_bytes: int, *, key: str = "body") -> dict[str, Any]:
    """What an audit entry keeps of ``value`` (JSON-like): ``{key: value}`` with every
    string redacted and cut to ``max_bytes`` characters, when its JSON fits in
    ``max_bytes`` bytes; else its size and the head of its JSON
    (``{key_bytes: n, key_head: "..."}``, a quarter of ``max_bytes`` characters)."""
    value = redact_value(value, max_bytes)
    encoded = json.dumps(value, ensure_ascii=False, default=str)
    size = len(encoded.encode(errors="surrogatepass"))
    if size <= max_bytes:
        return {key: value}
    return {f"{key}_bytes": size, f"{key}_head": encoded[: max_bytes // 4]}


def clip(text: str, max_chars: int | None) -> str:
    """``text`` cut to ``max_chars`` characters, with "..." when it was longer."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[:max_chars] + "..."


class SafeFormatter(logging.Formatter):
    """A formatter whose messages cannot hold control characters: a value logged from
    a request (a path, a job name) stays on its line. Tracebacks keep their lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


__all__ = ["MASK", "SafeFormatter", "bounded", "clip", "escape_controls", "redact", "redact_value"]
