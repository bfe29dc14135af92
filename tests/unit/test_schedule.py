"""Unit tests of quartzlite.schedule: pure, no database, no sleeping, no clock.

Every expected instant below was worked out by hand from a calendar and the published
UTC offsets (not computed with the code under test). 2026 transitions used:

* Europe/Berlin:       2026-03-29 01:00Z  02:00 CET  -> 03:00 CEST (+1 -> +2)
                       2026-10-25 01:00Z  03:00 CEST -> 02:00 CET  (+2 -> +1)
* America/New_York:    2026-03-08 07:00Z  02:00 EST  -> 03:00 EDT  (-5 -> -4)
                       2026-11-01 06:00Z  02:00 EDT  -> 01:00 EST  (-4 -> -5)
* Australia/Lord_Howe: 2026-04-04 15:00Z  02:00 LHDT -> 01:30 LHST (+11 -> +10:30)
                       2026-10-03 15:30Z  02:00 LHST -> 02:30 LHDT (+10:30 -> +11)
"""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from quartzlite.enums import MisfirePolicy
from quartzlite.errors import ValidationError
from quartzlite.schedule import (
    FirePlan,
    Schedule,
    parse_duration,
    parse_schedule,
    plan_next,
    preview,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def iso(text: str) -> datetime:
    """An aware instant from ISO text (Z allowed)."""
    value = datetime.fromisoformat(text)
    assert value.tzinfo is not None
    return value.astimezone(UTC)


def chain(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    current: datetime | None = start
    for _ in range(count):
        assert current is not None
        current = schedule.next_after(current)
        if current is None:
            break
        out.append(current)
    return out


def fires(expression: str, start: str, count: int, timezone: str = "UTC") -> list[str]:
    """The next `count` fires after `start`, as ISO UTC strings ending in Z."""
    schedule = parse_schedule(expression, timezone)
    return [
        f.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for f in chain(schedule, iso(start), count)
    ]


# ----------------------------------------------------------------------------------------
# 5-field cron
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "start", "expected"),
    [
        pytest.param(
            "*/20 9-10 * * *",
            "2026-01-01T09:05:00Z",
            ["2026-01-01T09:20:00Z", "2026-01-01T09:40:00Z", "2026-01-01T10:00:00Z"],
            id="steps-and-ranges",
        ),
        pytest.param(
            "5,10-12 * * * *",
            "2026-01-01T00:00:00Z",
            ["2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:11:00Z"],
            id="lists",
        ),
        pytest.param(
            "0 0 * * 7",
            "2026-01-01T00:00:00Z",
            ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
            id="7-is-sunday",
        ),
        pytest.param(
            "0 0 * * 0",
            "2026-01-01T00:00:00Z",
            ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
            id="0-is-sunday",
        ),
        pytest.param(
            "0 0 * * SUN",
            "2026-01-01T00:00:00Z",
            ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"],
            id="sun-name",
        ),
        pytest.param(
            "0 9 * JAN-FEB MON-FRI",
            "2026-01-30T10:00:00Z",
            ["2026-02-02T09:00:00Z", "2026-02-03T09:00:00Z"],
            id="names",
        ),
        pytest.param(
            "0 9 1 MAR,JUL *",
            "2026-01-01T00:00:00Z",
            ["2026-03-01T09:00:00Z", "2026-07-01T09:00:00Z", "2027-03-01T09:00:00Z"],
            id="month-list-names",
        ),
        pytest.param(
            "0 0 13 * 5",
            "2026-01-01T00:00:00Z",
            [
                "2026-01-02T00:00:00Z",
                "2026-01-09T00:00:00Z",
                "2026-01-13T00:00:00Z",
                "2026-01-16T00:00:00Z",
            ],
            id="vixie-or-dom-or-dow",
        ),
        pytest.param(
            "0 0 1-3 * 1",
            "2026-01-31T12:00:00Z",
            [
                "2026-02-01T00:00:00Z",
                "2026-02-02T00:00:00Z",
                "2026-02-03T00:00:00Z",
                "2026-02-09T00:00:00Z",
            ],
            id="vixie-or-range-and-monday",
        ),
        pytest.param(
            "0 0 13 * *",
            "2026-01-01T00:00:00Z",
            ["2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"],
            id="dom-only",
        ),
        # Vixie cron's day rule: a day field that begins with "*" (step or not) makes
        # the two day fields an AND; only two restricted fields are an OR.
        pytest.param(
            "0 0 */2 * 1",
            "2026-01-01T00:00:00Z",
            ["2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z", "2026-02-09T00:00:00Z"],
            id="vixie-star-step-dom-and-monday-is-and",
        ),
        pytest.param(
            "0 0 */10 * 1,3",
            "2026-01-01T00:00:00Z",
            ["2026-01-21T00:00:00Z", "2026-02-11T00:00:00Z", "2026-03-11T00:00:00Z"],
            id="vixie-star-step-dom-and-day-list-is-and",
        ),
        pytest.param(
            "0 0 13 * */2",
            "2026-01-01T00:00:00Z",
            ["2026-01-13T00:00:00Z", "2026-06-13T00:00:00Z", "2026-08-13T00:00:00Z"],
            id="vixie-dom-and-star-step-dow-is-and",
        ),
        pytest.param(
            "30 * * * ?",
            "2026-01-01T00:00:00Z",
            ["2026-01-01T00:30:00Z", "2026-01-01T01:30:00Z"],
            id="question-mark-in-5-field",
        ),
        pytest.param(
            "0 0 29 2 *",
            "2026-01-01T00:00:00Z",
            ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
            id="leap-day",
        ),
    ],
)
def test_five_field_cron(expression: str, start: str, expected: list[str]) -> None:
    assert fires(expression, start, len(expected)) == expected
    assert parse_schedule(expression).kind == "cron"


def test_cron_has_minute_precision() -> None:
    schedule = parse_schedule("* * * * *")
    assert schedule.next_after(utc(2026, 1, 1, 10, 0, 0)) == utc(2026, 1, 1, 10, 1)
    assert schedule.next_after(utc(2026, 1, 1, 10, 0, 59)) == utc(2026, 1, 1, 10, 1)
    after = utc(2026, 1, 1, 10, 0) + timedelta(microseconds=1)
    assert schedule.next_after(after) == utc(2026, 1, 1, 10, 1)


def test_next_after_is_strict_and_returns_utc() -> None:
    schedule = parse_schedule("0 12 * * *", BERLIN)
    first = schedule.next_after(utc(2026, 6, 1, 0, 0))
    assert first == utc(2026, 6, 1, 10, 0)
    assert first is not None
    assert first.tzinfo is UTC
    assert schedule.next_after(first) == utc(2026, 6, 2, 10, 0)


