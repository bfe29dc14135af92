"""Exclusion calendars (Quartz's HolidayCalendar, AnnualCalendar and CronCalendar in one):
their rules, checked, and the engine that tells whether an instant is excluded and until
when, and the timing of a job's slots without its excluded ones.

A calendar has a timezone and rules, each read on the wall clock of that zone:

* ``dates`` (``YYYY-MM-DD``), ``yearly`` (``MM-DD``, every year; ``02-29`` only in leap
  years) and ``ranges`` (``from``/``to``, inclusive) exclude whole local days, from
  their midnight to the next;
* ``windows`` (5-field cron or 6/7-field Quartz expressions) exclude every instant whose
  wall time matches the expression at its precision: the whole minute for 5 fields, the
  whole second for Quartz (``* * 0-7 ? * *`` excludes 00:00:00-07:59:59 every day). Both
  occurrences of a repeated wall time (the clock falls back) are excluded; a wall time
  the clock skips does not exist and excludes nothing.

The engine skips excluded time in steps of whole periods: a day rule to the next local
midnight that is not excluded (a run of excluded days in one step), a window to the end
of its run of matching hours, minutes or seconds. So a daily job skips a holiday in one
step and an every-second job skips an excluded day by one jump, not 86,400 checks.

Pure, like the rest of :mod:`quartzlite.schedule`: nothing here reads a clock or the
database.
"""

from __future__ import annotations

import calendar as _gregorian
import functools
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final, Protocol
from zoneinfo import ZoneInfo

from quartzlite.codec import calendar_rules_to_dict
from quartzlite.errors import ValidationError
from quartzlite.models import CalendarRules
from quartzlite.schedule.limits import _LAST_DATE, _MICROSECOND, LAST_INSTANT
from quartzlite.schedule.timing import _BoundedTiming, _CronTiming, _EveryTiming, _Timing
from quartzlite.schedule.zones import _first_change, _load_zone, _offset_at
from quartzlite.validation import type_name

#: The most entries a calendar's list of dates, yearly dates, ranges or windows holds.
MAX_ENTRIES: Final = 1000
#: The rules a calendar may have.
RULE_KINDS: Final = ("dates", "yearly", "ranges", "windows")
#: Planning gives up (:class:`ExclusionError`) after skipping this many excluded slots
#: in a row: the job's calendars exclude (nearly) all of its slots.
MAX_SKIPS: Final = 10_000
#: Counting a job's slots that are not excluded (missed slots after an outage) walks at
#: most this many excluded periods; beyond, the rest of the span counts whole.
MAX_PERIODS: Final = 100_000
#: The first and last years of a date rule.
FIRST_YEAR: Final = 1970
LAST_YEAR: Final = 9997

_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
_YEARLY: Final = re.compile(r"[0-9]{2}-[0-9]{2}", re.ASCII)
#: How far one excluded run of days may be skipped in one step (then the next step goes on).
_DAY_RUN: Final = 4000
#: A hint of where the next excluded time starts looks at most this far ahead, so that
#: at most one UTC-offset change lies between (see :func:`_capped`).
_HINT_SPAN: Final = timedelta(days=7)
_CHAIN: Final = 64
_UTC_NAMES: Final = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu"})


class ExclusionError(ValueError):
    """A job's calendars exclude so many of its slots in a row that planning gives up
    (the node quarantines the job; the client refuses it, naming ``calendars``)."""


# --------------------------------------------------------------------------------------
# Rules: checked and normalised
# --------------------------------------------------------------------------------------


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _entries(data: Mapping[Any, Any], kind: str) -> list[Any]:
    value = data.get(kind, [])
    if not isinstance(value, (list, tuple)):
        raise ValidationError(f"rules.{kind}", f"must be a list, not {type_name(value)}")
    if len(value) > MAX_ENTRIES:
        raise ValidationError(f"rules.{kind}", f"at most {MAX_ENTRIES} entries, got {len(value)}")
    return list(value)


