"""Exclusion calendars: their rules checked, the engine (excluded, excluded_until,
next_excluded) and a job's slots without the excluded ones (next_slot, preview,
plan_next), in zones and across their DST days. No database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from quartzlite.enums import MisfirePolicy, OverrunPolicy
from quartzlite.errors import ValidationError
from quartzlite.models import CalendarRules
from quartzlite.schedule import (
    ExclusionError,
    compile_calendar,
    next_slot,
    parse_rules,
    parse_schedule,
    plan_next,
    preview,
)
from quartzlite.schedule.calendars import MAX_SKIPS, Calendar, _ExcludingTiming


def cal(timezone: str = "UTC", name: str = "c", **rules: Any) -> Calendar:
    return compile_calendar(name, timezone, parse_rules(rules))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


SECOND = timedelta(seconds=1)
US = timedelta(microseconds=1)


# -- rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "field", "reason"),
    [
        ({}, "rules", "at least one rule"),
        ({"dates": []}, "rules", "at least one rule"),
        ({"holidays": ["2026-12-25"]}, "rules.holidays", "unknown rule"),
        ({"dates": "2026-12-25"}, "rules.dates", "must be a list"),
        ({"dates": ["2026-12-25", "2026-13-01"]}, "rules.dates[1]", "not a date"),
        ({"dates": ["2026-02-30"]}, "rules.dates[0]", "not a date"),
        ({"dates": ["20261225"]}, "rules.dates[0]", "YYYY-MM-DD"),
        ({"dates": [20261225]}, "rules.dates[0]", "YYYY-MM-DD"),
        ({"dates": ["1969-12-31"]}, "rules.dates[0]", "1970-9997"),
        ({"yearly": ["13-01"]}, "rules.yearly[0]", "not a day of the year"),
        ({"yearly": ["02-30"]}, "rules.yearly[0]", "not a day of the year"),
        ({"yearly": ["2-3"]}, "rules.yearly[0]", "MM-DD"),
        ({"ranges": [{"from": "2026-05-03", "to": "2026-05-01"}]}, "rules.ranges[0]", "after to"),
        ({"ranges": [{"from": "2026-05-03"}]}, "rules.ranges[0].to", "required"),
        ({"ranges": [{"from": "2026-05-03", "to": "2026-05-04", "x": 1}]}, "rules.ranges[0].x",
         "unknown key"),
        ({"ranges": ["2026-05-01..2026-05-03"]}, "rules.ranges[0]", "must be an object"),
        ({"ranges": [{"from": "2026-05-01", "to": "x"}]}, "rules.ranges[0].to", "YYYY-MM-DD"),
        ({"windows": ["@every 1s"]}, "rules.windows[0]", "not every"),
        ({"windows": ["* * * * *", "@at 2030-01-01T00:00:00Z"]}, "rules.windows[1]", "not at"),
        ({"windows": ["* 25 * * *"]}, "rules.windows[0]", "out of range 0-23"),
        ({"windows": [""]}, "rules.windows[0]", "empty"),
        ({"windows": [5]}, "rules.windows[0]", "not an integer"),
        ({"dates": ["2026-01-01"] * 1001}, "rules.dates", "at most 1000"),
    ],
)
def test_bad_rules_are_refused_naming_the_field_and_the_reason(
    rules: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_rules(rules)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_rules_are_normalised_sorted_without_repeats() -> None:
    rules = parse_rules({
        "dates": ["2026-12-26", "2026-12-25", "2026-12-26"],
        "yearly": ["12-25", "01-01", "02-29"],
        "ranges": [{"from": "2026-08-10", "to": "2026-08-15"}, {"from": "2026-08-01", "to": "2026-08-02"}],
        "windows": [" * * 0-7 ? * *", "30 9 * * *"],
    })
    assert rules == CalendarRules(
        dates=("2026-12-25", "2026-12-26"),
        yearly=("01-01", "02-29", "12-25"),
        ranges=(("2026-08-01", "2026-08-02"), ("2026-08-10", "2026-08-15")),
        windows=("* * 0-7 ? * *", "30 9 * * *"),
    )
    assert parse_rules(rules) == rules  # a parsed one passes unchanged


# -- each rule kind -----------------------------------------------------------------------


def test_a_date_excludes_its_whole_local_day_in_the_calendars_zone() -> None:
    berlin = cal("Europe/Berlin", dates=["2026-12-25"])
    start, end = at("2026-12-24T23:00:00Z"), at("2026-12-25T23:00:00Z")  # CET = UTC+1

    assert not berlin.excluded(start - US)
    assert berlin.excluded(start)
    assert berlin.excluded(end - US)
    assert not berlin.excluded(end)
    assert berlin.excluded_until(start) == end
    assert berlin.excluded_until(at("2026-12-25T12:00:00Z")) == end
    assert berlin.excluded_until(end) is None
    assert berlin.next_excluded(at("2026-12-01T00:00:00Z")) <= start  # type: ignore[operator]


def test_yearly_dates_repeat_every_year_and_02_29_only_in_leap_years() -> None:
    annual = cal(yearly=["12-25", "02-29"])

    for year in (2026, 2027, 2040):
        assert annual.excluded(datetime(year, 12, 25, 8, tzinfo=UTC))
        assert not annual.excluded(datetime(year, 12, 26, 8, tzinfo=UTC))
    assert annual.excluded(datetime(2028, 2, 29, 1, tzinfo=UTC))
    assert not annual.excluded(datetime(2027, 3, 1, 1, tzinfo=UTC))
    assert annual.excluded_until(datetime(2028, 2, 29, 1, tzinfo=UTC)) == datetime(2028, 3, 1, tzinfo=UTC)


def test_a_range_is_inclusive_and_skipped_in_one_step() -> None:
    summer = cal(ranges=[{"from": "2026-08-01", "to": "2026-08-15"}])

    assert not summer.excluded(at("2026-07-31T23:59:59Z"))
    assert summer.excluded(at("2026-08-01T00:00:00Z"))
    assert summer.excluded(at("2026-08-15T23:59:59Z"))
    assert not summer.excluded(at("2026-08-16T00:00:00Z"))
    assert summer.excluded_until(at("2026-08-03T10:00:00Z")) == at("2026-08-16T00:00:00Z")
    daily = parse_schedule("0 12 * * *")
    assert next_slot(daily, at("2026-07-31T12:00:00Z"), calendars=[summer]) == at("2026-08-16T12:00:00Z")


def test_day_rules_that_touch_are_one_period() -> None:
    both = cal(dates=["2026-05-01"], yearly=["05-02"], ranges=[{"from": "2026-05-03", "to": "2026-05-04"}])
    assert both.excluded_until(at("2026-05-01T06:00:00Z")) == at("2026-05-05T00:00:00Z")


def test_a_five_field_window_excludes_whole_minutes() -> None:
    window = cal(windows=["30 9 * * MON-FRI"])  # 2026-05-01 is a Friday

    assert window.excluded(at("2026-05-01T09:30:00Z"))
    assert window.excluded(at("2026-05-01T09:30:59.999999Z"))
    assert not window.excluded(at("2026-05-01T09:31:00Z"))
    assert not window.excluded(at("2026-05-02T09:30:00Z"))  # Saturday
    assert window.excluded_until(at("2026-05-01T09:30:20Z")) == at("2026-05-01T09:31:00Z")


def test_a_quartz_window_excludes_whole_seconds() -> None:
    window = cal(windows=["15-16 30 9 ? * *"])

    assert not window.excluded(at("2026-05-01T09:30:14.999999Z"))
    assert window.excluded(at("2026-05-01T09:30:15Z"))
    assert window.excluded(at("2026-05-01T09:30:16.5Z"))
    assert not window.excluded(at("2026-05-01T09:30:17Z"))
    assert window.excluded_until(at("2026-05-01T09:30:15.2Z")) == at("2026-05-01T09:30:17Z")
    every = parse_schedule("@every 1s")
    assert next_slot(every, at("2026-05-01T09:30:14Z"), calendars=[window]) == at("2026-05-01T09:30:17Z")


def test_an_hours_window_is_skipped_in_one_step() -> None:
    nights = cal("Europe/Paris", windows=["* * 0-7 ? * *"])

    assert nights.excluded(at("2026-05-01T03:00:00Z"))  # 05:00 CEST
    assert nights.excluded_until(at("2026-04-30T22:00:00Z")) == at("2026-05-01T06:00:00Z")
    assert not nights.excluded(at("2026-05-01T06:00:00Z"))


def test_several_calendars_exclude_their_union() -> None:
    daily = parse_schedule("0 12 * * *")
    one, two = cal(name="a", dates=["2026-05-02"]), cal(name="b", dates=["2026-05-03"])
    assert next_slot(daily, at("2026-05-01T12:00:00Z"), calendars=[one, two]) == at("2026-05-04T12:00:00Z")


# -- zones and DST --------------------------------------------------------------------------


def test_excluded_days_on_the_dst_days_of_the_zone_last_23_and_25_hours() -> None:
    spring = cal("Europe/Berlin", dates=["2026-03-29"])
    autumn = cal("Europe/Berlin", dates=["2026-10-25"])

    assert spring.excluded_until(at("2026-03-28T23:00:00Z")) == at("2026-03-29T22:00:00Z")
    assert autumn.excluded_until(at("2026-10-24T22:00:00Z")) == at("2026-10-25T23:00:00Z")
    hourly = parse_schedule("0 * * * *")
    assert next_slot(hourly, at("2026-03-28T22:30:00Z"), calendars=[spring]) == at("2026-03-29T22:00:00Z")
    assert next_slot(hourly, at("2026-10-24T21:30:00Z"), calendars=[autumn]) == at("2026-10-25T23:00:00Z")
    # Nothing excluded is fired and nothing else is lost: 24 - 1 (the day) slots fire.
    slots = preview(hourly, at("2026-03-28T22:30:00Z"), 2, calendars=[spring])
    assert [s.astimezone(UTC) for s in slots] == [at("2026-03-29T22:00:00Z"), at("2026-03-29T23:00:00Z")]


def test_a_window_excludes_both_occurrences_of_a_repeated_hour() -> None:
    two = cal("Europe/Berlin", windows=["* 2 * * *"])
    hourly = parse_schedule("30 * * * *")  # UTC job: 00:30Z is 02:30 CEST, 01:30Z is 02:30 CET

    assert two.excluded(at("2026-10-25T00:30:00Z"))
    assert two.excluded(at("2026-10-25T01:30:00Z"))
    assert next_slot(hourly, at("2026-10-24T23:30:00Z"), calendars=[two]) == at("2026-10-25T02:30:00Z")
    timing = _ExcludingTiming(hourly._timing, two)
    assert timing.count(at("2026-10-24T23:00:00Z"), at("2026-10-25T03:00:00Z")) == 2  # 23:30Z, 02:30Z


@pytest.mark.parametrize(
    ("expression", "timezone", "rules", "lo", "hi"),
    [
        ("*/10 * * * *", "Europe/Berlin", {"windows": ["* 2-3 * * *"], "dates": ["2026-10-26"]},
         "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z"),
        ("0 */20 * ? * *", "America/New_York", {"windows": ["* 0-5 1 ? * *", "7 * * * *"]},
         "2026-03-07T00:00:00Z", "2026-03-09T12:00:00Z"),
        ("17 * * * *", "Australia/Lord_Howe", {"yearly": ["04-05"], "windows": ["* 1 * * *"]},
         "2026-04-03T00:00:00Z", "2026-04-07T00:00:00Z"),
        ("@every 7m", "UTC", {"windows": ["* 3 * * *"], "ranges": [{"from": "2026-05-02", "to": "2026-05-02"}]},
         "2026-05-01T00:00:00Z", "2026-05-04T00:00:00Z"),
    ],
)
def test_count_and_latest_see_only_the_slots_that_are_not_excluded(
    expression: str, timezone: str, rules: dict[str, Any], lo: str, hi: str
) -> None:
    """Checked against a brute force: every slot, filtered with excluded()."""
    schedule = parse_schedule(expression)
    calendar = cal(timezone, **rules)
    low, high = at(lo), at(hi)
    allowed: list[datetime] = []
    current = schedule._timing.next_after(low)
    while current is not None and current <= high:
        if not calendar.excluded(current):
            allowed.append(current)
        current = schedule._timing.next_after(current)
    timing = _ExcludingTiming(schedule._timing, calendar)

    assert timing.count(low, high) == len(allowed)
    assert timing.latest(low, high) == allowed[-1]
    found, current = [], timing.next_after(low)
    while current is not None and current <= high:
        found.append(current)
        current = timing.next_after(current)
    assert found == allowed


# -- speed and the cap ---------------------------------------------------------------------------


class Counting(Calendar):
    """A calendar that counts the engine's questions."""

    def __init__(self, inner: Calendar) -> None:
        super().__init__(inner.name, inner._rules)
        self.asked = 0

    def excluded_until(self, instant: datetime) -> datetime | None:
        self.asked += 1
        return super().excluded_until(instant)