def test_next_after_accepts_any_aware_timezone() -> None:
    schedule = parse_schedule("0 12 * * *")
    tokyo = datetime(2026, 6, 1, 20, 0, tzinfo=ZoneInfo("Asia/Tokyo"))  # 11:00Z
    assert schedule.next_after(tokyo) == utc(2026, 6, 1, 12, 0)


def test_next_after_rejects_naive() -> None:
    schedule = parse_schedule("0 12 * * *")
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule.next_after(utc(2026, 1, 1).replace(tzinfo=None))


# ----------------------------------------------------------------------------------------
# Quartz 6/7-field
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "start", "expected"),
    [
        pytest.param(
            "30 15 10 * * ?",
            "2026-01-01T00:00:00Z",
            ["2026-01-01T10:15:30Z", "2026-01-02T10:15:30Z"],
            id="seconds-first",
        ),
        pytest.param(
            "*/20 * * * * ?",
            "2026-01-01T00:00:05Z",
            ["2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"],
            id="every-20-seconds",
        ),
        pytest.param(
            "0 0 12 ? * 1",
            "2026-01-01T00:00:00Z",
            ["2026-01-04T12:00:00Z", "2026-01-11T12:00:00Z"],
            id="dow-1-is-sunday",
        ),
        pytest.param(
            "0 0 12 ? * 7",
            "2026-01-01T00:00:00Z",
            ["2026-01-03T12:00:00Z", "2026-01-10T12:00:00Z"],
            id="dow-7-is-saturday",
        ),
        pytest.param(
            "0 0 12 ? * 2-6",
            "2026-01-02T13:00:00Z",
            ["2026-01-05T12:00:00Z", "2026-01-06T12:00:00Z"],
            id="dow-range-2-6-is-mon-fri",
        ),
        pytest.param(
            "0 0 12 ? * MON-FRI",
            "2026-01-02T13:00:00Z",
            ["2026-01-05T12:00:00Z", "2026-01-06T12:00:00Z"],
            id="dow-names",
        ),
        pytest.param(
            "0 0 12 ? * 1,7",
            "2026-01-01T00:00:00Z",
            ["2026-01-03T12:00:00Z", "2026-01-04T12:00:00Z", "2026-01-10T12:00:00Z"],
            id="dow-list-sun-sat",
        ),
        pytest.param(
            "0 0 12 ? * 7-1",
            "2026-01-01T00:00:00Z",
            ["2026-01-03T12:00:00Z", "2026-01-04T12:00:00Z", "2026-01-10T12:00:00Z"],
            id="dow-wrapping-range-sat-sun",
        ),
        pytest.param(
            "0 0 12 ? * L",
            "2026-01-01T00:00:00Z",
            ["2026-01-03T12:00:00Z", "2026-01-10T12:00:00Z"],
            id="dow-L-alone-is-saturday",
        ),
        pytest.param(
            "0 0 12 ? * 6#3",
            "2026-01-01T00:00:00Z",
            ["2026-01-16T12:00:00Z", "2026-02-20T12:00:00Z", "2026-03-20T12:00:00Z"],
            id="third-friday",
        ),
        pytest.param(
            "0 0 12 ? * FRI#3",
            "2026-01-01T00:00:00Z",
            ["2026-01-16T12:00:00Z", "2026-02-20T12:00:00Z"],
            id="third-friday-name",
        ),
        pytest.param(
            "0 0 12 ? * 2#1",
            "2026-01-01T00:00:00Z",
            ["2026-01-05T12:00:00Z", "2026-02-02T12:00:00Z"],
            id="first-monday",
        ),
        pytest.param(
            "0 0 12 ? * 6L",
            "2026-01-01T00:00:00Z",
            ["2026-01-30T12:00:00Z", "2026-02-27T12:00:00Z", "2026-03-27T12:00:00Z"],
            id="last-friday",
        ),
        pytest.param(
            "0 0 12 ? * FRIL",
            "2026-01-01T00:00:00Z",
            ["2026-01-30T12:00:00Z", "2026-02-27T12:00:00Z"],
            id="last-friday-name",
        ),
        pytest.param(
            "0 0 12 L * ?",
            "2026-01-01T00:00:00Z",
            ["2026-01-31T12:00:00Z", "2026-02-28T12:00:00Z", "2026-03-31T12:00:00Z"],
            id="last-day",
        ),
        pytest.param(
            "0 0 12 L * ?",
            "2028-02-01T00:00:00Z",
            ["2028-02-29T12:00:00Z"],
            id="last-day-leap-february",
        ),
        pytest.param(
            "0 0 12 L-2 * ?",
            "2026-01-01T00:00:00Z",
            ["2026-01-29T12:00:00Z", "2026-02-26T12:00:00Z", "2026-03-29T12:00:00Z"],
            id="two-days-before-last",
        ),
        pytest.param(
            "0 0 12 LW * ?",
            "2026-01-01T00:00:00Z",
            [
                "2026-01-30T12:00:00Z",  # Jan 31 is a Saturday
                "2026-02-27T12:00:00Z",  # Feb 28 is a Saturday
                "2026-03-31T12:00:00Z",  # a Tuesday
                "2026-04-30T12:00:00Z",  # a Thursday
                "2026-05-29T12:00:00Z",  # May 31 is a Sunday
            ],
            id="last-weekday",
        ),
        pytest.param(
            "0 0 12 L-1W * ?",
            "2026-05-01T00:00:00Z",
            ["2026-05-29T12:00:00Z"],  # May 30 is a Saturday
            id="L-1W",
        ),
        pytest.param(
            "0 0 12 15W * ?",
            "2026-01-01T00:00:00Z",
            [
                "2026-01-15T12:00:00Z",  # a Thursday
                "2026-02-16T12:00:00Z",  # Feb 15 is a Sunday
                "2026-03-16T12:00:00Z",  # Mar 15 is a Sunday
            ],
            id="nearest-weekday-15W",
        ),
        pytest.param(
            "0 0 12 15W * ?",
            "2026-08-01T00:00:00Z",
            ["2026-08-14T12:00:00Z"],  # Aug 15 is a Saturday
            id="nearest-weekday-saturday",
        ),
        pytest.param(
            "0 0 12 1W * ?",
            "2026-07-31T00:00:00Z",
            ["2026-08-03T12:00:00Z", "2026-09-01T12:00:00Z"],  # Aug 1 is a Saturday
            id="1W-saturday-goes-to-monday-3rd",
        ),
        pytest.param(
            "0 0 12 1W * ?",
            "2026-01-31T00:00:00Z",
            ["2026-02-02T12:00:00Z"],  # Feb 1 is a Sunday
            id="1W-sunday-goes-to-monday-2nd",
        ),
        pytest.param(
            "0 0 12 ? * MON",
            "2026-01-01T00:00:00Z",
            ["2026-01-05T12:00:00Z", "2026-01-12T12:00:00Z"],
            id="day-of-week-only",
        ),
        pytest.param(
            "0 0 22-1 * * ?",
            "2026-01-01T12:00:00Z",
            [
                "2026-01-01T22:00:00Z",
                "2026-01-01T23:00:00Z",
                "2026-01-02T00:00:00Z",
                "2026-01-02T01:00:00Z",
                "2026-01-02T22:00:00Z",
            ],
            id="wrapping-hour-range",
        ),
        pytest.param(
            "0 0 12 1 JAN,JUL ?",
            "2026-01-01T13:00:00Z",
            ["2026-07-01T12:00:00Z", "2027-01-01T12:00:00Z"],
            id="month-names",
        ),
        pytest.param(
            "0 0 12 1 1 ? 2027",
            "2026-01-01T00:00:00Z",
            ["2027-01-01T12:00:00Z"],
            id="single-year-then-never",
        ),
        pytest.param(
            "0 0 12 1 1 ? 2026-2028",
            "2025-06-01T00:00:00Z",
            ["2026-01-01T12:00:00Z", "2027-01-01T12:00:00Z", "2028-01-01T12:00:00Z"],
            id="year-range",
        ),
        pytest.param(
            "0 0 12 1 1 ? 2027,2030",
            "2026-01-01T00:00:00Z",
            ["2027-01-01T12:00:00Z", "2030-01-01T12:00:00Z"],
            id="year-list",
        ),
        pytest.param(
            "0 0 12 ? * 6L 2027",
            "2026-01-01T00:00:00Z",
            ["2027-01-29T12:00:00Z"],
            id="last-friday-in-2027",
        ),
        pytest.param(
            "0 0 12 1 1 ? *",
            "2026-01-01T13:00:00Z",
            ["2027-01-01T12:00:00Z"],
            id="year-star",
        ),
    ],
)
def test_quartz(expression: str, start: str, expected: list[str]) -> None:
    assert fires(expression, start, len(expected)) == expected
    assert parse_schedule(expression).kind == "quartz"


