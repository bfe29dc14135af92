"""The documented DST rule, for every UTC-offset change of 2026-2030 in the zones below.

The changes are found by scanning each zone's ``utcoffset`` (tests/unit/zone_changes.py),
not written by hand. The rule (quartzlite/schedule/timing.py, ``_CronTiming``, and
docs/schedules.md, "Daylight saving time"; the hand-worked cases of 2026 are in
tests/unit/test_schedule.py):

* a **fixed-time** job (its minute and hour fields both do not begin with ``*``; seconds do
  not matter): a wall time that exists once fires at that instant; a repeated wall time
  (the clock falls back) fires once, in its first occurrence; a skipped wall time (the clock
  jumps forward) fires once, at the first instant after the gap, and several slots that map
  there collapse into that one fire;
* an **interval** job (minute or hour begins with ``*``): it fires at every instant whose
  wall-clock time matches: skipped wall times never, repeated ones in both occurrences (it
  keeps its real-time cadence).

Asia/Kolkata has no DST and America/Sao_Paulo none since 2019: no change is found there,
and a daily job keeps its wall time every day of the five years.
"""

from __future__ import annotations

import bisect
import itertools
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from quartzlite.schedule import Schedule, parse_schedule
from tests.unit.zone_changes import OffsetChange, offset_changes

FIRST_YEAR, LAST_YEAR = 2026, 2030
SHIFTS = {
    "Europe/Berlin": timedelta(hours=1),
    "America/New_York": timedelta(hours=1),
    "Australia/Lord_Howe": timedelta(minutes=30),
}
NO_DST = {"Asia/Kolkata": timedelta(hours=5, minutes=30), "America/Sao_Paulo": timedelta(hours=-3)}

_FOUND = [(zone, change) for zone in SHIFTS for change in offset_changes(zone, FIRST_YEAR, LAST_YEAR)]


def _params(found: list[tuple[str, OffsetChange]]) -> list[object]:
    return [
        pytest.param(
            zone,
            change,
            id=f"{zone.split('/')[1]}-{change.instant:%Y-%m-%d}-{'gap' if change.gap else 'fold'}",
        )
        for zone, change in found
    ]


CHANGES = _params(_FOUND)
GAPS = _params([(zone, change) for zone, change in _FOUND if change.gap])
FOLDS = _params([(zone, change) for zone, change in _FOUND if not change.gap])


