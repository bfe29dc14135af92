"""Properties over generated input (Hypothesis): whatever a user types as a schedule or
a job field, the answer is a valid result or the project's ValidationError, never
another exception, and nothing a node would plan lies outside the supported instants.

``QUARTZLITE_PROPERTY_EXAMPLES`` sets the examples per property (``make test-fuzz``
raises it); ``make test`` runs a fixed, derandomized sample."""

from __future__ import annotations

import os
import zoneinfo
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quartzlite.client import build_spec
from quartzlite.enums import MisfirePolicy
from quartzlite.errors import ValidationError
from quartzlite.schedule import FIRST_INSTANT, LAST_INSTANT, parse_schedule, plan_next, preview

EXAMPLES = int(os.environ.get("QUARTZLITE_PROPERTY_EXAMPLES", "300"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a loaded machine is slow, not wrong
    derandomize=EXAMPLES <= 300,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)

ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})

# -- schedule expressions -----------------------------------------------------------------

numbers = st.one_of(st.integers(0, 70), st.integers(-5, 10**12).map(str)).map(str)
cron_atom = st.one_of(
    st.just("*"), st.just("?"), st.just("L"), numbers,
    st.sampled_from(["JAN", "dec", "MON", "sun", "L-3", "15W", "LW", "5L", "MON#2", "6#5", "0#0"]),
    st.tuples(numbers, numbers).map("-".join),
    st.tuples(st.sampled_from(["*", "0", "5", "1-10"]), numbers).map("/".join),
    st.text(alphabet="0123456789*/-,LW#?ABCXYZ", min_size=1, max_size=8),
)
cron_field = st.lists(cron_atom, min_size=1, max_size=3).map(",".join)
cron = st.lists(cron_field, min_size=4, max_size=8).map(" ".join)
duration = st.one_of(
    st.tuples(st.integers(0, 10**15), st.sampled_from(["ms", "s", "m", "h", "d"])).map(
        lambda p: f"{p[0]}{p[1]}"
    ),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["d", "h", "m", "s", "ms"])),
             min_size=1, max_size=4).map(lambda ps: "".join(f"{n}{u}" for n, u in ps)),
    st.text(max_size=12),
)
every = duration.map(lambda d: f"@every {d}")
offsets = st.integers(-24 * 60 + 1, 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
# Naive bounds: Hypothesis draws naive datetimes, given a zone below.
instants = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))  # noqa: DTZ001
at = st.one_of(
    st.tuples(instants, offsets).map(lambda p: "@at " + p[0].replace(tzinfo=p[1]).isoformat()),
    instants.map(lambda d: "@at " + d.isoformat()),
    st.text(max_size=30).map(lambda t: "@at " + t),
)
aliases = st.sampled_from(["@yearly", "@monthly", "@weekly", "@daily", "@hourly", "@reboot", "@", ""])
expressions = st.one_of(cron, every, at, aliases, st.text(max_size=40))
zones = st.one_of(st.sampled_from(ZONES), st.text(max_size=20))
utc_instants = instants.map(lambda d: d.replace(tzinfo=UTC))


@SETTINGS
@given(expression=expressions, zone=zones, after=utc_instants)
def test_a_schedule_parses_and_plans_or_is_a_validation_error(
    expression: str, zone: str, after: datetime
) -> None:
    try:
        schedule = parse_schedule(expression, zone)
    except ValidationError:
        return
    found = schedule.next_after(after)
    assert found is None or after < found < LAST_INSTANT
    times = preview(schedule, after, 3)
    assert all(after < t.astimezone(UTC) < LAST_INSTANT for t in times)
    assert times == sorted(times)
    if after < LAST_INSTANT - timedelta(days=1):
        for policy in MisfirePolicy:
            plan = plan_next(schedule, after=after, now=after + timedelta(hours=1), policy=policy,
                             grace_s=60.0)
            assert plan.next_fire_at is None or after < plan.next_fire_at < LAST_INSTANT


@SETTINGS
@given(expression=st.one_of(every, at), zone=st.sampled_from(ZONES))
def test_at_and_every_never_reach_a_node_outside_the_supported_instants(
    expression: str, zone: str
) -> None:
    try:
        schedule = parse_schedule(expression, zone)
    except ValidationError:
        return
    first = schedule.next_after(FIRST_INSTANT - timedelta(microseconds=1))
    assert first is None or FIRST_INSTANT <= first < LAST_INSTANT


# -- job fields ---------------------------------------------------------------------------

hostile_text = st.one_of(
    st.text(max_size=50),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=50),
    st.sampled_from(["\ud800", "a\udfff", "x\n", "\x00", "é" * 70_000, "\U0001f600" * 20_000, " ", ""]),
)
hostile_number = st.one_of(
    st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=5),
)
hostile_value = st.one_of(
    hostile_text, hostile_number, st.lists(hostile_text, max_size=4),
    st.dictionaries(hostile_text, hostile_text, max_size=3),
)
FIELDS = (
    "name", "schedule", "timezone", "start_at", "end_at", "max_runs", "jitter_s",
    "command", "callable", "kwargs", "timeout_s", "max_attempts",
    "retry_backoff_s", "retry_max_backoff_s", "misfire_policy", "misfire_grace_s",
    "overrun_policy", "recovery_policy", "priority", "tags", "description", "paused",
    "max_concurrency", "broadcast",
)


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from(FIELDS), hostile_value, max_size=4))
def test_a_job_spec_validates_or_is_a_validation_error_naming_a_field(changes: dict[str, Any]) -> None:
    data = {"name": "job", "schedule": "@every 1m", "command": "true", **changes}
    try:
        spec = build_spec(data)
    except ValidationError as error:
        named = (error.field, error.reason)
        assert all(named), named
        return
    # What passed fits its columns and is valid Unicode.
    for value in (spec.name, spec.command or "", spec.description, spec.callable or "", *spec.tags):
        value.encode("utf-8")
    assert len((spec.command or "").encode()) <= 65_535
    assert "\n" not in spec.name


@pytest.mark.parametrize("value", ["\ud800", "x\udfff"])
def test_a_lone_surrogate_names_the_field(value: str) -> None:
    with pytest.raises(ValidationError) as info:
        build_spec({"name": "job", "schedule": "@every 1m", "command": "true", "description": value})
    assert info.value.field == "description"