@pytest.mark.parametrize(
    ("expression", "last"),
    [
        ("0 0 12 1 1 ? 2027", utc(2027, 1, 1, 12)),
        ("0 0 12 1 1 ? 2026-2028", utc(2028, 1, 1, 12)),
        ("0 0 12 1 1 ? 2027,2030", utc(2030, 1, 1, 12)),
        ("0 0 12 ? * 6L 2027", utc(2027, 12, 31, 12)),
    ],
)
def test_year_limited_schedule_stops(expression: str, last: datetime) -> None:
    schedule = parse_schedule(expression)
    assert schedule.next_after(last - timedelta(seconds=1)) == last
    assert schedule.next_after(last) is None
    assert schedule.next_after(utc(2031, 1, 1)) is None


# ----------------------------------------------------------------------------------------
# @every, @at and the aliases
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "period"),
    [
        ("@every 90s", timedelta(seconds=90)),
        ("@every 1h30m", timedelta(hours=1, minutes=30)),
        ("@every 500ms", timedelta(milliseconds=500)),
        ("@every 100ms", timedelta(milliseconds=100)),
        ("@every 2d", timedelta(days=2)),
        ("@EVERY 1m30s", timedelta(seconds=90)),
    ],
)
def test_every(expression: str, period: timedelta) -> None:
    schedule = parse_schedule(expression, BERLIN)
    assert schedule.kind == "every"
    assert not schedule.one_shot
    after = utc(2026, 3, 29, 0, 59, 59)  # across a DST change: real-time cadence
    assert schedule.next_after(after) == after + period
    assert chain(schedule, after, 3) == [after + period, after + 2 * period, after + 3 * period]


def test_every_keeps_sub_second_phase() -> None:
    schedule = parse_schedule("@every 1s")
    after = utc(2026, 1, 1) + timedelta(milliseconds=250)
    assert schedule.next_after(after) == utc(2026, 1, 1, 0, 0, 1) + timedelta(milliseconds=250)


@pytest.mark.parametrize(
    ("expression", "timezone", "instant"),
    [
        ("@at 2026-05-01T09:30:00Z", "UTC", utc(2026, 5, 1, 9, 30)),
        ("@at 2026-05-01T09:30:00Z", BERLIN, utc(2026, 5, 1, 9, 30)),
        ("@at 2026-05-01T09:30:00+02:00", "UTC", utc(2026, 5, 1, 7, 30)),
        ("@at 2026-05-01T09:30:00+02:00", NEW_YORK, utc(2026, 5, 1, 7, 30)),
        ("@at 2026-05-01T09:30", BERLIN, utc(2026, 5, 1, 7, 30)),  # CEST
        ("@at 2026-01-15T09:30:00", BERLIN, utc(2026, 1, 15, 8, 30)),  # CET
        ("@at 2026-05-01T09:30", NEW_YORK, utc(2026, 5, 1, 13, 30)),  # EDT
        ("@at 2026-05-01", "UTC", utc(2026, 5, 1)),
        ("@at 2026-03-29T02:30", BERLIN, utc(2026, 3, 29, 1, 0)),  # in the gap
        ("@at 2026-10-25T02:30", BERLIN, utc(2026, 10, 25, 0, 30)),  # first occurrence
    ],
)
def test_at(expression: str, timezone: str, instant: datetime) -> None:
    schedule = parse_schedule(expression, timezone)
    assert schedule.kind == "at"
    assert schedule.one_shot
    assert schedule.next_after(instant - timedelta(days=300)) == instant
    assert schedule.next_after(instant - timedelta(microseconds=1)) == instant
    assert schedule.next_after(instant) is None
    assert schedule.next_after(instant + timedelta(days=1)) is None


def test_at_in_the_past_is_accepted() -> None:
    schedule = parse_schedule("@at 2001-01-01T00:00:00Z")
    assert schedule.next_after(utc(2026, 1, 1)) is None
    assert preview(schedule, utc(2026, 1, 1), 3) == []


