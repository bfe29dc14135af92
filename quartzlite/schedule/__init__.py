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

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, NoReturn
from zoneinfo import ZoneInfo

from quartzlite.enums import MisfirePolicy, OverrunPolicy
from quartzlite.errors import ValidationError
from quartzlite.schedule.calendars import (
    Calendar,
    ExclusionError,
    _ExcludingTiming,
    combine,
    compile_calendar,
    parse_rules,
)
from quartzlite.schedule.cron import (
    _parse_cron,
    _schedule_error,
)
from quartzlite.schedule.limits import (
    _ALIASES,
    _ALLOWED_FORMS,
    _RANGE,
    _REFERENCE,
    FIRST_INSTANT,
    LAST_INSTANT,
    MANUAL,
    MAX_EVERY,
    MIN_EVERY,
)
from quartzlite.schedule.timing import (
    _AtTiming,
    _BoundedTiming,
    _EveryTiming,
    _ManualTiming,
    _Timing,
)
from quartzlite.schedule.zones import (
    _as_utc,
    _load_zone,
    _wall_first_instant,
)

__all__ = [
    "FIRST_INSTANT",
    "LAST_INSTANT",
    "MANUAL",
    "MAX_EVERY",
    "MIN_EVERY",
    "MAX_JITTER_S",
    "Calendar",
    "ExclusionError",
    "FirePlan",
    "Schedule",
    "check_instant",
    "compile_calendar",
    "first_slot",
    "jitter_offset",
    "jittered",
    "next_slot",
    "parse_duration",
    "parse_rules",
    "parse_schedule",
    "plan_next",
    "preview",
]




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
# Schedule
# --------------------------------------------------------------------------------------


class Schedule:
    """A parsed, immutable schedule. Build it with :func:`parse_schedule`.

    ``expression`` is the expression as given (stripped), ``timezone`` the IANA name,
    ``kind`` one of ``"cron"`` (5 fields and the @-aliases), ``"quartz"`` (6/7 fields),
    ``"every"``, ``"at"`` and ``"manual"`` (no slots: the job runs when triggered);
    ``one_shot`` is True for ``@at``.
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
        """``"cron"`` (5 fields, @-aliases), ``"quartz"`` (6/7 fields), ``"every"``, ``"at"``
        or ``"manual"``."""
        return self._kind

    @property
    def manual(self) -> bool:
        """True for ``@manual``: no slots of its own (it runs when triggered)."""
        return self._kind == "manual"

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
        if keyword == MANUAL:
            if argument:
                raise _schedule_error(f'"{head}" takes no argument, got "{argument}"')
            return Schedule(expression=MANUAL, zone=zone, kind="manual", timing=_ManualTiming())
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
# A job's bounds and jitter
# --------------------------------------------------------------------------------------

#: The largest ``jitter_s`` of a job: one hour.
MAX_JITTER_S: Final = 3600.0


def _bounded(
    schedule: Schedule, start_at: datetime | None, end_at: datetime | None
) -> _Timing:
    """The schedule's timing, without the slots before ``start_at`` or after ``end_at``."""
    if start_at is None and end_at is None:
        return schedule._timing
    return _BoundedTiming(
        schedule._timing,
        None if start_at is None else _as_utc(start_at, "start_at"),
        None if end_at is None else _as_utc(end_at, "end_at"),
    )


def _job_timing(
    schedule: Schedule, start_at: datetime | None, end_at: datetime | None,
    calendars: Sequence[Calendar],
) -> _Timing:
    """A job's slots: its schedule's within its bounds, without those its calendars
    exclude."""
    timing = _bounded(schedule, start_at, end_at)
    calendar = combine(calendars)
    return timing if calendar is None else _ExcludingTiming(timing, calendar)


def next_slot(
    schedule: Schedule, after: datetime, *, calendars: Sequence[Calendar] = ()
) -> datetime | None:
    """The schedule's first slot strictly after ``after`` that ``calendars`` do not
    exclude (:class:`ExclusionError` when they exclude too many in a row)."""
    return _job_timing(schedule, None, None, calendars).next_after(_as_utc(after, "after"))


def first_slot(
    schedule: Schedule,
    now: datetime,
    *,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    calendars: Sequence[Calendar] = (),
) -> datetime | None:
    """The first slot of a job strictly after ``now``, at or after ``start_at`` and at or
    before ``end_at`` (UTC), that ``calendars`` do not exclude; None when there is none.
    For ``@every`` with ``start_at``, the slots are ``start_at + k * period``
    (``start_at`` itself when it is ahead); without it, ``now`` plus a period."""
    timing = _bounded(schedule, start_at, end_at)
    now = _as_utc(now, "now")
    if isinstance(timing, _BoundedTiming):
        first = timing.first_after(now)
    else:
        first = timing.next_after(now)
    calendar = combine(calendars)
    if calendar is None:
        return first
    return _ExcludingTiming(timing, calendar).skip(first)