def parse_date(field: str, value: object) -> date:
    """A ``YYYY-MM-DD`` date of a rule (years 1970-9997)."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise ValidationError(field, f"must be a date YYYY-MM-DD, got {_clip(value)}")
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise ValidationError(field, f"{value!r} is not a date of the calendar") from None
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise ValidationError(field, f"the year must be {FIRST_YEAR}-{LAST_YEAR}, got {value!r}")
    return day


def _yearly(field: str, value: object) -> tuple[int, int]:
    if not isinstance(value, str) or not _YEARLY.fullmatch(value):
        raise ValidationError(field, f"must be a yearly date MM-DD, got {_clip(value)}")
    month, day = int(value[:2]), int(value[3:])
    if not 1 <= month <= 12 or not 1 <= day <= _gregorian.monthrange(2000, month)[1]:
        raise ValidationError(field, f"{value!r} is not a day of the year (02-29 is allowed)")
    return month, day


def _window(field: str, value: object) -> str:
    # Imported here: the package imports this module.
    from quartzlite.schedule import parse_schedule

    if not isinstance(value, str):
        raise ValidationError(field, f"must be a cron or Quartz expression, not {type_name(value)}")
    if len(value) > 255:
        raise ValidationError(field, f"must be at most 255 characters, got {len(value)}")
    try:
        parsed = parse_schedule(value, "UTC")
    except ValidationError as error:
        raise ValidationError(field, error.reason) from None
    if parsed.kind not in ("cron", "quartz"):
        raise ValidationError(
            field, f"must be a 5-field cron or a 6/7-field Quartz expression, not {parsed.kind} "
            "(@every and @at name instants, not times of the wall clock)",
        )
    return parsed.expression


def parse_rules(data: object) -> CalendarRules:
    """Check a calendar's rules (a mapping, as JSON gives it, or :class:`CalendarRules`)
    and normalise them (sorted, without repeats). Raises :class:`ValidationError` naming
    the field (``rules.dates[1]``, ``rules.windows[0]``, ...) and the reason."""
    if isinstance(data, CalendarRules):
        data = calendar_rules_to_dict(data)
    if not isinstance(data, Mapping):
        raise ValidationError("rules", f"must be an object, not {type_name(data)}")
    for key in data:
        if key not in RULE_KINDS:
            raise ValidationError(
                f"rules.{str(key)[:40]}", f"unknown rule (allowed: {', '.join(RULE_KINDS)})"
            )
    dates = {parse_date(f"rules.dates[{i}]", v) for i, v in enumerate(_entries(data, "dates"))}
    yearly = {_yearly(f"rules.yearly[{i}]", v) for i, v in enumerate(_entries(data, "yearly"))}
    ranges: set[tuple[date, date]] = set()
    for i, item in enumerate(_entries(data, "ranges")):
        field = f"rules.ranges[{i}]"
        if not isinstance(item, Mapping):
            raise ValidationError(
                field, f'must be an object {{"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}}, '
                f"not {type_name(item)}",
            )
        for key in item:
            if key not in ("from", "to"):
                raise ValidationError(f"{field}.{str(key)[:40]}", "unknown key (allowed: from, to)")
        for key in ("from", "to"):
            if key not in item:
                raise ValidationError(f"{field}.{key}", "is required")
        low = parse_date(f"{field}.from", item["from"])
        high = parse_date(f"{field}.to", item["to"])
        if high < low:
            raise ValidationError(field, f"from ({low}) is after to ({high})")
        ranges.add((low, high))
    windows = {_window(f"rules.windows[{i}]", v) for i, v in enumerate(_entries(data, "windows"))}
    if not (dates or yearly or ranges or windows):
        raise ValidationError("rules", "give at least one rule: dates, yearly, ranges or windows")
    return CalendarRules(
        dates=tuple(d.isoformat() for d in sorted(dates)),
        yearly=tuple(f"{m:02d}-{d:02d}" for m, d in sorted(yearly)),
        ranges=tuple((a.isoformat(), b.isoformat()) for a, b in sorted(ranges)),
        windows=tuple(sorted(windows)),
    )


# --------------------------------------------------------------------------------------
# Wall clock <-> instants
# --------------------------------------------------------------------------------------

_LAST_WALL: Final = datetime.combine(_LAST_DATE, time()) - timedelta(days=2)


def _wall(zone: ZoneInfo, instant: datetime) -> datetime:
    """The naive wall time of ``instant`` in ``zone``."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _after(zone: ZoneInfo, wall: datetime, t: datetime) -> datetime:
    """The first instant after ``t`` whose wall time is ``wall`` (its first occurrence
    after ``t`` when the clock repeats it; the end of the gap when the clock skips it)."""
    if wall >= _LAST_WALL:
        return LAST_INSTANT
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first > second:  # skipped: the first instant after the gap
        found = _first_change(zone, second, first)
        return found if found > t else t + _MICROSECOND
    for candidate in (first, second):
        if candidate > t:
            return candidate
    return t + _MICROSECOND


