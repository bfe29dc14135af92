"""Timezones: loading one, and the instants of a wall-clock time in it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from quartzlite.errors import ValidationError

# --------------------------------------------------------------------------------------
# Timezone helpers
# --------------------------------------------------------------------------------------


def _load_zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ValidationError("timezone", 'the timezone is empty; use an IANA name such as "UTC"')
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError(
            "timezone",
            f'unknown timezone "{name}"; use an IANA name such as "Europe/Berlin" or "UTC"',
        ) from None


def _as_utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


def _offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _first_change(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The earliest instant in ``(lo, hi]`` whose UTC offset differs from the one at ``lo``.

    ``lo`` and ``hi`` must have different offsets (so a transition lies between them).
    """
    before = _offset_at(zone, lo)
    step = timedelta(microseconds=1)
    while hi - lo > step:
        mid = lo + (hi - lo) / 2
        if _offset_at(zone, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _wall_first_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """Map a naive local wall time to one UTC instant, the way a fixed-time job fires.

    An ambiguous wall time (repeated hour) maps to its first occurrence; a wall time that does
    not exist (skipped hour) maps to the first instant after the gap.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first <= second:
        return first
    return _first_change(zone, second, first)