def jitter_offset(key: str, slot: datetime, jitter_s: float) -> timedelta:
    """A stable pseudo-random offset in ``[0, jitter_s]``, at millisecond resolution, of
    the slot ``slot`` of the job ``key`` (its name): the first 8 bytes of
    ``blake2b(f"{key}:{slot in UTC, ISO-8601}")`` as an integer, modulo
    ``round(jitter_s * 1000) + 1``, in milliseconds. Every node computes the same one,
    so the run row's UNIQUE (job, planned instant) still guards the slot."""
    span_ms = round(jitter_s * 1000)
    if span_ms <= 0:
        return timedelta(0)
    text = f"{key}:{_as_utc(slot, 'slot').isoformat()}"
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % (span_ms + 1))


def jittered(key: str, slot: datetime, jitter_s: float) -> datetime:
    """The planned instant of ``slot``: the slot plus its :func:`jitter_offset`."""
    return slot + jitter_offset(key, slot, jitter_s)


# --------------------------------------------------------------------------------------
# Preview and misfire planning
# --------------------------------------------------------------------------------------


def preview(
    schedule: Schedule,
    start: datetime,
    count: int,
    *,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    calendars: Sequence[Calendar] = (),
) -> list[datetime]:
    """The next ``count`` fire instants strictly after ``start``, as aware datetimes in the
    schedule's timezone (fewer if the schedule stops firing); with ``start_at`` and
    ``end_at``, a job's slots within its bounds; with ``calendars``, without the slots
    they exclude."""
    result: list[datetime] = []
    current: datetime | None = _as_utc(start, "start")
    zone = schedule._zone
    timing = _job_timing(schedule, start_at, end_at, calendars)
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
    overrun: OverrunPolicy = OverrunPolicy.CATCH_UP,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    calendars: Sequence[Calendar] = (),
) -> FirePlan:
    """Decide the next fire after the slot ``after`` given the current instant ``now``.

    Slots ``s`` with ``after < s <= now - grace_s`` are misfired.

    * No misfired slot: ``next_fire_at = schedule.next_after(after)``.
    * ``FIRE_ONCE``: the latest misfired slot is fired (late) as ``next_fire_at``; the earlier
      ones are missed.
    * ``SKIP``: all misfired slots are missed; ``next_fire_at`` is the first slot after
      ``now - grace_s``.

    ``overrun``, for the slot after a run that ended at ``now`` (the job's own run held
    it): ``CATCH_UP`` (the default) is the above. ``SKIP`` leaves the misfire policy and
    grace out: every slot ``s`` with ``after < s <= now`` came due while the run ran and
    is missed, and ``next_fire_at`` is the job's next slot strictly after ``now`` (for
    ``@every``: on the sequence ``after + k * period``, not ``now`` plus a period).

    ``start_at`` and ``end_at`` bound the job's slots: a slot before ``start_at`` is not
    due (it is neither fired nor missed), none after ``end_at`` exists (``next_fire_at``
    is None once the next slot would lie past it).

    ``calendars`` exclude slots: an excluded slot does not exist for the job (it is
    neither fired nor missed, and the counts leave it out); :class:`ExclusionError` when
    they exclude :data:`~quartzlite.schedule.calendars.MAX_SKIPS` slots in a row.

    At most ``max_missed`` missed slots (the oldest) are materialised; ``missed_more`` counts
    the rest exactly: arithmetically for ``@every`` and, for cron, per matching day from the
    time-of-day product (slots are walked one by one only within a few hours of a DST
    transition, capped at 1,000,000 per call, i.e. never reached in practice).
    """
    policy = MisfirePolicy(policy)
    overrun = OverrunPolicy(overrun)
    if grace_s < 0:
        raise ValueError("grace_s must be >= 0")
    if max_missed < 0:
        raise ValueError("max_missed must be >= 0")
    if overrun is OverrunPolicy.SKIP:
        grace_s = 0.0  # every slot the run overran is skipped, however recent
    start = _as_utc(after, "after")
    threshold = _as_utc(now, "now") - timedelta(seconds=grace_s)
    timing = _job_timing(schedule, start_at, end_at, calendars)

    first = timing.next_after(start)
    if first is None or first > threshold:
        return FirePlan(next_fire_at=first, missed=[], missed_more=0)

    total = max(1, timing.count(start, threshold))
    if overrun is OverrunPolicy.SKIP:
        # Back on the job's own sequence of slots: the one after the last overrun slot
        # (for ``@every``, ``after`` plus a whole number of periods).
        latest = timing.latest(start, threshold)
        assert latest is not None
        to_record = total
        next_fire: datetime | None = timing.next_after(latest)
    elif policy is MisfirePolicy.FIRE_ONCE:
        latest = timing.latest(start, threshold)
        assert latest is not None
        to_record = total - 1
        next_fire = latest
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
