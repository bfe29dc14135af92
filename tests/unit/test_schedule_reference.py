"""Properties that hold quartzlite's schedule engine against reference engines.

* 5-field cron against cronsim (a reference implementation of Debian's cron): the next
  fire instants agree, and so does what each refuses.
* 6/7-field Quartz against tests/unit/quartz_reference.py (a brute-force evaluator written
  from the Quartz javadoc): the next fire instants within a window agree, and so does what
  each refuses.
* Any expression parses into a schedule whose next_after moves strictly forward, or is a
  ValidationError.

Fire instants are compared in UTC and in zones with and without DST, on days without an
offset change only (examples touching such a day are assumed away: the DST rule is
tests/unit/test_dst_transitions.py's subject).

``QUARTZLITE_REFERENCE_EXAMPLES`` sets the examples per property (default 2,000, a fixed
derandomized sample; more draws fresh random ones)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quartzlite.errors import ValidationError
from quartzlite.schedule import LAST_INSTANT, Schedule, parse_schedule
from tests.unit import quartz_reference
from tests.unit.zone_changes import changed_days

EXAMPLES = int(os.environ.get("QUARTZLITE_REFERENCE_EXAMPLES", "2000"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a loaded machine is slow, not wrong
    derandomize=EXAMPLES <= 2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)

ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Sao_Paulo",
)
FIRST_YEAR, LAST_YEAR = 2000, 2040  # the generated start instants
COUNT = 5  # fire instants compared per example

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


def _changed_day(zone: str, instants: list[datetime]) -> bool:
    """Does any of ``instants`` fall on a local date on which the zone's offset changes?"""
    if zone == "UTC":
        return False
    days = changed_days(zone, FIRST_YEAR - 1, LAST_YEAR + 35)
    tz = ZoneInfo(zone)
    return any(i.astimezone(tz).date() in days for i in instants)


def _chain(schedule: Schedule, start: datetime, count: int, until: datetime) -> list[datetime]:
    """Up to ``count`` fire instants after ``start`` that lie before ``until``."""
    found: list[datetime] = []
    current = start
    while len(found) < count:
        following = schedule.next_after(current)
        assert following is None or following > current, (current, following)
        if following is None or following >= until:
            break
        found.append(following)
        current = following
    return found


# -- generated field text ----------------------------------------------------------------


def _spellings(value: int, names: dict[int, str]) -> list[str]:
    out = [str(value), f"0{value}"]
    if value in names:
        out += [names[value], names[value].lower(), names[value].capitalize()]
    return out


def _value(low: int, high: int, names: dict[int, str]) -> st.SearchStrategy[str]:
    return st.integers(low, high).flatmap(lambda v: st.sampled_from(_spellings(v, names)))