@pytest.mark.parametrize(
    ("alias", "start", "expected"),
    [
        ("@yearly", "2026-03-01T00:00:00Z", ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"]),
        ("@annually", "2026-03-01T00:00:00Z", ["2027-01-01T00:00:00Z"]),
        ("@monthly", "2026-03-01T00:00:00Z", ["2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"]),
        ("@weekly", "2026-01-01T00:00:00Z", ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
        ("@daily", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]),
        ("@midnight", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
        ("@hourly", "2026-01-01T00:30:00Z", ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]),
        ("@DAILY", "2026-01-01T00:00:00Z", ["2026-01-02T00:00:00Z"]),
    ],
)
def test_aliases(alias: str, start: str, expected: list[str]) -> None:
    assert fires(alias, start, len(expected)) == expected
    schedule = parse_schedule(alias)
    assert schedule.kind == "cron"
    assert schedule.expression == alias


def test_alias_in_a_timezone() -> None:
    assert fires("@daily", "2026-01-01T00:00:00Z", 2, BERLIN) == [
        "2026-01-01T23:00:00Z",
        "2026-01-02T23:00:00Z",
    ]


# ----------------------------------------------------------------------------------------
# Time zones and the DST rule
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "timezone", "start", "expected"),
    [
        # ---- Europe/Berlin, spring forward 2026-03-29 (02:00-03:00 does not exist)
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-03-28T00:00:00Z",
            ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
            id="berlin-spring-fixed-fires-at-gap-end",
        ),
        pytest.param(
            "0,30 2 * * *",
            BERLIN,
            "2026-03-28T23:00:00Z",
            ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"],
            id="berlin-spring-fixed-slots-in-gap-collapse",
        ),
        pytest.param(
            "0,30 2,3 * * *",
            BERLIN,
            "2026-03-28T23:00:00Z",
            ["2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:00:00Z"],
            id="berlin-spring-fixed-gap-and-03-00-collapse",
        ),
        pytest.param(
            "0 30 2 * * ?",
            BERLIN,
            "2026-03-28T23:00:00Z",
            ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
            id="berlin-spring-fixed-quartz",
        ),
        pytest.param(
            "*/15 * * * *",
            BERLIN,
            "2026-03-29T00:30:00Z",
            ["2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"],
            id="berlin-spring-interval-15-real-minutes",
        ),
        pytest.param(
            "0 * * * *",
            BERLIN,
            "2026-03-28T23:30:00Z",
            ["2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"],
            id="berlin-spring-interval-hourly",
        ),
        # ---- Europe/Berlin, fall back 2026-10-25 (02:00-03:00 happens twice)
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-10-24T00:00:00Z",
            ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
            id="berlin-fall-fixed-fires-once",
        ),
        pytest.param(
            "15 30 2 * * ?",
            BERLIN,
            "2026-10-24T12:00:00Z",
            ["2026-10-25T00:30:15Z", "2026-10-26T01:30:15Z"],
            id="berlin-fall-fixed-quartz-seconds",
        ),
        pytest.param(
            "0 * * * *",
            BERLIN,
            "2026-10-24T22:30:00Z",
            [
                "2026-10-24T23:00:00Z",
                "2026-10-25T00:00:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T02:00:00Z",
            ],
            id="berlin-fall-interval-fires-in-both",
        ),
        pytest.param(
            "*/30 * * * *",
            BERLIN,
            "2026-10-24T23:45:00Z",
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-25T02:00:00Z",
            ],
            id="berlin-fall-interval-30",
        ),
        # ---- America/New_York, spring forward 2026-03-08 (02:00-03:00 does not exist)
        pytest.param(
            "30 2 * * *",
            NEW_YORK,
            "2026-03-07T00:00:00Z",
            ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
            id="new-york-spring-fixed",
        ),
        pytest.param(
            "*/30 * * * *",
            NEW_YORK,
            "2026-03-08T06:15:00Z",
            ["2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"],
            id="new-york-spring-interval",
        ),
        # ---- America/New_York, fall back 2026-11-01 (01:00-02:00 happens twice)
        pytest.param(
            "30 1 * * *",
            NEW_YORK,
            "2026-10-31T00:00:00Z",
            ["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
            id="new-york-fall-fixed",
        ),
        pytest.param(
            "0 * * * *",
            NEW_YORK,
            "2026-11-01T04:30:00Z",
            ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"],
            id="new-york-fall-interval-hourly",
        ),
        pytest.param(
            "*/30 1 * * *",
            NEW_YORK,
            "2026-11-01T04:00:00Z",
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-02T06:00:00Z",
            ],
            id="new-york-fall-interval-minute-step-in-hour-1",
        ),
        # ---- Australia/Lord_Howe, fall back 2026-04-05 (01:30-02:00 happens twice)
        pytest.param(
            "45 1 * * *",
            LORD_HOWE,
            "2026-04-03T00:00:00Z",
            ["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"],
            id="lord-howe-fall-fixed",
        ),
        pytest.param(
            "*/15 * * * *",
            LORD_HOWE,
            "2026-04-04T14:20:00Z",
            [
                "2026-04-04T14:30:00Z",
                "2026-04-04T14:45:00Z",
                "2026-04-04T15:00:00Z",
                "2026-04-04T15:15:00Z",
                "2026-04-04T15:30:00Z",
                "2026-04-04T15:45:00Z",
            ],
            id="lord-howe-fall-interval",
        ),
        pytest.param(
            "0 * * * *",
            LORD_HOWE,
            "2026-04-04T13:30:00Z",
            ["2026-04-04T14:00:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z"],
            id="lord-howe-fall-interval-hourly",
        ),
        # ---- Australia/Lord_Howe, spring forward 2026-10-04 (02:00-02:30 does not exist)
        pytest.param(
            "15 2 * * *",
            LORD_HOWE,
            "2026-10-02T00:00:00Z",
            ["2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
            id="lord-howe-spring-fixed",
        ),
        pytest.param(
            "0,15 2 * * *",
            LORD_HOWE,
            "2026-10-03T12:00:00Z",
            ["2026-10-03T15:30:00Z", "2026-10-04T15:00:00Z"],
            id="lord-howe-spring-fixed-collapse",
        ),
        pytest.param(
            "*/15 * * * *",
            LORD_HOWE,
            "2026-10-03T15:00:00Z",
            ["2026-10-03T15:15:00Z", "2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z"],
            id="lord-howe-spring-interval",
        ),
        pytest.param(
            "0 * * * *",
            LORD_HOWE,
            "2026-10-03T14:00:00Z",
            ["2026-10-03T14:30:00Z", "2026-10-03T16:00:00Z"],
            id="lord-howe-spring-interval-hourly",
        ),
    ],
)
def test_dst_rule(expression: str, timezone: str, start: str, expected: list[str]) -> None:
    assert fires(expression, start, len(expected), timezone) == expected


