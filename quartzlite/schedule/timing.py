"""Timings: the fire instants of a parsed schedule (see the package docstring for how
a cron expression is evaluated)."""

from __future__ import annotations

import calendar
import threading
from bisect import bisect_left, bisect_right
from datetime import UTC, date, datetime, time, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter

from quartzlite.schedule.limits import (
    _CHAIN_COUNT_CAP,
    _CRON_END,
    _DAY_CACHE_SIZE,
    _HORIZON_YEARS,
    _LAST_DATE,
    _MICROSECOND,
    LAST_INSTANT,
)
from quartzlite.schedule.zones import (
    _first_change,
    _offset_at,
)

# --------------------------------------------------------------------------------------
# Timings: the computational core behind a Schedule
# --------------------------------------------------------------------------------------


class _Timing:
    """Fire instants of a schedule. All datetimes in and out are aware UTC."""

    __slots__ = ()

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after ``after``; None when there is none, also
        when it would lie at or past :data:`LAST_INSTANT`: never OverflowError."""
        try:
            found = self._next_after(after)
        except OverflowError:
            return None
        return found if found is None or found < LAST_INSTANT else None

    def _next_after(self, after: datetime) -> datetime | None:
        raise NotImplementedError

    def count(self, lo: datetime, hi: datetime) -> int:
        """How many fire instants lie in ``(lo, hi]``."""
        return self._chain_count(lo, hi)

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        """The last fire instant in ``(lo, hi]``, or None."""
        span = timedelta(seconds=1)
        while True:
            start = lo if span >= hi - lo else hi - span  # (hi - span may be before year 1)
            last: datetime | None = None
            current = self.next_after(start)
            while current is not None and current <= hi:
                last = current
                current = self.next_after(current)
            if last is not None or start == lo:
                return last
            span *= 4

    def _chain_count(self, lo: datetime, hi: datetime) -> int:
        total = 0
        current = self.next_after(lo)
        while current is not None and current <= hi and total < _CHAIN_COUNT_CAP:
            total += 1
            current = self.next_after(current)
        return total


class _EveryTiming(_Timing):
    __slots__ = ("_period",)

    def __init__(self, period: timedelta) -> None:
        self._period = period

    def _next_after(self, after: datetime) -> datetime | None:
        return after + self._period

    def count(self, lo: datetime, hi: datetime) -> int:
        return max(0, (hi - lo) // self._period)

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        n = self.count(lo, hi)
        return lo + n * self._period if n else None


class _AtTiming(_Timing):
    __slots__ = ("_instant",)

    def __init__(self, instant: datetime) -> None:
        self._instant = instant

    def _next_after(self, after: datetime) -> datetime | None:
        return self._instant if self._instant > after else None

    def count(self, lo: datetime, hi: datetime) -> int:
        return 1 if lo < self._instant <= hi else 0

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        return self._instant if lo < self._instant <= hi else None


class _ManualTiming(_Timing):
    """``@manual``: no fire instant at all (the job runs when triggered)."""

    __slots__ = ()

    def _next_after(self, after: datetime) -> datetime | None:
        return None

    def count(self, lo: datetime, hi: datetime) -> int:
        return 0

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        return None


class _BoundedTiming(_Timing):
    """A job's slots: its schedule's, none before ``start`` and none after ``end``
    (either may be None). For ``@every`` with a start, the slots are ``start + k *
    period``: the first slot at or after ``start`` is ``start`` itself."""

    __slots__ = ("_inner", "_start", "_end")

    def __init__(self, inner: _Timing, start: datetime | None, end: datetime | None) -> None:
        self._inner = inner
        self._start = start
        self._end = end

    def _within(self, found: datetime | None) -> datetime | None:
        if found is None or (self._end is not None and found > self._end):
            return None
        return found

    def _first(self) -> datetime | None:
        """The first slot at or after ``start`` (which is set)."""
        assert self._start is not None
        if isinstance(self._inner, _EveryTiming):
            return self._start
        return self._inner.next_after(self._start - _MICROSECOND)

    def _next_after(self, after: datetime) -> datetime | None:
        if self._start is not None and after < self._start:
            return self._within(self._first())
        return self._within(self._inner.next_after(after))

    def first_after(self, now: datetime) -> datetime | None:
        """The first slot strictly after ``now``; for ``@every`` with a start, on the
        sequence ``start + k * period`` (not ``now`` plus a period)."""
        inner, start = self._inner, self._start
        if start is None or now < start or not isinstance(inner, _EveryTiming):
            return self.next_after(now)
        periods = (now - start) // inner._period + 1
        try:
            found = start + periods * inner._period
        except OverflowError:
            return None
        return self._within(found) if found < LAST_INSTANT else None

    def count(self, lo: datetime, hi: datetime) -> int:
        if self._end is not None:
            hi = min(hi, self._end)
        if hi <= lo:
            return 0
        if self._start is not None and lo < self._start:
            first = self.next_after(lo)
            if first is None or first > hi:
                return 0
            return 1 + self._inner.count(first, hi)
        return self._inner.count(lo, hi)

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        if self._end is not None:
            hi = min(hi, self._end)
        if hi <= lo:
            return None
        if self._start is not None and lo < self._start:
            first = self.next_after(lo)
            if first is None or first > hi:
                return None
            return self._inner.latest(first, hi) or first
        return self._inner.latest(lo, hi)


class _Times:
    """The matching times of day: the product hours x minutes x seconds, in order."""

    __slots__ = ("_hours", "_minutes", "_seconds", "_hour_set", "_minute_set", "first", "size")

    def __init__(
        self, hours: tuple[int, ...], minutes: tuple[int, ...], seconds: tuple[int, ...]
    ) -> None:
        self._hours = hours
        self._minutes = minutes
        self._seconds = seconds
        self._hour_set = frozenset(hours)
        self._minute_set = frozenset(minutes)
        self.first = (hours[0], minutes[0], seconds[0])
        self.size = len(hours) * len(minutes) * len(seconds)

    def next_after(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        """The first matching time of day strictly after ``hour:minute:second``."""
        if hour in self._hour_set:
            if minute in self._minute_set:
                i = bisect_right(self._seconds, second)
                if i < len(self._seconds):
                    return hour, minute, self._seconds[i]
            j = bisect_right(self._minutes, minute)
            if j < len(self._minutes):
                return hour, self._minutes[j], self._seconds[0]
        k = bisect_right(self._hours, hour)
        if k < len(self._hours):
            return self._hours[k], self._minutes[0], self._seconds[0]
        return None

    def count_le(self, hour: int, minute: int, second: int) -> int:
        """How many matching times of day are <= ``hour:minute:second``."""
        per_hour = len(self._minutes) * len(self._seconds)
        total = bisect_left(self._hours, hour) * per_hour
        if hour in self._hour_set:
            total += bisect_left(self._minutes, minute) * len(self._seconds)
            if minute in self._minute_set:
                total += bisect_right(self._seconds, second)
        return total


_MISS: Final = date.min


class _Days:
    """The matching local dates. croniter iterates the days; this adds LW / L-n and years."""

    __slots__ = ("_cron", "_lock", "_years", "_year_set", "_last_dom", "_cache")

    def __init__(
        self,
        cron_expression: str,
        *,
        day_or: bool,
        years: tuple[int, ...] | None,
        last_dom: tuple[int, bool] | None,
    ) -> None:
        self._cron = croniter(
            cron_expression, _wall(date(2000, 1, 1)), ret_type=datetime, day_or=day_or
        )
        self._lock = threading.Lock()
        self._years = years
        self._year_set = frozenset(years) if years is not None else None
        self._last_dom = last_dom
        self._cache: dict[date, date | None] = {}

    def first_on_or_after(self, day: date) -> date | None:
        """The first matching date >= ``day`` (None when there is none in the horizon)."""
        hit = self._cache.get(day, _MISS)
        if hit is not _MISS:
            return hit
        result = self._search(day)
        if len(self._cache) >= _DAY_CACHE_SIZE:
            self._cache.clear()
        self._cache[day] = result
        return result

    def matches(self, day: date) -> bool:
        return self.first_on_or_after(day) == day

    def _croniter_on_or_after(self, day: date) -> date | None:
        with self._lock:
            try:
                start = _wall(day) - timedelta(minutes=1)
                found = self._cron.get_next(datetime, start_time=start)
            except (CroniterError, OverflowError, ValueError):
                return None
        return found.date()

    def _search(self, day: date) -> date | None:
        years, year_set = self._years, self._year_set
        horizon = years[-1] if years is not None else day.year + _HORIZON_YEARS
        horizon = min(horizon, _LAST_DATE.year)
        while day.year <= horizon:
            if year_set is not None and day.year not in year_set:
                assert years is not None
                i = bisect_right(years, day.year)
                if i == len(years):
                    return None
                day = date(years[i], 1, 1)
                continue
            found = self._croniter_on_or_after(day)
            if found is None or found.year > horizon:
                return None
            if year_set is not None and found.year not in year_set:
                day = date(found.year, 1, 1)
                continue
            if self._last_dom is not None:
                target = _last_dom_day(found.year, found.month, *self._last_dom)
                if target is None or target < found.day:
                    day = _first_of_next_month(found)
                    continue
                if target > found.day:
                    day = found.replace(day=target)
                    continue
            return found
        return None


def _wall(day: date, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    """A naive local wall-clock time (deliberately without tzinfo)."""
    return datetime.combine(day, time(hour, minute, second))


def _first_of_next_month(day: date) -> date:
    if day.month == 12:
        return date(day.year + 1, 1, 1)
    return date(day.year, day.month + 1, 1)


def _nearest_weekday(year: int, month: int, day: int) -> int:
    """Quartz's ``W``: the weekday nearest to ``day`` without leaving the month."""
    last = calendar.monthrange(year, month)[1]
    weekday = calendar.weekday(year, month, day)  # Monday = 0
    if weekday == 5:  # Saturday
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday
        return day + 1 if day < last else day - 2
    return day