def _number(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(str)


def _field(
    low: int,
    high: int,
    steps: st.SearchStrategy[int],
    *,
    names: dict[int, str] | None = None,
    wrap: bool,
    star: bool = True,
) -> st.SearchStrategy[str]:
    """A comma list of ``*``, ``*/n``, values, ranges ``a-b`` (reversed ones when ``wrap``),
    ``a/n`` and ``a-b/n``; without ``star``, one that does not begin with ``*``. Names only
    alone or in a name range, never with a step (Quartz leaves both undefined)."""
    names = names or {}
    ordered = st.tuples(st.integers(low, high), st.integers(low, high)).map(
        lambda p: (min(p), max(p))
    )
    pairs = st.one_of(ordered, st.tuples(st.integers(low, high), st.integers(low, high))) \
        if wrap else ordered
    number_range = pairs.map(lambda p: f"{p[0]}-{p[1]}")
    # cronsim reads a one-value range with a step, "5-5/10", as "5/10" (5, 15, 25, ...);
    # Debian's cron and quartzlite as 5: cron fields leave that form out.
    stepped_range = number_range if wrap else pairs.filter(lambda p: p[0] < p[1]).map(
        lambda p: f"{p[0]}-{p[1]}"
    )
    stars = [st.just("*"), steps.map(lambda n: f"*/{n}")]
    atoms = [
        _value(low, high, names),
        number_range,
        st.tuples(stepped_range, steps).map(lambda p: f"{p[0]}/{p[1]}"),
        st.tuples(_number(low, high), steps).map(lambda p: f"{p[0]}/{p[1]}"),
    ]
    if names:
        named = st.sampled_from(sorted(names))
        name_pairs = st.tuples(named, named)
        if not wrap:
            name_pairs = name_pairs.map(lambda p: (min(p), max(p)))
        atoms.append(name_pairs.map(lambda p: f"{names[p[0]]}-{names[p[1]]}"))
    restricted = st.one_of(*atoms)
    if not star:
        return st.lists(restricted, min_size=1, max_size=3).map(",".join)
    return st.lists(st.one_of(*stars, restricted), min_size=1, max_size=3).map(",".join)


# -- 5-field cron against cronsim ---------------------------------------------------------

CRON_MONTHS = dict(enumerate(MONTH_NAMES, start=1))
CRON_DAYS = dict(enumerate(DAY_NAMES))  # 0 = SUN; 7 is Sunday too, without a name
# cronsim accepts a step of any size (it fires at the first value): so does cron here.
cron_steps = st.one_of(st.integers(1, 8), st.integers(1, 70), st.integers(1, 10**9))
minute = _field(0, 59, cron_steps, wrap=False)
hour = _field(0, 23, cron_steps, wrap=False)
cron_dom = _field(1, 31, cron_steps, wrap=False, star=False)
cron_dow = _field(0, 7, cron_steps, names=CRON_DAYS, wrap=False, star=False)
cron_month = _field(1, 12, cron_steps, names=CRON_MONTHS, wrap=False)


def _starred(restricted: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A day field beginning with "*" ("*", "*/n", "*/n,..."), or "?" (quartzlite's
    synonym of "*")."""
    return st.one_of(
        st.just("*"),
        st.just("?"),
        cron_steps.map(lambda n: f"*/{n}"),
        st.tuples(st.sampled_from(["*", "*/2", "*/3", "*/7"]), restricted).map(",".join),
    )


# Vixie's rule: OR when both day fields are restricted, AND when either begins with "*".
cron_days = st.one_of(
    st.tuples(cron_dom, cron_dow),
    st.tuples(_starred(cron_dom), cron_dow),
    st.tuples(cron_dom, _starred(cron_dow)),
    st.tuples(_starred(cron_dom), _starred(cron_dow)),
)
cron_expressions = st.tuples(minute, hour, cron_days, cron_month).map(
    lambda p: f"{p[0]} {p[1]} {p[2][0]} {p[3]} {p[2][1]}"
)
zones = st.sampled_from(ZONES)
# Naive bounds: Hypothesis draws naive datetimes; they are read as UTC below.
starts = st.datetimes(
    min_value=datetime(FIRST_YEAR, 1, 1),  # noqa: DTZ001
    max_value=datetime(LAST_YEAR, 12, 31, 23, 59, 59),  # noqa: DTZ001
).map(lambda d: d.replace(tzinfo=UTC))


def _for_cronsim(expression: str) -> str:
    """cron has no "?": quartzlite reads it as "*" in a day field, and so does this."""
    fields = expression.split()
    if len(fields) == 5:
        fields = [("*" if i in (2, 4) and f == "?" else f) for i, f in enumerate(fields)]
    return " ".join(fields)


def _cronsim(expression: str, start: datetime, zone: str) -> list[datetime]:
    """cronsim's next COUNT fire instants (UTC) after ``start``: fewer when it gives up
    (it looks 50 years ahead of each fire)."""
    tz = UTC if zone == "UTC" else ZoneInfo(zone)
    found: list[datetime] = []
    for fire in CronSim(_for_cronsim(expression), start.astimezone(tz)):
        found.append(fire.astimezone(UTC))
        if len(found) == COUNT:
            break
    return found


@SETTINGS
@given(expression=cron_expressions, zone=zones, start=starts)
def test_five_field_cron_fires_as_cronsim(expression: str, zone: str, start: datetime) -> None:
    try:
        expected = _cronsim(expression, start, zone)
    except CronSimError:  # e.g. "0 0 30 2 *", which never fires
        assert not _accepts(lambda: parse_schedule(expression, zone), ValidationError), expression
        return
    got = _chain(parse_schedule(expression, zone), start, COUNT, LAST_INSTANT)
    assume(not _changed_day(zone, [start, *expected, *got]))
    if len(expected) < COUNT:  # cronsim gave up 50 years after its last fire
        limit = (expected[-1] if expected else start) + timedelta(days=50 * 365)
        got = [g for g in got if g < limit]
    assert got == expected, (expression, zone, start)


# Tokens for text that may or may not be cron.
_bad_atoms = st.sampled_from([
    "", "-", "/", "*/", "*/0", "0/0", "1-", "-1", "**", "*-5", "5-1", "59-0", "23-22", "31-1",
    "12-1", "7-0", "SAT-SUN", "DEC-JAN", "FRI-MON", "60", "24", "32", "0", "13", "8", "99999",
    "1-2-3", "1/2/3", "L", "LW", "15W", "L-3", "5L", "FRIL", "5#3", "MON#2", "#", "?", "?,1",
    "JAN", "MON", "FOO", "H", "1,", ",1", "1,,2", "٣", "０", "１-５", "x", "1.5", "+1", "1 ",
])


@st.composite
def _broken(
    draw: st.DrawFn, base: st.SearchStrategy[str], noise: Callable[[int], st.SearchStrategy[str]]
) -> str:
    """``base`` with one or two fields replaced by (or extended with) ``noise(position)``
    (the number of fields stays: 5 fields are cron, 6-7 Quartz)."""
    fields = draw(base).split()
    for _ in range(draw(st.integers(1, 2))):
        i = draw(st.integers(0, len(fields) - 1))
        bad = draw(noise(i)).strip() or "*"
        fields[i] = draw(st.sampled_from([bad, f"{fields[i]},{bad}", f"{bad},{fields[i]}"]))
    return " ".join(fields)


_cron_fields = [minute, hour, cron_dom, cron_month, cron_dow]
noisy_cron = _broken(cron_expressions, lambda i: st.one_of(_bad_atoms, *_cron_fields))


@pytest.mark.parametrize(
    ("expression", "ours", "cronsims"),
    [
        # A one-value range with a step: Debian's cron reads 5-5/10 as 5, cronsim as 5/10.
        ("5-5/10 * * * *", ["00:05", "01:05", "02:05"], ["00:05", "00:15", "00:25"]),
        # Quartz syntax that cronsim reads in 5 fields and quartzlite refuses there.
        ("0 0 L * *", None, ["01-31", "02-28"]),
        ("0 0 LW * *", None, ["01-30", "02-27"]),
        ("0 0 * * 5L", None, ["01-30", "02-27"]),
        ("0 0 * * 5#2", None, ["01-09", "02-13"]),
        # quartzlite's "?" (a synonym of "*" in a cron day field): cronsim refuses it.
        ("0 0 ? * 1", ["01-05", "01-12"], None),
    ],
)
def test_where_quartzlite_differs_from_cronsim_on_purpose(
    expression: str, ours: list[str] | None, cronsims: list[str] | None
) -> None:
    """The forms the properties above leave out, each engine's answer written down."""
    start = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday
    shape = "%H:%M" if ":" in (ours or cronsims or [""])[0] else "%m-%d"
    if ours is None:
        assert not _accepts(lambda: parse_schedule(expression), ValidationError)
    else:
        got = _chain(parse_schedule(expression), start, len(ours), LAST_INSTANT)
        assert [g.strftime(shape) for g in got] == ours
    if cronsims is None:
        assert not _accepts(lambda: CronSim(expression, start), CronSimError)
    else:
        reference = CronSim(expression, start)
        assert [next(reference).strftime(shape) for _ in cronsims] == cronsims


def _accepts(parse: Callable[[], object], *errors: type[Exception]) -> bool:
    try:
        parse()
    except errors:
        return False
    return True


def _cronsim_fires(expression: str) -> bool:
    """Does cronsim accept ``expression`` and find a fire within 50 years of 2000?"""
    try:
        iterator = CronSim(_for_cronsim(expression), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return False
    return next(iterator, None) is not None


def _quartz_only_syntax(expression: str) -> bool:
    """L, W or # in a cron day field: Quartz syntax, refused in 5-field cron (cronsim reads
    some of it). No day-of-month value and no day name holds an L or a #."""
    fields = expression.upper().split()
    return len(fields) == 5 and (
        any(c in fields[2] for c in "LW#") or any(c in fields[4] for c in "L#")
    )


@SETTINGS
@given(expression=noisy_cron)
def test_five_field_cron_refuses_what_cronsim_refuses(expression: str) -> None:
    """cronsim refuses (or never fires) <=> quartzlite refuses; and quartzlite refuses
    Quartz's L, W and # in 5-field cron, which cronsim partly reads."""
    ours = _accepts(lambda: parse_schedule(expression), ValidationError)
    if _quartz_only_syntax(expression):
        assert not ours, expression
        return
    assert ours == _cronsim_fires(expression), (expression, ours)


# -- 6/7-field Quartz against the brute-force evaluator ------------------------------------

QUARTZ_MONTHS = CRON_MONTHS
QUARTZ_DAYS = dict(enumerate(DAY_NAMES, start=1))  # 1 = SUN ... 7 = SAT
WINDOW = timedelta(days=2 * 366)  # the reference searches this far after the start


def _quartz_steps(limit: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 6), st.integers(1, limit))


seconds = _field(0, 59, _quartz_steps(59), wrap=True)
minutes = _field(0, 59, _quartz_steps(59), wrap=True)
hours = _field(0, 23, _quartz_steps(23), wrap=True)
quartz_months = _field(1, 12, _quartz_steps(12), names=QUARTZ_MONTHS, wrap=True)
quartz_dom = st.one_of(
    _field(1, 31, _quartz_steps(31), wrap=True),
    st.just("L"),
    st.just("LW"),
    st.integers(1, 30).map(lambda n: f"L-{n}"),
    st.integers(1, 27).map(lambda n: f"L-{n}W"),  # L-nW always names a day (28 - 27 = 1)
    st.integers(1, 28).map(lambda n: f"{n}W"),  # 29W-31W: undefined in short months
)
_weekday = st.integers(1, 7).flatmap(lambda v: st.sampled_from(_spellings(v, QUARTZ_DAYS)))
quartz_dow = st.one_of(
    _field(1, 7, _quartz_steps(7), names=QUARTZ_DAYS, wrap=True),
    st.just("L"),
    _weekday.map(lambda d: f"{d}L"),
    st.tuples(_weekday, st.integers(1, 5)).map(lambda p: f"{p[0]}#{p[1]}"),
)
quartz_days = st.one_of(
    quartz_dom.map(lambda dom: (dom, "?")),
    quartz_dow.map(lambda dow: ("?", dow)),
)


def _years(around: int) -> st.SearchStrategy[str | None]:
    near = st.integers(max(1970, around - 2), min(2099, around + 3))
    return st.one_of(
        st.none(),
        st.none(),
        st.just("*"),
        near.map(str),
        st.tuples(near, near).map(lambda p: f"{min(p)}-{max(p)}"),
        st.lists(near, min_size=1, max_size=3).map(lambda ys: ",".join(map(str, ys))),
        st.integers(1, 12).map(lambda n: f"*/{n}"),
        st.tuples(near, st.integers(1, 3)).map(lambda p: f"{p[0]}/{p[1]}"),
        st.tuples(near, near, st.integers(1, 3)).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
    )


quartz_starts = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001
    max_value=datetime(2035, 12, 31, 23, 59, 59),  # noqa: DTZ001
).map(lambda d: d.replace(tzinfo=UTC))


@st.composite
def quartz_cases(draw: st.DrawFn) -> tuple[str, datetime]:
    start = draw(quartz_starts)
    dom, dow = draw(quartz_days)
    fields = [draw(seconds), draw(minutes), draw(hours), dom, draw(quartz_months), dow]
    year = draw(_years(start.year))
    if year is not None:
        fields.append(year)
    return " ".join(fields), start


def _reference(expression: str, start: datetime, zone: str) -> list[datetime]:
    """The reference's fire instants (UTC) in (start, start + WINDOW), at most COUNT."""
    tz = ZoneInfo(zone)
    quartz = quartz_reference.parse(expression)
    after = start.astimezone(tz).replace(tzinfo=None)
    until = (start + WINDOW).astimezone(tz).replace(tzinfo=None)
    found: list[datetime] = []
    for wall in quartz.walls_after(after, until):
        found.append(wall.replace(tzinfo=tz).astimezone(UTC))
        if len(found) == COUNT:
            break
    return found


@SETTINGS
@given(case=quartz_cases(), zone=zones)
def test_quartz_fires_as_the_reference(case: tuple[str, datetime], zone: str) -> None:
    expression, start = case
    try:
        expected = _reference(expression, start, zone)
    except quartz_reference.QuartzError:  # e.g. day 31 of a month list without one
        assert not _accepts(lambda: parse_schedule(expression, zone), ValidationError), expression
        return
    got = _chain(parse_schedule(expression, zone), start, COUNT, start + WINDOW)
    assume(not _changed_day(zone, [start, *expected, *got]))
    assert got == expected, (expression, zone, start)


_bad_quartz_atoms = st.sampled_from([
    "*/0", "5/0", "*/60", "0/60", "1-5/60", "*/24", "0-23/24", "*/32", "1/32", "*/13", "*/8",
    "1-7/8", "60", "24", "32", "0", "13", "8", "2030-2026", "1969", "2100", "L", "LW", "L-0",
    "L-31", "L-3W", "0W", "32W", "15W", "1W,15", "L,15", "6L", "6L,2", "SATL", "8L", "6#0",
    "6#6", "6#3", "MON#2", "6#3,2", "?", "?,1", "*", "FOO", "JAN", "MON", "5-1", "22-2", "1,,2",
    "", "-", "/5", "W", "#",
])
_valid_quartz = quartz_cases().map(lambda case: case[0])
structured_quartz = st.one_of(
    _valid_quartz,
    _valid_quartz,
    _valid_quartz,
    # the day fields in every combination: both "?", neither, one
    st.tuples(
        seconds, minutes, hours, st.one_of(quartz_dom, st.just("?"), st.just("*")),
        quartz_months, st.one_of(quartz_dow, st.just("?"), st.just("*")),
    ).map(" ".join),
)
_quartz_fields = [seconds, minutes, hours, quartz_dom, quartz_months, quartz_dow,
                  _years(2026).map(lambda y: y or "*")]
_quartz_limits = [(0, 59, 59), (0, 59, 59), (0, 23, 23), (1, 31, 31), (1, 12, 12), (1, 7, 7)]


def _over_limit(position: int) -> st.SearchStrategy[str]:
    """A step one or more beyond what Quartz allows in the field at ``position``."""
    if position >= len(_quartz_limits):
        return st.nothing()
    low, high, limit = _quartz_limits[position]
    step = st.one_of(st.just(limit + 1), st.integers(limit + 1, 10**6))
    value = st.integers(low, high)
    return st.one_of(
        step.map(lambda n: f"*/{n}"),
        st.tuples(value, step).map(lambda p: f"{p[0]}/{p[1]}"),
        st.tuples(value, value, step).map(lambda p: f"{p[0]}-{p[1]}/{p[2]}"),
    )


noisy_quartz = _broken(
    structured_quartz,
    lambda i: st.one_of(_bad_quartz_atoms, _over_limit(i), *_quartz_fields),
)


@SETTINGS
@given(expression=st.one_of(structured_quartz, noisy_quartz))
def test_quartz_refuses_what_the_reference_refuses(expression: str) -> None:
    """The reference refuses <=> quartzlite refuses: "?" in exactly one day field, steps
    within the field, values in range, L/W/# alone and where they belong, never-firing."""
    ours = _accepts(lambda: parse_schedule(expression), ValidationError)
    reference = _accepts(lambda: quartz_reference.parse(expression), quartz_reference.QuartzError)
    assert ours == reference, (expression, ours)


# -- anything --------------------------------------------------------------------------

_tokens = st.one_of(
    _bad_atoms,
    _bad_quartz_atoms,
    st.integers(-5, 3000).map(str),
    st.text(alphabet="0123456789*/-,?LW#JANMONSUFRIDECX", min_size=1, max_size=6),
    st.text(min_size=1, max_size=4),
)
any_field = st.lists(_tokens, min_size=1, max_size=3).map(",".join)
any_expression = st.one_of(
    st.lists(any_field, min_size=4, max_size=8).map(" ".join),
    cron_expressions,
    noisy_cron,
    noisy_quartz,
    structured_quartz,
)
instants = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001
    max_value=datetime(9999, 12, 31, 23, 59, 59),  # noqa: DTZ001
).map(lambda d: d.replace(tzinfo=UTC))


@SETTINGS
@given(expression=any_expression, zone=zones, after=instants)
def test_any_expression_is_a_schedule_moving_forward_or_a_validation_error(
    expression: str, zone: str, after: datetime
) -> None:
    try:
        schedule = parse_schedule(expression, zone)
    except ValidationError:
        return
    current = after
    for _ in range(3):
        following = schedule.next_after(current)
        if following is None:
            break
        assert following > current, (expression, zone, current, following)
        assert following.utcoffset() == timedelta(0)
        current = following


def test_the_helpers_see_offset_changes() -> None:
    """The transition-day filter is not vacuous (the comparisons above rely on it)."""
    assert date(2026, 3, 29) in changed_days("Europe/Berlin", FIRST_YEAR - 1, LAST_YEAR + 35)
    assert date(2018, 11, 4) in changed_days("America/Sao_Paulo", FIRST_YEAR - 1, LAST_YEAR + 35)
    assert not changed_days("Asia/Kolkata", FIRST_YEAR - 1, LAST_YEAR + 35)
    assert _for_cronsim("0 0 ? * ?") == "0 0 * * *"