def test_an_every_second_job_crosses_an_excluded_day_in_one_jump() -> None:
    today = Counting(cal(dates=["2026-05-01"]))
    every = parse_schedule("@every 1s")

    following = next_slot(every, at("2026-04-30T23:59:59.250Z"), calendars=[today])

    assert following == at("2026-05-02T00:00:00.250Z")  # on the job's own sequence
    assert today.asked == 2


def test_an_outage_across_an_excluded_day_counts_the_other_slots_only_and_quickly() -> None:
    today = Counting(cal(dates=["2026-05-02"]))
    every = parse_schedule("@every 1s")

    plan = plan_next(every, after=at("2026-05-01T00:00:00Z"), now=at("2026-05-04T00:00:00Z"),
                     policy=MisfirePolicy.SKIP, grace_s=0, calendars=[today])

    assert plan.missed_more + len(plan.missed) == 2 * 86_400
    assert at("2026-05-02T00:00:00Z") not in plan.missed
    assert plan.next_fire_at == at("2026-05-04T00:00:01Z")
    assert today.asked < 200


def test_calendars_that_exclude_every_slot_raise_a_clear_error_after_the_cap() -> None:
    always = cal(windows=["0 * * ? * *"])  # second 0 of every minute
    minutely = parse_schedule("0 * * ? * *")

    with pytest.raises(ExclusionError, match=f"exclude {MAX_SKIPS} slots in a row"):
        next_slot(minutely, at("2026-05-01T00:00:00Z"), calendars=[always])


def test_overrun_and_fire_once_plans_skip_excluded_slots() -> None:
    gap = cal(windows=["2-3 0 12 ? * *"])  # 12:00:02-12:00:03
    every = parse_schedule("@every 1s")
    t = at("2026-05-01T12:00:00Z")

    overrun = plan_next(every, after=t, now=t + 5.5 * SECOND, policy=MisfirePolicy.FIRE_ONCE,
                        grace_s=60, overrun=OverrunPolicy.SKIP, calendars=[gap])
    assert overrun.missed == [t + SECOND, t + 4 * SECOND, t + 5 * SECOND]
    assert overrun.next_fire_at == t + 6 * SECOND

    late = plan_next(every, after=t, now=t + 3.5 * SECOND, policy=MisfirePolicy.FIRE_ONCE,
                     grace_s=0, calendars=[gap])
    assert (late.next_fire_at, late.missed, late.missed_more) == (t + SECOND, [], 0)