@pytest.mark.parametrize(
    ("timezone", "start", "end"),
    [
        (BERLIN, utc(2026, 3, 28), utc(2026, 3, 30)),
        (BERLIN, utc(2026, 10, 24), utc(2026, 10, 26)),
        (NEW_YORK, utc(2026, 3, 7), utc(2026, 3, 9)),
        (NEW_YORK, utc(2026, 10, 31), utc(2026, 11, 2)),
        (LORD_HOWE, utc(2026, 4, 3), utc(2026, 4, 6)),
        (LORD_HOWE, utc(2026, 10, 2), utc(2026, 10, 5)),
    ],
)
@pytest.mark.parametrize(
    ("expression", "step"),
    [
        ("*/10 * * * *", timedelta(minutes=10)),
        ("0 */5 * * * ?", timedelta(minutes=5)),
        ("*/20 * * * * ?", timedelta(seconds=20)),
    ],
)
def test_interval_chain_keeps_real_time_cadence(
    timezone: str, start: datetime, end: datetime, expression: str, step: timedelta
) -> None:
    """A chain of next_after through a transition: strictly increasing, nothing skipped or
    repeated (each step-aligned instant appears exactly once)."""
    schedule = parse_schedule(expression, timezone)
    got = []
    current: datetime | None = start
    while True:
        assert current is not None
        current = schedule.next_after(current)
        assert current is not None
        if current > end:
            break
        got.append(current)
    expected = [start + step * i for i in range(1, (end - start) // step + 1)]
    assert got == expected


@pytest.mark.parametrize(
    ("timezone", "start", "days"),
    [
        (BERLIN, utc(2026, 3, 26), 6),
        (BERLIN, utc(2026, 10, 22), 6),
        (NEW_YORK, utc(2026, 3, 6), 5),
        (NEW_YORK, utc(2026, 10, 30), 5),
        (LORD_HOWE, utc(2026, 4, 2), 5),
        (LORD_HOWE, utc(2026, 10, 1), 5),
    ],
)
@pytest.mark.parametrize("expression", ["30 2 * * *", "0 45 1 * * ?", "15 2 * * *"])
def test_fixed_chain_fires_once_per_local_day(
    timezone: str, start: datetime, days: int, expression: str
) -> None:
    schedule = parse_schedule(expression, timezone)
    got = chain(schedule, start, days)
    assert all(a < b for a, b in zip(got, got[1:], strict=False))
    local_dates = [g.astimezone(ZoneInfo(timezone)).date() for g in got]
    assert len(set(local_dates)) == days
    first = local_dates[0]
    assert local_dates == [first + timedelta(days=i) for i in range(days)]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # after = 02:30 CEST (first occurrence): next is 02:45 CEST
        ("*/15 * * * *", datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo(BERLIN)), "00:45"),
        # after = 02:30 CET (second occurrence): next is 02:45 CET, not back to CEST
        (
            "*/15 * * * *",
            datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo(BERLIN)),
            "01:45",
        ),
        # after = 02:50 CEST: the next slot is 02:00 CET (the second 02:00)
        ("*/15 * * * *", datetime(2026, 10, 25, 2, 50, tzinfo=ZoneInfo(BERLIN)), "01:00"),
        # fixed job seen from the second occurrence: does not fire again that day
        ("30 2 * * *", datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=ZoneInfo(BERLIN)), None),
        # fixed job before the first occurrence
        ("30 2 * * *", datetime(2026, 10, 25, 2, 10, tzinfo=ZoneInfo(BERLIN)), "00:30"),
    ],
)
def test_after_inside_repeated_hour(expression: str, after: datetime, expected: str | None) -> None:
    schedule = parse_schedule(expression, BERLIN)
    result = schedule.next_after(after)
    assert result is not None
    if expected is None:
        assert result == utc(2026, 10, 26, 1, 30)  # 02:30 CET the next day
    else:
        hour, minute = map(int, expected.split(":"))
        assert result == utc(2026, 10, 25, hour, minute)


def test_timezone_default_and_name() -> None:
    assert parse_schedule("0 0 * * *").timezone == "UTC"
    assert parse_schedule("0 0 * * *", BERLIN).timezone == BERLIN


# ----------------------------------------------------------------------------------------
# preview
# ----------------------------------------------------------------------------------------


def test_preview_in_schedule_timezone_with_offsets() -> None:
    schedule = parse_schedule("0 9 * * *", BERLIN)
    got = preview(schedule, utc(2026, 3, 27), 3)
    assert [str(g) for g in got] == [
        "2026-03-27 09:00:00+01:00",
        "2026-03-28 09:00:00+01:00",
        "2026-03-29 09:00:00+02:00",
    ]
    assert all(getattr(g.tzinfo, "key", None) == BERLIN for g in got)
    assert [g.astimezone(UTC) for g in got] == [
        utc(2026, 3, 27, 8),
        utc(2026, 3, 28, 8),
        utc(2026, 3, 29, 7),
    ]


def test_preview_gap_fire_and_lord_howe_offsets() -> None:
    got = preview(parse_schedule("15 2 * * *", LORD_HOWE), utc(2026, 10, 2), 3)
    assert [str(g) for g in got] == [
        "2026-10-03 02:15:00+10:30",
        "2026-10-04 02:30:00+11:00",
        "2026-10-05 02:15:00+11:00",
    ]