def _capped(zone: ZoneInfo, t: datetime, hint: datetime) -> datetime:
    """A hint no later than it was, at most a week after ``t`` and not past the next
    UTC-offset change: where the clock falls back, wall times before the hint's come
    again."""
    if zone.key in _UTC_NAMES:
        return hint
    hint = min(hint, t + _HINT_SPAN)
    if _offset_at(zone, t) != _offset_at(zone, hint):
        return _first_change(zone, t, hint)
    return hint


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time())


# --------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------


class _Rule(Protocol):
    def matches(self, t: datetime) -> bool: ...

    def until(self, t: datetime) -> datetime | None: ...

    def hint(self, t: datetime) -> datetime | None: ...


class _DayRule:
    """A calendar's whole-day rules: dates, yearly dates and ranges."""

    __slots__ = ("_zone", "_dates", "_date_set", "_yearly", "_yearly_set", "_ranges", "_starts")

    def __init__(self, zone: ZoneInfo, rules: CalendarRules) -> None:
        self._zone = zone
        self._dates = tuple(sorted(date.fromisoformat(d) for d in rules.dates))
        self._date_set = frozenset(self._dates)
        self._yearly = tuple(sorted((int(y[:2]), int(y[3:])) for y in rules.yearly))
        self._yearly_set = frozenset(self._yearly)
        merged: list[tuple[date, date]] = []
        for low_text, high_text in sorted(rules.ranges):
            low, high = date.fromisoformat(low_text), date.fromisoformat(high_text)
            if merged and low <= merged[-1][1] + timedelta(days=1):
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        self._ranges = tuple(merged)
        self._starts = tuple(r[0] for r in merged)

    def _range_end(self, day: date) -> date | None:
        i = bisect_right(self._starts, day) - 1
        if i >= 0 and self._ranges[i][1] >= day:
            return self._ranges[i][1]
        return None

    def excludes(self, day: date) -> bool:
        return (
            day in self._date_set or (day.month, day.day) in self._yearly_set
            or self._range_end(day) is not None
        )

    def _run_end(self, day: date) -> date:
        """The first day after ``day`` (excluded) that is not excluded."""
        for _ in range(_DAY_RUN):
            if day >= _LAST_DATE:
                return _LAST_DATE
            end = self._range_end(day)
            if end is not None:
                day = end + timedelta(days=1)
            elif day in self._date_set or (day.month, day.day) in self._yearly_set:
                day += timedelta(days=1)
            else:
                return day
        return day

    def _next_day(self, day: date) -> date | None:
        """The first excluded day after ``day``."""
        found: list[date] = []
        i = bisect_right(self._dates, day)
        if i < len(self._dates):
            found.append(self._dates[i])
        if self._yearly:
            for year in range(day.year, min(day.year + 9, LAST_YEAR + 1)):
                hit = None
                for month, dom in self._yearly:
                    try:
                        candidate = date(year, month, dom)
                    except ValueError:  # 02-29 in a common year
                        continue
                    if candidate > day:
                        hit = candidate
                        break
                if hit is not None:
                    found.append(hit)
                    break
        j = bisect_right(self._starts, day)
        if j > 0 and self._ranges[j - 1][1] > day:
            found.append(day + timedelta(days=1))
        if j < len(self._starts):
            found.append(self._starts[j])
        return min(found) if found else None

    def matches(self, t: datetime) -> bool:
        return self.excludes(t.astimezone(self._zone).date())

    def until(self, t: datetime) -> datetime | None:
        day = t.astimezone(self._zone).date()
        if not self.excludes(day):
            return None
        return _after(self._zone, _midnight(self._run_end(day)), t)

    def hint(self, t: datetime) -> datetime | None:
        following = self._next_day(t.astimezone(self._zone).date())
        if following is None:
            return None
        return _capped(self._zone, t, _after(self._zone, _midnight(following), t))


