"""Test helper: the UTC-offset changes of a timezone, found by scanning ``utcoffset``
(never by asking quartzlite), and the local dates they touch."""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

_STEP = timedelta(hours=6)  # no zone used here changes its offset twice within 6 hours
_SECOND = timedelta(seconds=1)


class OffsetChange(NamedTuple):
    instant: datetime  # the first instant (UTC, whole second) with the new offset
    before: timedelta
    after: timedelta

    @property
    def gap(self) -> bool:
        """The clock jumps forward: wall times in [instant+before, instant+after) do not exist."""
        return self.after > self.before

    @property
    def shift(self) -> timedelta:
        return abs(self.after - self.before)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@functools.cache
def offset_changes(zone_name: str, first_year: int, last_year: int) -> tuple[OffsetChange, ...]:
    """Every offset change from ``first_year``-01-01 to ``last_year``-12-31 (UTC)."""
    zone = ZoneInfo(zone_name)
    current = datetime(first_year, 1, 1, tzinfo=UTC)
    end = datetime(last_year + 1, 1, 1, tzinfo=UTC)
    offset = _offset(zone, current)
    found: list[OffsetChange] = []
    while current < end:
        probe = min(current + _STEP, end)
        probe_offset = _offset(zone, probe)
        if probe_offset != offset:
            lo, hi = current, probe  # offset(lo) == offset != offset(hi): bisect to a second
            while hi - lo > _SECOND:
                mid = lo + (hi - lo) // 2
                mid = mid.replace(microsecond=0)
                if _offset(zone, mid) == offset:
                    lo = mid
                else:
                    hi = mid
            found.append(OffsetChange(hi, offset, _offset(zone, hi)))
            offset = probe_offset
        current = probe
    return tuple(found)


@functools.cache
def changed_days(zone_name: str, first_year: int, last_year: int) -> frozenset[date]:
    """The local dates on which the offset changes (both sides of each change)."""
    zone = ZoneInfo(zone_name)
    days: set[date] = set()
    for change in offset_changes(zone_name, first_year, last_year):
        days.add((change.instant - _SECOND).astimezone(zone).date())
        days.add(change.instant.astimezone(zone).date())
    return frozenset(days)
