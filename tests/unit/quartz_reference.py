"""A brute-force reference for Quartz ``CronExpression`` (6/7 fields), written from the
Quartz javadoc and docs/schedules.md, sharing no code with quartzlite.

It answers one question, "does this wall-clock second match?" (:meth:`Quartz.matches`),
and finds fire times by asking it: day by day, and within a matching day hour by hour,
minute by minute, second by second. It knows nothing of timezones: the caller maps wall
times to instants (the comparisons use days without an offset change).

What the javadoc says, as read here:

* fields: second 0-59, minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC,
  day-of-week 1-7 or SUN-SAT (1 = Sunday), optional year 1970-2099; names are
  case-insensitive;
* ``*`` all values; ``,`` a list; ``a-b`` a range; a range whose end is below its start
  *overflows* ("22-2", "NOV-FEB"): it runs to the field's maximum and on from its minimum;
* ``/`` increments: ``a/n`` = a, a+n, ... up to the field's maximum; ``*/n`` starts at the
  field's minimum (0 for second/minute/hour, 1 for day-of-month/month/day-of-week, 1970 for
  the year); ``a-b/n`` takes every n-th value of the range, overflow included. "7/6" in the
  month field is only month 7. A step above the field's size is refused (Quartz's
  ``checkIncrementRange``: second/minute > 59, hour > 23, day-of-month > 31, month > 12,
  day-of-week > 7); the year has no such limit; a step of 0 is refused (quartzlite's rule:
  the javadoc does not define it);
* ``?`` "no specific value", only in day-of-month or day-of-week, and exactly one of the two
  must be ``?`` ("support for specifying both ... is not implemented"; both ``?`` is refused
  too); the other one restricts the day, ``*`` there means every day;
* day-of-month: ``L`` the last day; ``L-n`` n days before it (1 <= n <= 30; a month
  too short has no such day); ``nW`` the weekday nearest day n that stays in the month
  (Saturday -> Friday before, Sunday -> Monday after, but a Saturday 1st -> Monday 3rd and a
  Sunday last day -> the Friday before); ``LW`` / ``L-nW`` the same for the last day / L-n;
* day-of-week: ``L`` alone = 7 (Saturday); ``xL`` the last day x of the month; ``x#k`` the
  k-th day x of the month (1 <= k <= 5; no fire in a month without one);
* ``L``, ``W`` and ``#`` items must be the only item of their field;
* an expression that can never fire is refused (quartzlite's rule: it looks 50 years ahead
  of 2000, or through the years of the year field).

Left undefined by the javadoc, so callers do not generate them: ``nW`` with n beyond the
end of a month (29W-31W), steps after a name (Quartz 2.3.2's parser silently drops them:
``MON/2`` is Monday) and ranges mixing a name and a number (``1-FRI``, refused by Quartz).
This module reads ``nW`` with n beyond the month's last day as "no fire that month".
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Final


class QuartzError(ValueError):
    """The reference refuses the expression."""


@dataclass(frozen=True)
class _Spec:
    name: str
    low: int
    high: int
    step_limit: int | None
    names: tuple[str, ...] = ()  # names[i] is the value low + i

    def value(self, token: str) -> int:
        if token.isascii() and token.isdigit():
            number = int(token)
        elif token in self.names:
            number = self.low + self.names.index(token)
        else:
            raise QuartzError(f"{self.name}: {token!r} is not a value")
        if not self.low <= number <= self.high:
            raise QuartzError(f"{self.name}: {number} is out of range")
        return number


_MONTHS: Final = tuple(calendar.month_abbr[m].upper() for m in range(1, 13))
_DAYS: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
SECOND: Final = _Spec("second", 0, 59, 59)
MINUTE: Final = _Spec("minute", 0, 59, 59)
HOUR: Final = _Spec("hour", 0, 23, 23)
DAY_OF_MONTH: Final = _Spec("day-of-month", 1, 31, 31)
MONTH: Final = _Spec("month", 1, 12, 12, _MONTHS)
DAY_OF_WEEK: Final = _Spec("day-of-week", 1, 7, 7, _DAYS)
YEAR: Final = _Spec("year", 1970, 2099, None)

_ITEM: Final = re.compile(r"(\*|[0-9]+|[A-Z]+)(?:-([0-9]+|[A-Z]+))?(?:/([0-9]+))?")


def _values(text: str, spec: _Spec) -> frozenset[int]:
    """The values of a plain field: ``*``, values, ranges (overflowing), steps, lists."""
    found: set[int] = set()
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise QuartzError(f"{spec.name}: {item!r} is not an item")
        start_text, end_text, step_text = match.groups()
        step = 1
        if step_text is not None:
            step = int(step_text)
            if step == 0:
                raise QuartzError(f"{spec.name}: step 0")
            if spec.step_limit is not None and step > spec.step_limit:
                raise QuartzError(f"{spec.name}: step {step} > {spec.step_limit}")
        if start_text == "*":
            if end_text is not None:
                raise QuartzError(f"{spec.name}: {item!r}")
            start, end = spec.low, spec.high
        else:
            start = spec.value(start_text)
            if end_text is not None:
                end = spec.value(end_text)
            elif step_text is not None:
                end = spec.high
            else:
                end = start
        size = spec.high - spec.low + 1
        if end < start:
            if spec is YEAR:
                raise QuartzError("year: a reversed range")
            end += size  # overflow past the maximum, back to the minimum
        for unwrapped in range(start, end + 1, step):
            found.add(spec.low + (unwrapped - spec.low) % size)
    return frozenset(found)


# Day-of-month and day-of-week restrictions -------------------------------------------


def _last_day(day: date) -> int:
    return calendar.monthrange(day.year, day.month)[1]


def _quartz_weekday(day: date) -> int:
    """1 = Sunday ... 7 = Saturday."""
    return day.isoweekday() % 7 + 1


def _nearest_weekday(year: int, month: int, target: int) -> int:
    last = calendar.monthrange(year, month)[1]
    weekday = _quartz_weekday(date(year, month, target))
    if weekday == 7:  # Saturday: the Friday before, unless that leaves the month
        return target + 2 if target == 1 else target - 1
    if weekday == 1:  # Sunday: the Monday after, unless that leaves the month
        return target - 2 if target == last else target + 1
    return target


@dataclass(frozen=True)
class DayOfMonth:
    values: frozenset[int] | None = None  # plain values
    last_offset: int | None = None  # L (0) or L-n
    nearest: int | None = None  # nW
    weekday: bool = False  # LW / L-nW

    def matches(self, day: date) -> bool:
        last = _last_day(day)
        if self.values is not None:
            return day.day in self.values
        if self.last_offset is not None:
            target = last - self.last_offset
        else:
            assert self.nearest is not None
            target = self.nearest
            if target > last:
                return False
            return _nearest_weekday(day.year, day.month, target) == day.day
        if target < 1:
            return False
        if self.weekday:
            return _nearest_weekday(day.year, day.month, target) == day.day
        return day.day == target


@dataclass(frozen=True)
class DayOfWeek:
    values: frozenset[int] | None = None  # 1 = Sunday ... 7 = Saturday
    last_of: int | None = None  # xL
    nth: tuple[int, int] | None = None  # (x, k) for x#k

    def matches(self, day: date) -> bool:
        weekday = _quartz_weekday(day)
        if self.values is not None:
            return weekday in self.values
        if self.last_of is not None:
            return weekday == self.last_of and day.day + 7 > _last_day(day)
        assert self.nth is not None
        x, k = self.nth
        return weekday == x and (day.day - 1) // 7 + 1 == k


_DOM_LAST: Final = re.compile(r"L(?:-([0-9]+))?(W?)")
_DOM_NEAREST: Final = re.compile(r"([0-9]+)W")
_DOW_LAST: Final = re.compile(r"([0-9]+|[A-Z]{3})L")
_DOW_NTH: Final = re.compile(r"([0-9]+|[A-Z]{3})#([0-9]+)")


def _special_alone(text: str, spec: _Spec) -> None:
    if "," in text:
        raise QuartzError(f"{spec.name}: an L, W or # item must be alone")


def _day_of_month(text: str) -> DayOfMonth | None:
    if text in ("?", "*"):
        return None
    if "L" in text or "W" in text:
        _special_alone(text, DAY_OF_MONTH)
        last = _DOM_LAST.fullmatch(text)
        if last is not None:
            offset = 0
            if last.group(1) is not None:
                offset = int(last.group(1))
                if not 1 <= offset <= 30:
                    raise QuartzError("day-of-month: L-n needs 1 <= n <= 30")
            return DayOfMonth(last_offset=offset, weekday=last.group(2) == "W")
        nearest = _DOM_NEAREST.fullmatch(text)
        if nearest is None:
            raise QuartzError(f"day-of-month: {text!r}")
        return DayOfMonth(nearest=DAY_OF_MONTH.value(nearest.group(1)))
    return DayOfMonth(values=_values(text, DAY_OF_MONTH))


def _day_of_week(text: str) -> DayOfWeek | None:
    if text in ("?", "*"):
        return None
    if text == "L":
        return DayOfWeek(values=frozenset({7}))
    last = _DOW_LAST.fullmatch(text)
    if last is not None:
        return DayOfWeek(last_of=DAY_OF_WEEK.value(last.group(1)))
    nth = _DOW_NTH.fullmatch(text)
    if nth is not None:
        k = int(nth.group(2))
        if not 1 <= k <= 5:
            raise QuartzError("day-of-week: x#k needs 1 <= k <= 5")
        return DayOfWeek(nth=(DAY_OF_WEEK.value(nth.group(1)), k))
    if "L" in text or "#" in text:  # (no day name contains an L)
        raise QuartzError(f"day-of-week: {text!r} (an L or # item must be alone)")
    return DayOfWeek(values=_values(text, DAY_OF_WEEK))


# The expression ----------------------------------------------------------------------


@dataclass(frozen=True)
class Quartz:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    day_of_month: DayOfMonth | None  # None: no restriction
    months: frozenset[int]
    day_of_week: DayOfWeek | None
    years: frozenset[int] | None  # None: no year field, or "*"

    def day_matches(self, day: date) -> bool:
        if self.years is not None and day.year not in self.years:
            return False
        if day.month not in self.months:
            return False
        if self.day_of_month is not None and not self.day_of_month.matches(day):
            return False
        return self.day_of_week is None or self.day_of_week.matches(day)

    def matches(self, wall: datetime) -> bool:
        """Does the (naive) wall-clock second ``wall`` match?"""
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and self.day_matches(wall.date())
        )

    def _days(self, first: date, last: date) -> Iterator[date]:
        """The days from ``first`` to ``last`` that may match, skipping whole years and
        months the year and month fields exclude."""
        day = first
        while day <= last:
            if self.years is not None and day.year not in self.years:
                day = date(day.year + 1, 1, 1) if day.year < last.year else last + timedelta(1)
                continue
            if day.month not in self.months:
                day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
                continue
            yield day
            day += timedelta(days=1)

    def walls_after(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The matching wall-clock seconds in ``(after, until)``, in order (naive)."""
        for day in self._days(after.date(), until.date()):
            if not self.day_matches(day):
                continue
            first_day = day == after.date()
            for hour in range(24):
                if first_day and hour < after.hour:
                    continue
                if hour not in self.hours:
                    continue
                for minute in range(60):
                    if first_day and (hour, minute) < (after.hour, after.minute):
                        continue
                    if minute not in self.minutes:
                        continue
                    for second in range(60):
                        if second not in self.seconds:
                            continue
                        wall = datetime.combine(day, time(hour, minute, second))
                        if wall <= after or not self.matches(wall):
                            continue
                        if wall >= until:
                            return
                        yield wall

    def fires_ever(self) -> bool:
        """Is there a matching day in the years the year field names (2000-2050 without
        one: every day pattern recurs within 28 years)?"""
        years = sorted(self.years) if self.years is not None else range(2000, 2051)
        for year in years:
            for month in sorted(self.months):
                for day in range(1, calendar.monthrange(year, month)[1] + 1):
                    if self.day_matches(date(year, month, day)):
                        return True
        return False


def parse(expression: str) -> Quartz:
    """Parse a 6/7-field Quartz expression; QuartzError when Quartz (as read above) refuses
    it, also when it can never fire."""
    fields = expression.upper().split()
    if len(fields) not in (6, 7):
        raise QuartzError("expected 6 or 7 fields")
    for index, text in enumerate(fields):
        if "?" in text and (index not in (3, 5) or text != "?"):
            raise QuartzError("'?' only alone, in day-of-month or day-of-week")
    if (fields[3] == "?") == (fields[5] == "?"):
        raise QuartzError("exactly one of day-of-month and day-of-week must be '?'")
    years: frozenset[int] | None = None
    if len(fields) == 7 and fields[6] != "*":
        years = _values(fields[6], YEAR)
    quartz = Quartz(
        seconds=_values(fields[0], SECOND),
        minutes=_values(fields[1], MINUTE),
        hours=_values(fields[2], HOUR),
        day_of_month=_day_of_month(fields[3]),
        months=_values(fields[4], MONTH),
        day_of_week=_day_of_week(fields[5]),
        years=years,
    )
    if not quartz.fires_ever():
        raise QuartzError("never fires")
    return quartz