def _naive(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _affected(change: OffsetChange) -> tuple[datetime, datetime]:
    """The wall times [start, end) the change skips (gap) or repeats (fold)."""
    start = (change.instant + min(change.before, change.after)).replace(tzinfo=None)
    end = (change.instant + max(change.before, change.after)).replace(tzinfo=None)
    return start, end


def _once(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant of a wall time that exists exactly once."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    assert first == wall.replace(tzinfo=zone, fold=1).astimezone(UTC), wall
    return first


def _chain(schedule: Schedule, start: datetime, until: datetime) -> list[datetime]:
    """The fire instants in (start, until]."""
    found: list[datetime] = []
    current = schedule.next_after(start)
    while current is not None and current <= until:
        found.append(current)
        current = schedule.next_after(current)
    return found


def _daily(wall: datetime) -> list[str]:
    """A daily job at ``wall``'s time of day, as 5-field cron and as Quartz."""
    return [f"{wall.minute} {wall.hour} * * *", f"0 {wall.minute} {wall.hour} * * ?"]


# -- the scan -------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "shift"), SHIFTS.items())
def test_two_changes_a_year_alternating(zone: str, shift: timedelta) -> None:
    changes = offset_changes(zone, FIRST_YEAR, LAST_YEAR)
    assert len(changes) == 2 * (LAST_YEAR - FIRST_YEAR + 1)
    assert all(c.shift == shift for c in changes)
    assert all(a.after == b.before and a.gap != b.gap for a, b in itertools.pairwise(changes))


@pytest.mark.parametrize(("zone", "offset"), NO_DST.items())
def test_no_change_where_there_is_no_dst(zone: str, offset: timedelta) -> None:
    assert offset_changes(zone, FIRST_YEAR, LAST_YEAR) == ()
    tz = ZoneInfo(zone)
    days = (date(LAST_YEAR, 12, 31) - date(FIRST_YEAR, 1, 1)).days + 1
    for wall_time in (time(2, 30), time(0, 30)):  # Sao Paulo's clock used to change at 00:00
        expression = f"{wall_time.minute} {wall_time.hour} * * *"
        start = datetime.combine(date(FIRST_YEAR, 1, 1), time(), tzinfo=tz)
        fires = _chain(parse_schedule(expression, zone), start, start + timedelta(days=days))
        assert len(fires) == days, expression
        local = [f.astimezone(tz) for f in fires]
        assert {(f.time(), f.utcoffset()) for f in local} == {(wall_time, offset)}
        assert [f.date() for f in local] == [
            date(FIRST_YEAR, 1, 1) + timedelta(days=i) for i in range(days)
        ]


# -- the named cases of the rule, at every change ---------------------------------------


@pytest.mark.parametrize(("zone", "change"), GAPS)
def test_daily_job_in_the_gap_fires_once_right_after_it(zone: str, change: OffsetChange) -> None:
    tz = ZoneInfo(zone)
    gap_start, gap_end = _affected(change)
    inside = gap_start + change.shift / 2  # e.g. 02:30 in Berlin, 02:15 in Lord Howe
    day = timedelta(days=1)
    expected = [_once(inside - day, tz), change.instant, _once(inside + day, tz)]
    start = expected[0] - timedelta(hours=1)
    for expression in _daily(inside):
        schedule = parse_schedule(expression, zone)
        assert _chain(schedule, start, expected[-1]) == expected, expression
    # Two slots in the gap collapse into the one fire after it.
    collapse = f"{gap_start.minute},{inside.minute} {gap_start.hour} * * *"
    both = [_once(gap_start - day, tz), _once(inside - day, tz), change.instant,
            _once(gap_start + day, tz), _once(inside + day, tz)]
    start = both[0] - timedelta(hours=1)
    assert _chain(parse_schedule(collapse, zone), start, both[-1]) == both, collapse


@pytest.mark.parametrize(("zone", "change"), FOLDS)
def test_daily_job_in_the_fold_fires_once_in_the_first_occurrence(
    zone: str, change: OffsetChange
) -> None:
    tz = ZoneInfo(zone)
    fold_start, _ = _affected(change)
    inside = fold_start + change.shift / 2  # e.g. 02:30 in Berlin, 01:30 in New York
    first = inside.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = inside.replace(tzinfo=tz, fold=1).astimezone(UTC)
    assert first < change.instant <= second  # the wall time is repeated indeed
    day = timedelta(days=1)
    expected = [_once(inside - day, tz), first, _once(inside + day, tz)]
    earlier = (fold_start + change.shift / 4).replace(tzinfo=tz, fold=1)  # a second occurrence
    for expression in _daily(inside):
        schedule = parse_schedule(expression, zone)
        start = expected[0] - timedelta(hours=1)
        assert _chain(schedule, start, expected[-1]) == expected, expression
        # Seen from inside the repeated period, after the first occurrence: not again today.
        assert schedule.next_after(earlier) == expected[2], expression
        assert schedule.next_after(first) == expected[2], expression
        assert schedule.next_after(second - timedelta(seconds=1)) == expected[2], expression


@pytest.mark.parametrize(("zone", "change"), CHANGES)
def test_every_minute_job_fires_every_real_minute(zone: str, change: OffsetChange) -> None:
    start = change.instant - timedelta(hours=2)
    expected = [start + timedelta(minutes=i) for i in range(1, 4 * 60 + 1)]
    for expression in ("* * * * *", "0 * * * * ?"):
        assert _chain(parse_schedule(expression, zone), start, expected[-1]) == expected


@pytest.mark.parametrize(("zone", "change"), CHANGES)
def test_hourly_job_skips_the_gap_and_fires_in_both_occurrences(
    zone: str, change: OffsetChange
) -> None:
    tz = ZoneInfo(zone)
    start = change.instant - timedelta(hours=3)
    end = change.instant + timedelta(hours=3)
    # Every instant on a whole minute whose wall clock shows hh:00: none in a gap (those
    # wall times do not exist), both occurrences in a fold.
    expected = [
        t for t in (start + timedelta(minutes=i) for i in range(1, 6 * 60 + 1))
        if t.astimezone(tz).minute == 0
    ]
    walls = [_naive(t, tz) for t in expected]
    affected_start, _ = _affected(change)
    if change.gap:  # e.g. 02:00 in Berlin does not exist that day
        assert affected_start not in walls
    elif affected_start.minute == 0:  # e.g. 02:00 in Berlin happens twice
        assert walls.count(affected_start) == 2
    for expression in ("0 * * * *", "0 0 * * * ?", "@hourly"):
        assert _chain(parse_schedule(expression, zone), start, end) == expected, expression


# -- the rule by brute force, from every start ------------------------------------------


def _values(text: str, low: int, high: int) -> set[int]:
    """``*``, ``*/n``, ``a``, ``a-b`` and lists: enough for the expressions below."""
    found: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        first, last = (low, high) if body == "*" else map(int, (body.split("-") * 2)[:2])
        found.update(range(first, last + 1, int(step or 1)))
    return found


def _expected(expression: str, zone: ZoneInfo, change: OffsetChange,
              lo: datetime, hi: datetime) -> list[datetime]:
    """The fire instants in (lo, hi] by the rule, from the wall-clock times alone."""
    fields = expression.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    seconds, minutes, hours = (
        _values(fields[0], 0, 59), _values(fields[1], 0, 59), _values(fields[2], 0, 23)
    )
    fixed = not fields[1].startswith("*") and not fields[2].startswith("*")
    instants: set[datetime] = set()
    if fixed:  # each slot's wall time of each day, mapped by the rule
        day = _naive(lo, zone).date() - timedelta(days=1)
        while day <= _naive(hi, zone).date() + timedelta(days=1):
            for h in hours:
                for m in minutes:
                    for s in seconds:
                        wall = datetime.combine(day, time(h, m, s))
                        occurrences = [
                            t for t in (wall.replace(tzinfo=zone, fold=f).astimezone(UTC)
                                        for f in (0, 1))
                            if _naive(t, zone) == wall
                        ]
                        if occurrences:
                            instants.add(min(occurrences))
                        else:  # skipped: in this change's gap
                            gap_start, gap_end = _affected(change)
                            assert change.gap, wall
                            assert gap_start <= wall < gap_end, wall
                            instants.add(change.instant)
            day += timedelta(days=1)
    else:  # every instant whose wall clock matches
        step = timedelta(seconds=1) if seconds != {0} else timedelta(minutes=1)
        t = lo.replace(second=0, microsecond=0)
        while t <= hi:
            wall = t.astimezone(zone)
            if wall.second in seconds and wall.minute in minutes and wall.hour in hours:
                instants.add(t)
            t += step
    return sorted(i for i in instants if lo < i <= hi)


def _rule_cases(change: OffsetChange) -> list[tuple[str, timedelta]]:
    """Expressions around the changed wall times, each with the half-width of its window."""
    start, _ = _affected(change)
    h = start.hour
    near = f"{max(h - 1, 0)}-{h + 1}"
    return [
        # fixed: slots before, in and after the changed wall times, on the days around it
        (f"0,15,30,45 {near} * * *", timedelta(hours=30)),
        (f"0,30 0,15,30,45 {near} * * ?", timedelta(hours=30)),
        (f"{start.minute} {h} * * *", timedelta(hours=30)),
        # interval
        ("*/15 * * * *", timedelta(hours=3)),
        (f"*/30 {h} * * *", timedelta(hours=30)),  # in a gap of an hour: not that day
        (f"*/10 {near} * * *", timedelta(hours=3)),
        ("0 */5 * * * ?", timedelta(hours=3)),
        ("*/20 * * * * ?", timedelta(hours=2)),
        (f"0 0 {near} * * ?", timedelta(hours=3)),
    ]


@pytest.mark.parametrize(("zone", "change"), CHANGES)
def test_next_after_follows_the_rule_from_every_start(zone: str, change: OffsetChange) -> None:
    tz = ZoneInfo(zone)
    for expression, half_width in _rule_cases(change):
        lo, hi = change.instant - half_width, change.instant + half_width
        expected = _expected(expression, tz, change, lo, hi)
        assert expected, expression
        schedule = parse_schedule(expression, zone)
        assert _chain(schedule, lo, hi) == expected, expression
        # From any start (also inside a repeated period, in either occurrence).
        start = lo + timedelta(seconds=17)
        while start < expected[-1]:
            want = expected[bisect.bisect_right(expected, start)]
            assert schedule.next_after(start) == want, (expression, start)
            start += timedelta(minutes=7, seconds=13)
