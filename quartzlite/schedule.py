"""Schedules: parse cron, Quartz, ``@every`` and ``@at`` expressions and compute fire instants.

This is the only module of quartzlite that imports :mod:`croniter`. It is pure: nothing here
reads a clock (every function takes the instants it needs as parameters), touches the
database or sleeps.

How a cron expression is evaluated
----------------------------------
An expression is split in two halves:

* **which days** match (day-of-month, month, day-of-week, year). Deciding this is delegated to
  croniter, fed a day-level 5-field expression (``0 0 <dom> <month> <dow>``) translated from
  what the user wrote: numbers are expanded to explicit lists, Quartz's 1=Sunday numbering is
  mapped to croniter's 0=Sunday, ``6L`` becomes croniter's ``L5``, ``?`` becomes ``*``.
  What croniter cannot express (``LW``, ``L-n``, ``L-nW`` and the Quartz year field) is a small
  filter on top of croniter's day iteration (:class:`_Days`).
* **which times of day** match (second, minute, hour): a sorted product of three small sets,
  stepped with :mod:`bisect` (:class:`_Times`), so an every-second job costs a few
  microseconds per fire and a long outage can be *counted* arithmetically.

The candidate wall-clock times are then mapped to instants in the schedule's timezone with the
Debian-cron DST rule (see :class:`_CronTiming` and ``docs/schedules.md``).
"""

from __future__ import annotations

import calendar
import functools
import re
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final, NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from quartzlite.enums import MisfirePolicy
from quartzlite.errors import ValidationError

__all__ = [
    "FIRST_INSTANT",
    "LAST_INSTANT",
    "MAX_EVERY",
    "MIN_EVERY",
    "FirePlan",
    "Schedule",
    "check_instant",
    "parse_duration",
    "parse_schedule",
    "plan_next",
    "preview",
]

#: The shortest interval ``@every`` accepts.
MIN_EVERY: Final = timedelta(milliseconds=100)
#: The longest interval ``@every`` accepts (100 years).
MAX_EVERY: Final = timedelta(days=36500)

#: The supported instants: [FIRST_INSTANT, LAST_INSTANT). An @at, a preview's start or
#: a filter outside is refused at the door, and a schedule whose next instant would
#: reach LAST_INSTANT has none: nothing past it reaches a node, and date arithmetic
#: keeps a year of room before datetime's end (year 9999) in every timezone.
FIRST_INSTANT: Final = datetime(1970, 1, 1, tzinfo=UTC)
LAST_INSTANT: Final = datetime(9998, 12, 1, tzinfo=UTC)

#: Expressions without a year field must fire at least once in this many years after
#: :data:`_REFERENCE`; otherwise :func:`parse_schedule` rejects them as never firing.
_HORIZON_YEARS: Final = 50
_REFERENCE: Final = datetime(2000, 1, 1, tzinfo=UTC)

#: Safety stop for :meth:`_Timing.count` when it has to walk fire instants one by one
#: (only in the few hours around a DST transition; everything else is counted arithmetically).
_CHAIN_COUNT_CAP: Final = 1_000_000