def test_preview_stops_when_schedule_ends() -> None:
    schedule = parse_schedule("0 0 12 1 1 ? 2026-2027")
    assert len(preview(schedule, utc(2025, 1, 1), 10)) == 2
    assert preview(parse_schedule("@every 1h", NEW_YORK), utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 2),
    ]
    assert preview(schedule, utc(2025, 1, 1), 0) == []


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "timezone", "field", "fragment"),
    [
        ("1 2 3 4", "UTC", "schedule", "expected 5 (cron) or 6-7 (Quartz) fields, got 4"),
        ("0 0 0 1 1 ? 2026 x", "UTC", "schedule", "got 8"),
        ("", "UTC", "schedule", "empty"),
        ("   ", "UTC", "schedule", "empty"),
        ("0 0 25 * * ?", "UTC", "schedule", "field 3 (hour) value 25 is out of range 0-23"),
        ("0 25 * * *", "UTC", "schedule", "field 2 (hour) value 25 is out of range 0-23"),
        ("60 * * * *", "UTC", "schedule", "field 1 (minute) value 60 is out of range 0-59"),
        ("60 * * * * ?", "UTC", "schedule", "field 1 (second) value 60 is out of range 0-59"),
        ("0 0 32 * *", "UTC", "schedule", "field 3 (day-of-month) value 32 is out of range"),
        ("0 0 0 * *", "UTC", "schedule", "field 3 (day-of-month) value 0 is out of range 1-31"),
        ("0 0 1 13 *", "UTC", "schedule", "field 4 (month) value 13 is out of range 1-12"),
        ("0 0 * * 8", "UTC", "schedule", "field 5 (day-of-week) value 8 is out of range 0-7"),
        ("0 0 0 ? * 0", "UTC", "schedule", "field 6 (day-of-week) value 0 is out of range 1-7"),
        ("0 0 0 1 1 ? 2100", "UTC", "schedule", "field 7 (year) value 2100 is out of range"),
        ("0 0 0 1 1 ? 2030-2026", "UTC", "schedule", "reversed"),
        ("0 0 1 FOO *", "UTC", "schedule", 'field 4 (month) value "FOO" is not a number'),
        ("0 0 * * FUN", "UTC", "schedule", "day name"),
        ("H * * * *", "UTC", "schedule", 'value "H" is not a number'),
        ("*/0 * * * *", "UTC", "schedule", "step 0"),
        ("1,,2 * * * *", "UTC", "schedule", "empty list item"),
        ("1-2-3 * * * *", "UTC", "schedule", "is not valid"),
        ("? * * * *", "UTC", "schedule", '"?" is allowed only'),
        # cron refuses a reversed range ("bad minute"); Quartz wraps it (its syntax).
        ("0 22-1 * * *", "UTC", "schedule", 'range "22-1" is reversed: cron does not wrap a '
         'range; write "22-23,0-1"'),
        ("0 0 * * FRI-MON", "UTC", "schedule", 'range "FRI-MON" is reversed'),
        # Quartz: "Increment > 60", "Increment > 24"; one day field is "?".
        ("0/60 * * * * ?", "UTC", "schedule", 'field 1 (second) step 60 in "0/60" is larger '
         'than Quartz allows in this field (at most 59): it would fire only at 0; write "0"'),
        ("0 0 */25 * * ?", "UTC", "schedule", "(at most 23)"),
        ("0 0 0 1 1/13 ?", "UTC", "schedule", "(at most 12)"),
        ("0 0 0 ? * 1/8", "UTC", "schedule", "(at most 7)"),
        ("0 0 12 ? * ?", "UTC", "schedule", 'for every day write "0 0 12 * * ?"'),
        ("0 0 12 * * *", "UTC", "schedule", 'not both (got "*" and "*"): the other is "?"; '
         'write "0 0 12 * * ?"'),
        ("0 0 12 * * MON", "UTC", "schedule", 'write "0 0 12 ? * MON"'),
        ("0 0 12 13 * FRI", "UTC", "schedule", "Quartz cannot combine them"),
        ("0 0 0 30 2 ?", "UTC", "schedule", "day-of-month 30 never occurs in February"),
        ("0 0 31 4 *", "UTC", "schedule", "day-of-month 31 never occurs in April"),
        ("0 0 31 4,6 *", "UTC", "schedule", "never occurs in April or June"),
        ("0 0 0 29 2 ? 2027", "UTC", "schedule", "never fires"),
        ("0 0 0 ? 2 2#5 2027", "UTC", "schedule", "never fires"),
        ("0 0 0 L-30 2 ?", "UTC", "schedule", "never fires"),
        ("0 0 0 ? * 6#6", "UTC", "schedule", "between 1 and 5"),
        ("0 0 0 L-31 * ?", "UTC", "schedule", "between 1 and 30"),
        ("0 0 0 L,15 * ?", "UTC", "schedule", "must be the only item"),
        ("0 0 0 ? * 6L,2", "UTC", "schedule", "must be the only item"),
        ("0 0 L * *", "UTC", "schedule", "only in 6/7-field Quartz"),
        ("0 0 15W * *", "UTC", "schedule", "only in 6/7-field Quartz"),
        ("0 0 * * 5#3", "UTC", "schedule", "only in 6/7-field Quartz"),
        ("0 0 * * * *", "Mars/Olympus", "timezone", 'unknown timezone "Mars/Olympus"'),
        ("0 0 * * *", "", "timezone", "empty"),
        ("0 0 * * *", "../../etc/passwd", "timezone", "unknown timezone"),
        ("@fortnightly", "UTC", "schedule", 'unknown schedule form "@fortnightly"'),
        ("@reboot", "UTC", "schedule", "@every <duration>, @at <ISO-8601 instant>"),
        ("@daily 5", "UTC", "schedule", "takes no argument"),
        ("@every", "UTC", "schedule", "needs a duration"),
        ("@every 5x", "UTC", "schedule", 'invalid duration "5x"'),
        ("@every 1m1h", "UTC", "schedule", "largest first"),
        ("@every 99ms", "UTC", "schedule", "at least 100ms, got 99ms"),
        ("@every 0s", "UTC", "schedule", "at least 100ms"),
        ("@at", "UTC", "schedule", "needs an instant"),
        ("@at tomorrow", "UTC", "schedule", 'invalid @at instant "tomorrow"'),
        ("@every 3000000d", "UTC", "schedule", "at most 36500d (100 years)"),
        ("@every 36501d", "UTC", "schedule", "at most 36500d"),
        ("@at 9999-12-31T23:00-05:00", "UTC", "schedule", "out of range"),
    ],
)
def test_validation_errors(expression: str, timezone: str, field: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_schedule(expression, timezone)
    assert info.value.field == field
    assert fragment in info.value.reason
    assert "croniter" not in info.value.reason.lower()
    assert "Traceback" not in info.value.reason


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 31 * *",  # some months have a 31st
        "0 0 29 2 *",  # leap years
        "0 0 0 29 2 ? 2028",  # a leap year
        "0 0 30 2 1",  # Vixie OR: Mondays in February still fire
        "0 0 0 ? 2 2#5",  # a fifth Monday in February: 2016, 2044, ...
        "0 0 0 L-30 * ?",  # the 1st of 31-day months
        "0 0 0 1 1 ? 1999",  # only in the past: accepted, like a past @at
    ],
)
def test_rare_but_possible_expressions_are_accepted(expression: str) -> None:
    parse_schedule(expression)


