"""The bounds every schedule keeps: the supported instants, the @every range, the
names and aliases cron accepts."""

from __future__ import annotations

import calendar
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Final

from quartzlite.models import MANUAL_SCHEDULE

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
#: The schedule with no slots of its own: the job runs when triggered, by an operator
#: or by its upstream jobs.
MANUAL: Final = MANUAL_SCHEDULE

_ALLOWED_FORMS: Final = (
    "@every <duration>, @at <ISO-8601 instant>, @manual, " + ", ".join(_ALIASES)
)

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