_ALIASES: Final[Mapping[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ALLOWED_FORMS: Final = "@every <duration>, @at <ISO-8601 instant>, " + ", ".join(_ALIASES)

_MONTH_NAMES: Final[Mapping[str, int]] = {
    name.upper(): number for number, name in enumerate(calendar.month_abbr) if name
}
_DAY_NAMES: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_LAST_DATE: Final = date(9998, 12, 1)
#: Cron fire instants all lie before this (wall times stop before _LAST_DATE in any zone).
_CRON_END: Final = datetime(9998, 12, 3, tzinfo=UTC)
_RANGE: Final = (
    f"instants must lie from {FIRST_INSTANT:%Y-%m-%dT%H:%M:%SZ} up to (not including) "
    f"{LAST_INSTANT:%Y-%m-%dT%H:%M:%SZ}"
)
_MICROSECOND: Final = timedelta(microseconds=1)
_DAY_CACHE_SIZE: Final = 128  # per schedule: the days around the last calls


# --------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------

_DURATION_PART: Final = re.compile(r"\s*([0-9]+)\s*(ms|d|h|m|s)\s*", re.ASCII)
_DURATION_UNITS: Final[Mapping[str, timedelta]] = {
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
}
_DURATION_ORDER: Final = ("d", "h", "m", "s", "ms")


def parse_duration(text: str) -> timedelta:
    """Parse ``"90s"``, ``"1h30m"``, ``"2d"``, ``"500ms"``, ``"1m30s"`` into a timedelta.

    Units are ``d h m s ms``; each may appear once, largest first, with a whole number in
    front of it. Raises :class:`ValueError` (with a readable message) on anything else.
    """
    if not isinstance(text, str):
        raise ValueError(f"a duration must be a string, not {type(text).__name__}")
    source = text.strip().lower()
    if not source:
        raise ValueError("the duration is empty; expected e.g. 90s, 1h30m, 2d or 500ms")
    total = timedelta()
    pos = 0
    last_rank = -1
    while pos < len(source):
        match = _DURATION_PART.match(source, pos)
        if match is None:
            raise ValueError(
                f'invalid duration "{text}": expected whole numbers each followed by a unit '
                "(ms, s, m, h, d), e.g. 90s, 1h30m, 2d or 500ms"
            )
        unit = match.group(2)
        rank = _DURATION_ORDER.index(unit)
        if rank <= last_rank:
            raise ValueError(
                f'invalid duration "{text}": each unit may appear once, largest first '
                "(d, h, m, s, ms)"
            )
        last_rank = rank
        try:
            total += int(match.group(1)) * _DURATION_UNITS[unit]
        except OverflowError:
            raise ValueError(f'invalid duration "{text}": too large') from None
        pos = match.end()
    return total


def _format_duration(value: timedelta) -> str:
    ms = value // timedelta(milliseconds=1)
    if ms % 1000:
        return f"{ms}ms"
    return f"{ms // 1000}s"


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


# --------------------------------------------------------------------------------------
# Cron field parsing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: Mapping[str, int]
    names_hint: str = ""


_SECOND: Final = _Field("second", 0, 59, {})
_MINUTE: Final = _Field("minute", 0, 59, {})
_HOUR: Final = _Field("hour", 0, 23, {})
_DOM: Final = _Field("day-of-month", 1, 31, {})
_MONTH: Final = _Field("month", 1, 12, _MONTH_NAMES, " or a month name (JAN-DEC)")
_DOW_CRON: Final = _Field(
    "day-of-week", 0, 7, {n: i for i, n in enumerate(_DAY_NAMES)}, " or a day name (SUN-SAT)"
)
_DOW_QUARTZ: Final = _Field(
    "day-of-week", 1, 7, {n: i + 1 for i, n in enumerate(_DAY_NAMES)}, " or a day name (SUN-SAT)"
)
_YEAR: Final = _Field("year", 1970, 2099, {})

_ITEM: Final = re.compile(r"(\*|[0-9A-Z]+)(?:-([0-9A-Z]+))?(?:/([0-9]+))?", re.ASCII)
_DOM_LAST: Final = re.compile(r"L(?:-([0-9]+))?(W)?", re.ASCII)
_DOM_NEAREST: Final = re.compile(r"([0-9]+)W", re.ASCII)
_DOW_LAST: Final = re.compile(r"([0-9]+|[A-Z]{3})L", re.ASCII)
_DOW_NTH: Final = re.compile(r"([0-9]+|[A-Z]{3})#([0-9]+)", re.ASCII)


def _schedule_error(reason: str) -> ValidationError:
    return ValidationError("schedule", reason)


def _field_error(position: int, spec: _Field, detail: str) -> ValidationError:
    return _schedule_error(f"field {position} ({spec.name}) {detail}")


def _value(token: str, position: int, spec: _Field) -> int:
    if token.isdigit():
        value = int(token)
    elif token in spec.names:
        value = spec.names[token]
    else:
        raise _field_error(position, spec, f'value "{token}" is not a number{spec.names_hint}')
    if not spec.low <= value <= spec.high:
        raise _field_error(position, spec, f"value {value} is out of range {spec.low}-{spec.high}")
    return value


def _parse_values(text: str, position: int, spec: _Field) -> tuple[int, ...]:
    """Expand ``*``, values, ranges ``a-b`` (wrapping allowed), steps and lists."""
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _field_error(position, spec, f'has an empty list item in "{text}"')
        match = _ITEM.fullmatch(item)
        if match is None:
            raise _field_error(
                position,
                spec,
                f'item "{item}" is not valid: expected *, a value, a range a-b, '
                "a step */n, a/n or a-b/n, or a comma-separated list of these",
            )
        start_text, end_text, step_text = match.groups()
        step = int(step_text) if step_text is not None else 1
        if step < 1:
            raise _field_error(position, spec, f'step 0 in "{item}" is not allowed')
        if start_text == "*":
            if end_text is not None:
                raise _field_error(position, spec, f'item "{item}" is not valid')
            values.update(range(spec.low, spec.high + 1, step))
            continue
        start = _value(start_text, position, spec)
        if end_text is None:
            values.update(range(start, spec.high + 1, step) if step_text else (start,))
            continue
        end = _value(end_text, position, spec)
        if start <= end:
            values.update(range(start, end + 1, step))
        elif spec is _YEAR:
            raise _field_error(position, spec, f'range "{item}" is reversed')
        else:  # a wrapping range such as FRI-MON, NOV-FEB or 22-2
            sequence = [*range(start, spec.high + 1), *range(spec.low, end + 1)]
            values.update(sequence[::step])
    return tuple(sorted(values))


@dataclass(frozen=True, slots=True)
class _CronParts:
    times: _Times
    days: _Days
    fixed: bool


def _parse_dom(
    text: str, position: int, quartz: bool
) -> tuple[str, tuple[int, ...] | None, tuple[int, bool] | None]:
    """-> (croniter day-of-month text, plain values or None, (L offset, W) or None)."""
    if text in ("*", "?"):
        return "*", None, None
    items = text.split(",")
    if any(_DOM_LAST.fullmatch(i) or _DOM_NEAREST.fullmatch(i) for i in items):
        if not quartz:
            raise _field_error(
                position, _DOM, '"L" and "W" are supported only in 6/7-field Quartz expressions'
            )
        if len(items) > 1:
            raise _field_error(
                position, _DOM, f'"{text}": an L or W item must be the only item of the field'
            )
        last = _DOM_LAST.fullmatch(text)
        if last is not None:
            offset_text, weekday = last.group(1), last.group(2) is not None
            offset = int(offset_text) if offset_text is not None else 0
            if offset_text is not None and not 1 <= offset <= 30:
                raise _field_error(
                    position, _DOM, f'"{text}": the n in L-n must be between 1 and 30'
                )
            if offset == 0 and not weekday:
                return "L", None, None
            return "*", None, (offset, weekday)
        nearest = _DOM_NEAREST.fullmatch(text)
        assert nearest is not None
        return f"{_value(nearest.group(1), position, _DOM)}W", None, None
    values = _parse_values(text, position, _DOM)
    return ",".join(map(str, values)), values, None


def _parse_dow(text: str, position: int, quartz: bool) -> str:
    """-> the croniter (0=Sunday) day-of-week text."""
    if text in ("*", "?"):
        return "*"
    spec = _DOW_QUARTZ if quartz else _DOW_CRON
    items = text.split(",")
    if any(i == "L" or _DOW_LAST.fullmatch(i) or _DOW_NTH.fullmatch(i) for i in items):
        if not quartz:
            raise _field_error(
                position, spec, '"L" and "#" are supported only in 6/7-field Quartz expressions'
            )
        if len(items) > 1:
            raise _field_error(
                position, spec, f'"{text}": an L or # item must be the only item of the field'
            )
        if text == "L":  # Quartz: L alone in day-of-week means Saturday
            return "6"
        last = _DOW_LAST.fullmatch(text)
        if last is not None:  # 6L / FRIL: the last Friday of the month
            return f"L{_value(last.group(1), position, spec) - 1}"
        nth = _DOW_NTH.fullmatch(text)
        assert nth is not None  # 6#3 / FRI#3: the third Friday of the month
        weekday = _value(nth.group(1), position, spec)
        n = int(nth.group(2))
        if not 1 <= n <= 5:
            raise _field_error(position, spec, f'"{text}": the n in day#n must be between 1 and 5')
        return f"{weekday - 1}#{n}"
    values = _parse_values(text, position, spec)
    days = sorted({(v - 1) if quartz else (v % 7) for v in values})
    return ",".join(map(str, days))


def _parse_cron(fields: list[str], zone: ZoneInfo) -> tuple[_CronTiming, str]:
    """Parse 5-field cron or 6/7-field Quartz fields. Returns (timing, kind)."""
    quartz = len(fields) in (6, 7)
    if not quartz and len(fields) != 5:
        raise _schedule_error(f"expected 5 (cron) or 6-7 (Quartz) fields, got {len(fields)}")
    fields = [f.upper() for f in fields]
    offset = 1 if quartz else 0  # Quartz starts with seconds
    for position, text in enumerate(fields, start=1):
        index = position - 1 - offset
        if "?" in text and (index not in (2, 4) or text != "?"):
            spec_name = [_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW_CRON, _YEAR][index + 1].name
            raise _schedule_error(
                f'field {position} ({spec_name}) "?" is allowed only on its own, '
                "in day-of-month or day-of-week"
            )
    seconds = _parse_values(fields[0], 1, _SECOND) if quartz else (0,)
    minute_text, hour_text = fields[offset], fields[offset + 1]
    minutes = _parse_values(minute_text, offset + 1, _MINUTE)
    hours = _parse_values(hour_text, offset + 2, _HOUR)
    dom, dom_values, last_dom = _parse_dom(fields[offset + 2], offset + 3, quartz)
    months = _parse_values(fields[offset + 3], offset + 4, _MONTH)
    dow = _parse_dow(fields[offset + 4], offset + 5, quartz)
    years: tuple[int, ...] | None = None
    if len(fields) == 7 and fields[6] != "*":
        years = _parse_values(fields[6], 7, _YEAR)

    # Quartz combines day-of-month and day-of-week with AND ("?" = no restriction);
    # classic cron with OR when both are restricted (Vixie cron; croniter's day_or).
    day_or = not quartz
    if dom_values is not None and (quartz or dow == "*"):
        _check_days_fit_months(dom_values, months, years)

    month_text = "*" if len(months) == 12 else ",".join(map(str, months))
    try:
        days = _Days(f"0 0 {dom} {month_text} {dow}", day_or=day_or, years=years, last_dom=last_dom)
    except CroniterError:
        raise _schedule_error(
            "this combination of day-of-month and day-of-week is not supported"
        ) from None
    fixed = not minute_text.startswith("*") and not hour_text.startswith("*")
    timing = _CronTiming(days, _Times(hours, minutes, seconds), zone, fixed=fixed)
    return timing, ("quartz" if quartz else "cron")


def _check_days_fit_months(
    days: tuple[int, ...], months: tuple[int, ...], years: tuple[int, ...] | None
) -> None:
    leap = years is None or any(calendar.isleap(y) for y in years)
    longest = max(
        (29 if leap else 28) if m == 2 else calendar.monthrange(2001, m)[1] for m in months
    )
    if min(days) > longest:
        names = [calendar.month_name[m] for m in months]
        where = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        if not leap:
            where += " of a non-leap year"
        raise _schedule_error(
            f"day-of-month {min(days)} never occurs in {where}: the expression never fires"
        )


# --------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------


class Schedule:
    """A parsed, immutable schedule. Build it with :func:`parse_schedule`.

    ``expression`` is the expression as given (stripped), ``timezone`` the IANA name,
    ``kind`` one of ``"cron"`` (5 fields and the @-aliases), ``"quartz"`` (6/7 fields),
    ``"every"`` and ``"at"``; ``one_shot`` is True for ``@at``.
    """

    __slots__ = ("_expression", "_timezone", "_kind", "_timing", "_zone")

    _expression: str
    _timezone: str
    _kind: str
    _timing: _Timing
    _zone: ZoneInfo

    def __init__(self, *, expression: str, zone: ZoneInfo, kind: str, timing: _Timing) -> None:
        set_ = object.__setattr__
        set_(self, "_expression", expression)
        set_(self, "_timezone", zone.key)
        set_(self, "_kind", kind)
        set_(self, "_timing", timing)
        set_(self, "_zone", zone)

    @property
    def expression(self) -> str:
        """The expression as given (stripped)."""
        return self._expression

    @property
    def timezone(self) -> str:
        """The IANA timezone name, e.g. ``"UTC"`` or ``"Europe/Berlin"``."""
        return self._timezone

    @property
    def kind(self) -> str:
        """``"cron"`` (5 fields, @-aliases), ``"quartz"`` (6/7 fields), ``"every"`` or ``"at"``."""
        return self._kind

    @property
    def one_shot(self) -> bool:
        """True for ``@at``: it fires at most once."""
        return self._kind == "at"

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Schedule is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Schedule is immutable (cannot delete {name!r})")

    def __repr__(self) -> str:
        return f"Schedule({self.expression!r}, timezone={self.timezone!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.expression, self.timezone) == (other.expression, other.timezone)

    def __hash__(self) -> int:
        return hash((self.expression, self.timezone))

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after ``after`` (aware, any timezone), as an aware
        UTC datetime; None when the schedule never fires again."""
        return self._timing.next_after(_as_utc(after, "after"))  # None beyond year 9999

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        # Pickle / copy by re-parsing: the croniter object and the lock are not picklable.
        return parse_schedule, (self.expression, self.timezone)


def parse_schedule(expression: str, timezone: str = "UTC") -> Schedule:
    """Parse a schedule expression in an IANA timezone.

    Raises ``ValidationError("schedule", reason)`` or ``ValidationError("timezone", reason)``
    and nothing else for any string. An expression that can never fire is rejected, and so
    is an ``@every`` interval longer than :data:`MAX_EVERY` or an ``@at`` instant a datetime
    cannot hold; an ``@at`` in the past is accepted (its :meth:`Schedule.next_after` is
    simply None). A schedule that parsed never raises later: an instant beyond year 9999
    is "no further fire" (None). Schedules are immutable, so parsed ones
    are cached: thousands of jobs sharing an expression parse it once.
    """
    return _parse_cached(expression, timezone)


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, timezone: str) -> Schedule:
    if not isinstance(expression, str):
        raise _schedule_error(f"the schedule must be a string, not {type(expression).__name__}")
    zone = _load_zone(timezone)
    text = expression.strip()
    if not text:
        raise _schedule_error("the schedule is empty")

    if text.startswith("@"):
        head, *rest = text.split(None, 1)
        keyword, argument = head.lower(), (rest[0].strip() if rest else "")
        if keyword == "@every":
            return Schedule(
                expression=text,
                zone=zone,
                kind="every",
                timing=_EveryTiming(_parse_every(argument)),
            )
        if keyword == "@at":
            return Schedule(
                expression=text, zone=zone, kind="at", timing=_AtTiming(_parse_at(argument, zone))
            )
        if keyword in _ALIASES:
            if argument:
                raise _schedule_error(f'"{head}" takes no argument, got "{argument}"')
            timing, kind = _parse_cron(_ALIASES[keyword].split(), zone)
            return Schedule(expression=text, zone=zone, kind=kind, timing=timing)
        raise _schedule_error(f'unknown schedule form "{head}"; allowed: {_ALLOWED_FORMS}')

    timing, kind = _parse_cron(text.split(), zone)
    reference = _REFERENCE
    years = timing._days._years
    if years is not None:
        reference = datetime(years[0], 1, 1, tzinfo=UTC) - timedelta(days=1)
    if timing.next_after(reference) is None:
        raise _schedule_error(
            "the expression never fires: no date matches its day-of-month, month, "
            "day-of-week and year fields together"
        )
    return Schedule(expression=text, zone=zone, kind=kind, timing=timing)


def _parse_every(argument: str) -> timedelta:
    if not argument:
        raise _schedule_error('"@every" needs a duration, e.g. "@every 90s" or "@every 1h30m"')
    try:
        period = parse_duration(argument)
    except ValueError as exc:
        raise _schedule_error(f"@every: {exc}") from None
    if period < MIN_EVERY:
        raise _schedule_error(
            f"the @every interval must be at least 100ms, got {_format_duration(period)}"
        )
    if period > MAX_EVERY:
        raise _schedule_error(
            f"the @every interval must be at most 36500d (100 years), got {argument}"
        )
    return period


def _parse_at(argument: str, zone: ZoneInfo) -> datetime:
    if not argument:
        raise _schedule_error('"@at" needs an instant, e.g. "@at 2026-05-01T09:30:00Z"')
    try:
        instant = datetime.fromisoformat(argument)
    except ValueError:
        raise _schedule_error(
            f'invalid @at instant "{argument}": expected an ISO-8601 date-time such as '
            '"2026-05-01T09:30:00Z", "2026-05-01T09:30:00+02:00" or "2026-05-01T09:30" '
            "(read in the schedule's timezone)"
        ) from None
    try:
        found = _wall_first_instant(instant, zone) if instant.tzinfo is None else instant.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00-05:00 is in year 10000 in UTC
        found = None
    if found is None or not FIRST_INSTANT <= found < LAST_INSTANT:
        raise _schedule_error(f'the @at instant "{argument}" is out of range: {_RANGE}')
    return found


def check_instant(field: str, value: datetime) -> datetime:
    """``value`` (aware) as UTC, or a ValidationError naming ``field`` when it lies
    outside the supported instants."""
    if value.tzinfo is None:
        raise ValidationError(field, "must include a UTC offset, e.g. 2026-01-31T12:00:00Z")
    try:
        found = value.astimezone(UTC)
    except OverflowError:
        found = None
    if found is None or not FIRST_INSTANT <= found < LAST_INSTANT:
        raise ValidationError(field, f"is out of range: {_RANGE}")
    return found


# --------------------------------------------------------------------------------------
# Preview and misfire planning
# --------------------------------------------------------------------------------------


def preview(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire instants strictly after ``start``, as aware datetimes in the
    schedule's timezone (fewer if the schedule stops firing)."""
    result: list[datetime] = []
    current: datetime | None = _as_utc(start, "start")
    zone = schedule._zone
    timing = schedule._timing
    while len(result) < count:
        assert current is not None
        current = timing.next_after(current)
        if current is None:
            break
        try:
            result.append(current.astimezone(zone))
        except OverflowError:  # it is in year 10000 in that timezone: show it in UTC
            result.append(current)
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class FirePlan:
    """What to do with a job after its planned slot ``after``, seen at ``now``."""

    next_fire_at: datetime | None  # the next planned instant to fire (UTC); None = never again
    missed: list[datetime]  # slots to record as "missed" (UTC), oldest first, <= max_missed
    missed_more: int  # how many further missed slots were not listed


def plan_next(
    schedule: Schedule,
    *,
    after: datetime,
    now: datetime,
    policy: MisfirePolicy,
    grace_s: float,
    max_missed: int = 100,
) -> FirePlan:
    """Decide the next fire after the slot ``after`` given the current instant ``now``.

    Slots ``s`` with ``after < s <= now - grace_s`` are misfired.

    * No misfired slot: ``next_fire_at = schedule.next_after(after)``.
    * ``FIRE_ONCE``: the latest misfired slot is fired (late) as ``next_fire_at``; the earlier
      ones are missed.
    * ``SKIP``: all misfired slots are missed; ``next_fire_at`` is the first slot after
      ``now - grace_s``.

    At most ``max_missed`` missed slots (the oldest) are materialised; ``missed_more`` counts
    the rest exactly: arithmetically for ``@every`` and, for cron, per matching day from the
    time-of-day product (slots are walked one by one only within a few hours of a DST
    transition, capped at 1,000,000 per call, i.e. never reached in practice).
    """
    policy = MisfirePolicy(policy)
    if grace_s < 0:
        raise ValueError("grace_s must be >= 0")
    if max_missed < 0:
        raise ValueError("max_missed must be >= 0")
    start = _as_utc(after, "after")
    threshold = _as_utc(now, "now") - timedelta(seconds=grace_s)
    timing = schedule._timing

    first = timing.next_after(start)
    if first is None or first > threshold:
        return FirePlan(next_fire_at=first, missed=[], missed_more=0)

    total = max(1, timing.count(start, threshold))
    if policy is MisfirePolicy.FIRE_ONCE:
        latest = timing.latest(start, threshold)
        assert latest is not None
        to_record = total - 1
        next_fire: datetime | None = latest
    else:
        to_record = total
        next_fire = timing.next_after(threshold)

    missed: list[datetime] = []
    current: datetime | None = first
    limit = min(max_missed, to_record)
    while current is not None and len(missed) < limit:
        missed.append(current)
        current = timing.next_after(current)
    return FirePlan(next_fire_at=next_fire, missed=missed, missed_more=to_record - len(missed))