class _WindowRule:
    """One cron or Quartz window: the instants whose wall time matches it."""

    __slots__ = ("_zone", "_timing", "_hours", "_minutes", "_seconds", "_quartz", "_full_second",
                 "_full_minute", "_full_day")

    def __init__(self, zone: ZoneInfo, expression: str) -> None:
        from quartzlite.schedule import parse_schedule

        parsed = parse_schedule(expression, zone.key)
        timing = parsed._timing
        if not isinstance(timing, _CronTiming):
            raise ValidationError("rules.windows", f"{expression!r} is not a cron expression")
        self._zone = zone
        self._timing = timing
        times = timing._times
        self._hours = times._hour_set
        self._minutes = times._minute_set
        self._seconds = frozenset(times._seconds)
        self._quartz = parsed.kind == "quartz"
        self._full_second = not self._quartz or len(self._seconds) == 60
        self._full_minute = self._full_second and len(self._minutes) == 60
        self._full_day = self._full_minute and len(self._hours) == 24

    def _matches_wall(self, wall: datetime) -> bool:
        return (
            wall.hour in self._hours and wall.minute in self._minutes
            and (not self._quartz or wall.second in self._seconds)
            and self._timing._days.matches(wall.date())
        )

    def matches(self, t: datetime) -> bool:
        return self._matches_wall(_wall(self._zone, t))

    def _run_end(self, wall: datetime) -> datetime:
        """The wall time at which the run of matching time that holds ``wall`` ends
        (within its day; the next step goes on from there)."""
        base = _midnight(wall.date())
        if self._full_day:
            day = wall.date() + timedelta(days=1)
            for _ in range(_DAY_RUN):
                if day >= _LAST_DATE or not self._timing._days.matches(day):
                    break
                day += timedelta(days=1)
            return _midnight(day)
        if self._full_minute:
            hour = wall.hour + 1
            while hour < 24 and hour in self._hours:
                hour += 1
            return base + timedelta(hours=hour)
        if self._full_second:
            minute = wall.minute + 1
            while minute < 60 and minute in self._minutes:
                minute += 1
            return base + timedelta(hours=wall.hour, minutes=minute)
        second = wall.second + 1
        while second < 60 and second in self._seconds:
            second += 1
        return base + timedelta(hours=wall.hour, minutes=wall.minute, seconds=second)

    def until(self, t: datetime) -> datetime | None:
        wall = _wall(self._zone, t)
        if not self._matches_wall(wall):
            return None
        return _after(self._zone, self._run_end(wall), t)

    def hint(self, t: datetime) -> datetime | None:
        following = self._timing._next_wall(_wall(self._zone, t))
        if following is None:
            return None
        return _capped(self._zone, t, _after(self._zone, following, t))


class Calendar:
    """A parsed exclusion calendar (or the union of several: :func:`combine`). Build it
    with :func:`compile_calendar`. All instants in and out are aware UTC datetimes."""

    __slots__ = ("name", "_rules")

    def __init__(self, name: str, rules: Sequence[_Rule]) -> None:
        self.name = name
        self._rules = tuple(rules)

    def __repr__(self) -> str:
        return f"Calendar({self.name!r})"

    def excluded(self, instant: datetime) -> bool:
        """Whether ``instant`` lies in an excluded time."""
        return any(rule.matches(instant) for rule in self._rules)

    def excluded_until(self, instant: datetime) -> datetime | None:
        """None when ``instant`` is not excluded; else the first instant after it at
        which its excluding period ends (every instant in between is excluded): the next
        local midnight that is not excluded for day rules, the end of the matching run
        of hours, minutes or seconds for windows; periods that touch are one."""
        end: datetime | None = None
        current = instant
        for _ in range(_CHAIN):
            found: datetime | None = None
            for rule in self._rules:
                until = rule.until(current)
                if until is not None and (found is None or until > found):
                    found = until
            if found is None:
                return end
            end = current = found
            if current >= LAST_INSTANT:
                return current
        return end

    def next_excluded(self, instant: datetime) -> datetime | None:
        """An instant after ``instant`` that is no later than the first excluded one
        after it (the first excluded one, or a point to look again from); None when
        nothing after ``instant`` is excluded."""
        following = instant + _MICROSECOND
        if self.excluded(following):
            return following
        hints = [h for h in (rule.hint(following) for rule in self._rules) if h is not None]
        return min(hints) if hints else None


def combine(calendars: Sequence[Calendar]) -> Calendar | None:
    """The union of ``calendars`` (an instant excluded by any is excluded); None for none."""
    if not calendars:
        return None
    if len(calendars) == 1:
        return calendars[0]
    return Calendar(
        "+".join(c.name for c in calendars), [rule for c in calendars for rule in c._rules]
    )


@functools.lru_cache(maxsize=1024)
def compile_calendar(name: str, timezone: str, rules: CalendarRules) -> Calendar:
    """The engine of a calendar whose rules :func:`parse_rules` checked (a stored one is
    checked again: a row edited by hand raises :class:`ValidationError`)."""
    zone = _load_zone(timezone)
    rules = parse_rules(rules)
    parts: list[_Rule] = []
    if rules.dates or rules.yearly or rules.ranges:
        parts.append(_DayRule(zone, rules))
    parts.extend(_WindowRule(zone, w) for w in rules.windows)
    return Calendar(name, parts)