def _last_dom_day(year: int, month: int, offset: int, weekday: bool) -> int | None:
    """The day of ``L-offset`` (``LW`` / ``L-offsetW`` when ``weekday``) in a month."""
    day = calendar.monthrange(year, month)[1] - offset
    if day < 1:
        return None
    return _nearest_weekday(year, month, day) if weekday else day


class _CronTiming(_Timing):
    """Cron / Quartz fire instants with the Debian-cron DST rule.

    Candidate wall-clock times are produced in order (``_next_wall``) and mapped to instants:

    * a wall time that exists once -> that instant;
    * a repeated wall time (fall back) -> fixed-time jobs: the first occurrence only;
      interval jobs: both occurrences;
    * a skipped wall time (spring forward) -> fixed-time jobs: the first instant after the
      gap (several such slots collapse into that one fire); interval jobs: nothing.
    """

    __slots__ = ("_days", "_times", "_zone", "_fixed", "_utc")

    def __init__(self, days: _Days, times: _Times, zone: ZoneInfo, *, fixed: bool) -> None:
        self._days = days
        self._times = times
        self._zone = zone
        self._fixed = fixed
        self._utc = zone.key in ("UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu")

    # -- wall-clock iteration ------------------------------------------------------------

    def _next_wall(self, wall: datetime) -> datetime | None:
        """The first matching naive wall time strictly after ``wall``."""
        day = wall.date()
        if day >= _LAST_DATE:
            return None
        if self._days.matches(day):
            found = self._times.next_after(wall.hour, wall.minute, wall.second)
            if found is not None:
                return _wall(day, *found)
        following = self._days.first_on_or_after(day + timedelta(days=1))
        if following is None:
            return None
        return _wall(following, *self._times.first)

    def _count_walls(self, lo: datetime, hi: datetime) -> int:
        """How many matching naive wall times lie in ``(lo, hi]`` (arithmetic per day)."""
        if hi <= lo:
            return 0
        times = self._times
        first_day, last_day = lo.date(), hi.date()
        total = 0
        day = self._days.first_on_or_after(first_day)
        while day is not None and day <= last_day:
            if day == last_day:
                n = times.count_le(hi.hour, hi.minute, hi.second)
            else:
                n = times.size
            if day == first_day:
                n -= times.count_le(lo.hour, lo.minute, lo.second)
            total += n
            if day >= _LAST_DATE:
                break
            day = self._days.first_on_or_after(day + timedelta(days=1))
        return total

    # -- instants ----------------------------------------------------------------------------

    def _next_after(self, after: datetime) -> datetime | None:
        if self._utc:
            wall = self._next_wall(after.replace(tzinfo=None))
            return None if wall is None else wall.replace(tzinfo=UTC)
        zone = self._zone
        local = after.astimezone(zone)
        start = local.replace(tzinfo=None, fold=0)
        offset = local.utcoffset()
        other = start.replace(tzinfo=zone, fold=1 - local.fold).utcoffset()
        assert offset is not None
        assert other is not None
        if other != offset:
            # `after` lies in a repeated wall-clock period (fall back): settle the fires that
            # are still due inside it, or else continue from the end of the period.
            found, start = self._in_repeated_period(after, start, local.fold, offset, other)
            if found is not None:
                return found
        return self._first_instant_from(start, after)

    def _in_repeated_period(
        self, after: datetime, wall: datetime, fold: int, offset: timedelta, other: timedelta
    ) -> tuple[datetime | None, datetime]:
        """-> (the next fire if it lies in the repeated period, else None; wall to go on from)."""
        zone = self._zone
        if fold == 0:
            first_offset, second_offset = offset, other
            second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            change = _first_change(zone, after, second)
        else:
            first_offset, second_offset = other, offset
            first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            change = _first_change(zone, first, after)
        repeat_start = (change + second_offset).replace(tzinfo=None)
        repeat_end = (change + first_offset).replace(tzinfo=None)
        following = self._next_wall(wall)
        in_period = following is not None and following < repeat_end
        if fold == 0:
            if following is not None and in_period:  # its first occurrence is still ahead
                return (following - first_offset).replace(tzinfo=UTC), wall
            if not self._fixed:  # the second occurrence of the earliest repeated slot
                earliest = self._next_wall(repeat_start - _MICROSECOND)
                if earliest is not None and earliest < repeat_end:
                    return (earliest - second_offset).replace(tzinfo=UTC), wall
        elif following is not None and in_period and not self._fixed:
            return (following - second_offset).replace(tzinfo=UTC), wall
        # Fixed-time jobs fired the repeated slots in their first occurrence already.
        return None, max(wall, repeat_end - _MICROSECOND)

    def _first_instant_from(self, start: datetime, after: datetime) -> datetime | None:
        """The first fire instant > ``after`` among wall times > ``start``."""
        zone = self._zone
        best: datetime | None = None
        wall: datetime | None = start
        while True:
            assert wall is not None
            wall = self._next_wall(wall)
            if wall is None:
                return best
            first = wall.replace(tzinfo=zone).astimezone(UTC)
            second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            if first == second:
                lower = first
                candidates: tuple[datetime, ...] = (first,)
            elif first < second:  # a repeated wall time
                lower = first
                candidates = (first,) if self._fixed else (first, second)
            else:  # a skipped wall time
                change = _first_change(zone, second, first)
                if not self._fixed:  # interval jobs skip it: go on after the gap
                    gap_end = (change + _offset_at(zone, change)).replace(tzinfo=None)
                    wall = max(wall, gap_end - _MICROSECOND)
                    continue
                lower = change  # fixed-time jobs fire once, right after the gap
                candidates = (change,)
            # Instants of later wall times are >= `lower` (first occurrences are monotonic).
            if best is not None and lower >= best:
                return best
            for candidate in candidates:
                if candidate > after and (best is None or candidate < best):
                    best = candidate
            if best is not None and best == lower:
                return best

    def count(self, lo: datetime, hi: datetime) -> int:
        hi = min(hi, _CRON_END)  # nothing fires later; and no date arithmetic near year 9999
        if hi <= lo:
            return 0
        if self._utc:
            return self._count_walls(lo.replace(tzinfo=None), hi.replace(tzinfo=None))
        zone = self._zone
        total = 0
        current = lo
        for change, before, after in self._transitions(lo, hi):
            # Between transitions wall times map 1:1 to instants: count them arithmetically.
            # Interval jobs fire at every instant whose wall time matches, so that is exact
            # up to the change; fixed-time jobs have the DST rule applied by walking their
            # fires within |shift| + 1s of the change.
            margin = abs(after - before) + timedelta(seconds=1) if self._fixed else _MICROSECOND
            quiet_end = min(hi, change - margin)
            if quiet_end > current:
                total += self._count_walls(
                    (current + before).replace(tzinfo=None),
                    (quiet_end + before).replace(tzinfo=None),
                )
                current = quiet_end
            if self._fixed:
                chunk_end = min(hi, change + margin)
                if chunk_end > current:
                    total += self._chain_count(current, chunk_end)
                    current = chunk_end
        if hi > current:
            offset = _offset_at(zone, hi)
            total += self._count_walls(
                (current + offset).replace(tzinfo=None), (hi + offset).replace(tzinfo=None)
            )
        return total

    def _transitions(
        self, lo: datetime, hi: datetime
    ) -> list[tuple[datetime, timedelta, timedelta]]:
        """UTC-offset changes in ``(lo, hi]`` as (instant, offset before, offset after)."""
        zone = self._zone
        found: list[tuple[datetime, timedelta, timedelta]] = []
        current, offset = lo, _offset_at(zone, lo)
        day = timedelta(days=1)
        while current < hi:
            probe = min(current + day, hi)
            probe_offset = _offset_at(zone, probe)
            if probe_offset == offset:
                current = probe
                continue
            change = _first_change(zone, current, probe)
            new_offset = _offset_at(zone, change)
            found.append((change, offset, new_offset))
            current, offset = change, new_offset
        return found