def test_schedule_is_immutable_and_comparable() -> None:
    schedule = parse_schedule("  0 0 * * *  ", BERLIN)
    assert schedule.expression == "0 0 * * *"
    with pytest.raises(AttributeError):
        schedule.expression = "* * * * *"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        schedule._kind = "every"
    assert schedule == parse_schedule("0 0 * * *", BERLIN)
    assert schedule != parse_schedule("0 0 * * *", "UTC")
    assert hash(schedule) == hash(parse_schedule("0 0 * * *", BERLIN))
    assert "0 0 * * *" in repr(schedule)
    clone = pickle.loads(pickle.dumps(schedule))
    assert clone == schedule
    assert clone.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 23)
    assert copy.deepcopy(schedule) == schedule


def test_far_future_returns_none() -> None:
    assert parse_schedule("0 0 * * *", BERLIN).next_after(utc(9999, 12, 31, 23)) is None
    assert parse_schedule("@every 1d").next_after(utc(9999, 12, 31, 23)) is None


@pytest.mark.parametrize("expression", ["@every 36500d", "0 0 * * *", "0 0 0 L * ? *"])
def test_planning_near_year_9999_never_raises(expression: str) -> None:
    """The poison job of issue 10: the longest accepted interval planned from a late
    instant ran past year 9999 and the OverflowError stopped the node. Planning now says
    "no further fire" instead, for every policy, also when the node was down for years."""
    schedule = parse_schedule(expression)
    for after, now in [
        (utc(9950, 1, 1), utc(9950, 1, 2)),
        (utc(9998, 11, 28), utc(9999, 12, 31, 23)),
        (utc(9999, 12, 30), utc(9999, 12, 31, 23)),
    ]:
        for policy in MisfirePolicy:
            plan = plan_next(schedule, after=after, now=now, policy=policy, grace_s=0, max_missed=3)
            assert plan.next_fire_at is None or plan.next_fire_at <= utc(9999, 12, 31, 23, 59)
    assert len(preview(schedule, utc(9999, 12, 1), 5)) <= 5


# ----------------------------------------------------------------------------------------
# parse_duration
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("500ms", timedelta(milliseconds=500)),
        ("1m30s", timedelta(seconds=90)),
        ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
        (" 1h 30m ", timedelta(hours=1, minutes=30)),
        ("0s", timedelta(0)),
        ("1H", timedelta(hours=1)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "  ", "90", "s", "1.5h", "-5s", "5x", "1m1h", "1s1s", "1 h x", "1w"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


# ----------------------------------------------------------------------------------------
# plan_next
# ----------------------------------------------------------------------------------------

EVERY_MINUTE = parse_schedule("* * * * *")


def test_plan_no_misfire() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 0, 30),
        policy=MisfirePolicy.FIRE_ONCE,
        grace_s=0,
    )
    assert plan == FirePlan(next_fire_at=utc(2026, 1, 1, 10, 1), missed=[], missed_more=0)


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_plan_late_but_within_grace_is_not_a_misfire(policy: MisfirePolicy) -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 1, 20),
        policy=policy,
        grace_s=30,
    )
    assert plan == FirePlan(next_fire_at=utc(2026, 1, 1, 10, 1), missed=[], missed_more=0)


def test_plan_slot_exactly_at_threshold_is_misfired() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 1, 30),
        policy=MisfirePolicy.SKIP,
        grace_s=30,
    )
    assert plan == FirePlan(
        next_fire_at=utc(2026, 1, 1, 10, 2), missed=[utc(2026, 1, 1, 10, 1)], missed_more=0
    )


def test_plan_fire_once() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 5, 30),
        policy=MisfirePolicy.FIRE_ONCE,
        grace_s=0,
    )
    assert plan.next_fire_at == utc(2026, 1, 1, 10, 5)
    assert plan.missed == [utc(2026, 1, 1, 10, m) for m in (1, 2, 3, 4)]
    assert plan.missed_more == 0


def test_plan_skip() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 5, 30),
        policy=MisfirePolicy.SKIP,
        grace_s=0,
    )
    assert plan.next_fire_at == utc(2026, 1, 1, 10, 6)
    assert plan.missed == [utc(2026, 1, 1, 10, m) for m in (1, 2, 3, 4, 5)]
    assert plan.missed_more == 0


def test_plan_skip_with_grace_next_is_first_slot_after_threshold() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 5, 30),
        policy=MisfirePolicy.SKIP,
        grace_s=90,  # threshold 10:04:00
    )
    assert plan.next_fire_at == utc(2026, 1, 1, 10, 5)  # on time (within grace): fire now
    assert plan.missed == [utc(2026, 1, 1, 10, m) for m in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    ("policy", "missed_more", "next_fire_at"),
    [
        (MisfirePolicy.FIRE_ONCE, 2, utc(2026, 1, 1, 10, 5)),
        (MisfirePolicy.SKIP, 3, utc(2026, 1, 1, 10, 6)),
    ],
)
def test_plan_max_missed(policy: MisfirePolicy, missed_more: int, next_fire_at: datetime) -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 5, 30),
        policy=policy,
        grace_s=0,
        max_missed=2,
    )
    assert plan.missed == [utc(2026, 1, 1, 10, 1), utc(2026, 1, 1, 10, 2)]
    assert plan.missed_more == missed_more
    assert plan.next_fire_at == next_fire_at


@pytest.mark.parametrize("expression", ["* * * * * ?", "@every 1s"])
@pytest.mark.parametrize(
    ("policy", "next_fire_at", "missed_more"),
    [
        # 86,400 misfired slots: 00:00:01 .. 2026-05-02 00:00:00
        (MisfirePolicy.FIRE_ONCE, utc(2026, 5, 2), 86_400 - 1 - 100),
        (MisfirePolicy.SKIP, utc(2026, 5, 2, 0, 0, 1), 86_400 - 100),
    ],
)
def test_plan_day_long_outage_of_every_second_job(
    expression: str, policy: MisfirePolicy, next_fire_at: datetime, missed_more: int
) -> None:
    schedule = parse_schedule(expression)
    plan = plan_next(
        schedule,
        after=utc(2026, 5, 1),
        now=utc(2026, 5, 2),
        policy=policy,
        grace_s=0,
    )
    assert plan.next_fire_at == next_fire_at
    assert len(plan.missed) == 100  # only max_missed are materialised
    assert plan.missed[0] == utc(2026, 5, 1, 0, 0, 1)
    assert plan.missed[-1] == utc(2026, 5, 1, 0, 1, 40)
    assert plan.missed_more == missed_more


