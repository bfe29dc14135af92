"""Parsing cron and Quartz expressions into a :class:`~quartzlite.schedule.timing._CronTiming`."""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from zoneinfo import ZoneInfo

from croniter import CroniterError

from quartzlite.errors import ValidationError
from quartzlite.schedule.limits import (
    _DAY_NAMES,
    _MONTH_NAMES,
)
from quartzlite.schedule.timing import (
    _CronTiming,
    _Days,
    _Times,
)

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


#: Quartz's largest step per field (CronExpression.checkIncrementRange: "Increment > 60").
_QUARTZ_STEP_LIMITS: Final = {"second": 59, "minute": 59, "hour": 23, "day-of-month": 31,
                              "month": 12, "day-of-week": 7}


def _parse_values(text: str, position: int, spec: _Field, *, quartz: bool) -> tuple[int, ...]:
    """Expand ``*``, values, ranges ``a-b``, steps and lists. A reversed range wraps in
    a Quartz expression (``22-2``, ``NOV-FEB``: Quartz's syntax) and is refused in
    5-field cron, as cron refuses it; a step larger than Quartz allows is refused in a
    Quartz expression."""
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
        limit = _QUARTZ_STEP_LIMITS.get(spec.name)
        if quartz and limit is not None and step > limit:
            first = spec.low if start_text == "*" else start_text
            raise _field_error(
                position, spec,
                f'step {step} in "{item}" is larger than Quartz allows in this field (at most '
                f'{limit}): it would fire only at {first}; write "{first}" for that',
            )
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
        elif not quartz:
            raise _field_error(
                position, spec,
                f'range "{item}" is reversed: cron does not wrap a range; write '
                f'"{start_text}-{spec.high},{spec.low}-{end_text}" for that',
            )
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
        _quartz_item_alone(text, items, position, _DOM, quartz, "W")
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
    values = _parse_values(text, position, _DOM, quartz=quartz)
    return ",".join(map(str, values)), values, None


def _quartz_item_alone(
    text: str, items: list[str], position: int, spec: _Field, quartz: bool, mark: str
) -> None:
    """An ``L`` or ``<mark>`` item: Quartz only, and the only item of its field."""
    if not quartz:
        raise _field_error(
            position, spec, f'"L" and "{mark}" are supported only in 6/7-field Quartz expressions'
        )
    if len(items) > 1:
        raise _field_error(
            position, spec, f'"{text}": an L or {mark} item must be the only item of the field'
        )


def _parse_dow(text: str, position: int, quartz: bool) -> str:
    """-> the croniter (0=Sunday) day-of-week text."""
    if text in ("*", "?"):
        return "*"
    spec = _DOW_QUARTZ if quartz else _DOW_CRON
    items = text.split(",")
    if any(i == "L" or _DOW_LAST.fullmatch(i) or _DOW_NTH.fullmatch(i) for i in items):
        _quartz_item_alone(text, items, position, spec, quartz, "#")
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
    values = _parse_values(text, position, spec, quartz=quartz)
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
    seconds = _parse_values(fields[0], 1, _SECOND, quartz=True) if quartz else (0,)
    minute_text, hour_text = fields[offset], fields[offset + 1]
    minutes = _parse_values(minute_text, offset + 1, _MINUTE, quartz=quartz)
    hours = _parse_values(hour_text, offset + 2, _HOUR, quartz=quartz)
    dom_text, dow_text = fields[offset + 2], fields[offset + 4]
    if quartz:
        _check_quartz_days(fields)
    dom, dom_values, last_dom = _parse_dom(dom_text, offset + 3, quartz)
    months = _parse_values(fields[offset + 3], offset + 4, _MONTH, quartz=quartz)
    dow = _parse_dow(dow_text, offset + 5, quartz)
    years: tuple[int, ...] | None = None
    if len(fields) == 7 and fields[6] != "*":
        years = _parse_values(fields[6], 7, _YEAR, quartz=True)

    # Vixie cron's day rule (its DOM_STAR/DOW_STAR flags): a day matches both day fields
    # (AND) when either field begins with "*" (a step after it changes nothing), and
    # either field (OR) only when both are restricted. Quartz leaves one of them "?".
    day_or = not quartz and not dom_text.startswith(("*", "?")) and not dow_text.startswith(("*", "?"))
    if dom_values is not None and not day_or:
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


def _check_quartz_days(fields: list[str]) -> None:
    """Quartz names the days in one day field and leaves the other "?" (Quartz 2.3.2
    refuses both given, "not implemented", and both "?")."""
    dom, dow = fields[3], fields[5]

    def instead(index: int, value: str) -> str:
        return " ".join(value if i == index else f for i, f in enumerate(fields))

    if dom == "?" and dow == "?":
        raise _schedule_error(
            'day-of-month and day-of-week are both "?": a Quartz expression names the days '
            f'in one of them; for every day write "{instead(3, "*")}"'
        )
    if dom != "?" and dow != "?":
        if "*" in (dom, dow):
            fix = f'write "{instead(5, "?") if dow == "*" else instead(3, "?")}"'
        else:
            fix = f'Quartz cannot combine them: keep one, e.g. "{instead(5, "?")}"'
        raise _schedule_error(
            "a Quartz (6/7-field) expression names the days in day-of-month or in "
            f'day-of-week, not both (got "{dom}" and "{dow}"): the other is "?"; {fix}'
        )


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