# --------------------------------------------------------------------------------------
# A job's slots without its excluded ones
# --------------------------------------------------------------------------------------


class _ExcludingTiming(_Timing):
    """The slots of ``inner`` (a job's timing, within its bounds) that ``calendar`` does
    not exclude. ``next_after`` skips excluded slots (for ``@every`` on the job's own
    sequence of slots, by whole periods); ``count`` and ``latest`` see only the slots
    that are not excluded, walking excluded periods, not slots."""

    __slots__ = ("_inner", "_calendar", "_period", "_end")

    def __init__(self, inner: _Timing, calendar: Calendar) -> None:
        self._inner = inner
        self._calendar = calendar
        base = inner._inner if isinstance(inner, _BoundedTiming) else inner
        self._period = base._period if isinstance(base, _EveryTiming) else None
        self._end = inner._end if isinstance(inner, _BoundedTiming) else None

    def skip(self, candidate: datetime | None) -> datetime | None:
        """``candidate`` (a slot of ``inner``) or, when it is excluded, the first slot
        after it that is not; :class:`ExclusionError` after :data:`MAX_SKIPS` in a row."""
        first = candidate
        for _ in range(MAX_SKIPS):
            if candidate is None:
                return None
            until = self._calendar.excluded_until(candidate)
            if until is None:
                return candidate
            if until >= LAST_INSTANT:
                return None
            if self._period is not None:
                periods = -((candidate - until) // self._period)  # at least 1
                try:
                    candidate = self._inner.next_after(candidate + (periods - 1) * self._period)
                except OverflowError:
                    return None
            else:
                candidate = self._inner.next_after(until - _MICROSECOND)
        raise ExclusionError(
            f"the calendars {self._calendar.name} exclude {MAX_SKIPS} slots in a row of the "
            f"schedule after {first.isoformat() if first else '-'}: it cannot be planned "
            "(change its calendars or its schedule)"
        )

    def _next_after(self, after: datetime) -> datetime | None:
        return self.skip(self._inner.next_after(after))

    def _spans(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        """The parts ``(l, h]`` of ``(lo, hi]`` that are not excluded, in order."""
        spans: list[tuple[datetime, datetime]] = []
        start = cursor = lo
        calendar = self._calendar
        for _ in range(MAX_PERIODS):
            begins = calendar.next_excluded(cursor)
            if begins is None or begins > hi:
                break
            ends = calendar.excluded_until(begins)
            if ends is None:  # a point to look again from
                cursor = begins
                continue
            if begins - _MICROSECOND > start:
                spans.append((start, begins - _MICROSECOND))
            start = cursor = ends - _MICROSECOND
            if cursor >= hi:
                return spans
        spans.append((start, hi))
        return spans

    def _sequence(self, lo: datetime, hi: datetime) -> tuple[datetime, timedelta, datetime] | None:
        """For ``@every``: (the first slot after ``lo``, the period, the last instant)."""
        assert self._period is not None
        first = self._inner.next_after(lo)
        if first is None:
            return None
        last = hi if self._end is None else min(hi, self._end)
        return first, self._period, last

    @staticmethod
    def _upto(first: datetime, period: timedelta, x: datetime) -> int:
        """How many slots ``first + k * period`` (k >= 0) are <= ``x``."""
        return 0 if x < first else (x - first) // period + 1

    def count(self, lo: datetime, hi: datetime) -> int:
        if hi <= lo:
            return 0
        spans = self._spans(lo, hi)
        if self._period is None:
            return sum(self._inner.count(low, high) for low, high in spans)
        sequence = self._sequence(lo, hi)
        if sequence is None:
            return 0
        first, period, last = sequence
        return sum(
            max(0, self._upto(first, period, min(high, last)) - self._upto(first, period, low))
            for low, high in spans
        )

    def latest(self, lo: datetime, hi: datetime) -> datetime | None:
        if hi <= lo:
            return None
        spans = self._spans(lo, hi)
        if self._period is None:
            for low, high in reversed(spans):
                found = self._inner.latest(low, high)
                if found is not None:
                    return found
            return None
        sequence = self._sequence(lo, hi)
        if sequence is None:
            return None
        first, period, last = sequence
        for low, high in reversed(spans):
            upto = self._upto(first, period, min(high, last))
            if upto > self._upto(first, period, low):
                return first + (upto - 1) * period
        return None


__all__ = [
    "MAX_ENTRIES", "MAX_PERIODS", "MAX_SKIPS", "RULE_KINDS", "Calendar", "ExclusionError",
    "combine", "compile_calendar", "parse_date", "parse_rules",
]