@pytest.mark.parametrize(
    ("expression", "timezone", "after", "now", "total"),
    [
        # an interval job keeps real-time cadence: 24h of seconds, fall back included
        ("* * * * * ?", BERLIN, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12), 86_400),
        # spring forward: 24 real hours are still 86,400 real seconds
        ("* * * * * ?", BERLIN, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12), 86_400),
        # hourly in Berlin over the fall-back day: 25 fires in 25 real hours
        ("0 * * * *", BERLIN, utc(2026, 10, 24, 22), utc(2026, 10, 25, 23), 25),
        # fixed 02:30 over a week containing both kinds of day: once per day
        ("30 2 * * *", BERLIN, utc(2026, 10, 21), utc(2026, 10, 28), 7),
        ("30 2 * * *", BERLIN, utc(2026, 3, 25), utc(2026, 4, 1), 7),
        ("15 2 * * *", LORD_HOWE, utc(2026, 9, 30), utc(2026, 10, 7), 7),
        # Lord Howe fall-back morning, every 15 min from 00:00 to 03:00 local (+11 then +10:30):
        # 13:00Z .. 16:30Z = 3.5 real hours = 14 slots after 13:00Z
        ("*/15 * * * *", LORD_HOWE, utc(2026, 4, 4, 13), utc(2026, 4, 4, 16, 30), 14),
    ],
)
def test_plan_counts_exactly_across_dst(
    expression: str, timezone: str, after: datetime, now: datetime, total: int
) -> None:
    plan = plan_next(
        parse_schedule(expression, timezone),
        after=after,
        now=now,
        policy=MisfirePolicy.SKIP,
        grace_s=0,
        max_missed=3,
    )
    assert len(plan.missed) + plan.missed_more == total


def test_plan_at_misfired() -> None:
    schedule = parse_schedule("@at 2026-05-01T09:00:00Z")
    fire_once = plan_next(
        schedule,
        after=utc(2026, 1, 1),
        now=utc(2026, 5, 1, 10),
        policy=MisfirePolicy.FIRE_ONCE,
        grace_s=60,
    )
    assert fire_once == FirePlan(next_fire_at=utc(2026, 5, 1, 9), missed=[], missed_more=0)
    skip = plan_next(
        schedule,
        after=utc(2026, 1, 1),
        now=utc(2026, 5, 1, 10),
        policy=MisfirePolicy.SKIP,
        grace_s=60,
    )
    assert skip == FirePlan(next_fire_at=None, missed=[utc(2026, 5, 1, 9)], missed_more=0)
    done = plan_next(
        schedule,
        after=utc(2026, 5, 1, 9),
        now=utc(2026, 5, 1, 10),
        policy=MisfirePolicy.SKIP,
        grace_s=60,
    )
    assert done == FirePlan(next_fire_at=None, missed=[], missed_more=0)


def test_plan_every_arithmetic() -> None:
    schedule = parse_schedule("@every 90s")
    after = utc(2026, 1, 1, 12)
    plan = plan_next(
        schedule,
        after=after,
        now=after + timedelta(hours=1, seconds=10),
        policy=MisfirePolicy.FIRE_ONCE,
        grace_s=0,
        max_missed=3,
    )
    # 40 slots in the hour (every 90s); the 40th (13:00:00) fires late
    assert plan.next_fire_at == utc(2026, 1, 1, 13)
    assert plan.missed == [after + timedelta(seconds=90 * i) for i in (1, 2, 3)]
    assert plan.missed_more == 39 - 3


def test_plan_cron_fire_once_latest_slot_far_back() -> None:
    # a monthly job down for a year: the latest misfired slot is found without walking back
    schedule = parse_schedule("0 0 1 * *")
    plan = plan_next(
        schedule,
        after=utc(2025, 1, 1),
        now=utc(2026, 1, 20),
        policy=MisfirePolicy.FIRE_ONCE,
        grace_s=0,
        max_missed=5,
    )
    assert plan.next_fire_at == utc(2026, 1, 1)
    assert plan.missed == [utc(2025, m, 1) for m in (2, 3, 4, 5, 6)]
    assert plan.missed_more == 12 - 1 - 5


def test_plan_accepts_policy_string_and_rejects_bad_input() -> None:
    plan = plan_next(
        EVERY_MINUTE,
        after=utc(2026, 1, 1, 10, 0),
        now=utc(2026, 1, 1, 10, 2, 30),
        policy=MisfirePolicy("skip"),
        grace_s=0,
    )
    assert plan.next_fire_at == utc(2026, 1, 1, 10, 3)
    with pytest.raises(ValueError, match="grace_s"):
        plan_next(
            EVERY_MINUTE,
            after=utc(2026, 1, 1),
            now=utc(2026, 1, 2),
            policy=MisfirePolicy.SKIP,
            grace_s=-1,
        )
    with pytest.raises(ValueError, match="max_missed"):
        plan_next(
            EVERY_MINUTE,
            after=utc(2026, 1, 1),
            now=utc(2026, 1, 2),
            policy=MisfirePolicy.SKIP,
            grace_s=0,
            max_missed=-1,
        )
    with pytest.raises(ValueError, match="timezone-aware"):
        plan_next(
            EVERY_MINUTE,
            after=utc(2026, 1, 1),
            now=utc(2026, 1, 2).replace(tzinfo=None),
            policy=MisfirePolicy.SKIP,
            grace_s=0,
        )


def test_plan_schedule_that_ends_during_outage() -> None:
    schedule = parse_schedule("0 0 12 1 1 ? 2026-2027")
    plan = plan_next(
        schedule,
        after=utc(2025, 6, 1),
        now=utc(2028, 6, 1),
        policy=MisfirePolicy.SKIP,
        grace_s=0,
    )
    assert plan == FirePlan(
        next_fire_at=None, missed=[utc(2026, 1, 1, 12), utc(2027, 1, 1, 12)], missed_more=0
    )


# ----------------------------------------------------------------------------------------
# Purity
# ----------------------------------------------------------------------------------------


def test_module_reads_no_clock_and_no_database() -> None:
    import quartzlite.schedule as module

    source = Path(module.__file__).read_text()
    forbidden = (".now(", "utcnow", "time.time(", "monotonic(", "time.sleep", "import time")
    for text in (*forbidden, "sqlalchemy", "pymysql"):
        assert text not in source
