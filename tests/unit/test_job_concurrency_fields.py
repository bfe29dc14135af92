"""The concurrency fields of a job's definition without a database: ``max_concurrency``
and ``broadcast`` validated by ``build_spec`` (a new job and a partial change), their JSON
shape, the dashboard form's conversion, and a run's shard as the CLI and the API show it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from quartzlite import codec
from quartzlite.api.ui import forms
from quartzlite.cli import _shard_text
from quartzlite.client import MAX_CONCURRENCY, build_spec
from quartzlite.enums import RunStatus
from quartzlite.errors import ValidationError
from quartzlite.models import JobSpec, Run, Shard

BROADCAST_REASON = "a broadcast job runs once per node per slot: max_concurrency must be 1"


def spec(**fields: Any) -> JobSpec:
    return build_spec({"name": "j", "schedule": "@every 1m", "command": "true", **fields})


def refused(data: dict[str, Any], *, base: JobSpec | None = None) -> ValidationError:
    full = data if base is not None else {"name": "j", "schedule": "@every 1m",
                                          "command": "true", **data}
    with pytest.raises(ValidationError) as info:
        build_spec(full, base=base)
    return info.value


def test_the_defaults_are_one_run_at_a_time_and_no_broadcast() -> None:
    found = spec()

    assert (found.max_concurrency, found.broadcast, found.lanes) == (1, False, False)


@pytest.mark.parametrize("value", [1, 3, MAX_CONCURRENCY, 4.0])
def test_max_concurrency_takes_an_integer_from_1_to_100(value: object) -> None:
    found = spec(max_concurrency=value)

    assert found.max_concurrency == int(value)  # type: ignore[call-overload]
    assert type(found.max_concurrency) is int
    assert found.lanes is (found.max_concurrency > 1)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0, "must be between 1 and 100, got 0"),
        (-3, "must be between 1 and 100, got -3"),
        (MAX_CONCURRENCY + 1, "must be between 1 and 100, got 101"),
        (10**30, "must be between 1 and 100"),
        (True, "must be an integer, not a boolean"),
        (False, "must be an integer, not a boolean"),
        (2.5, "must be an integer, not a number"),
        (float("nan"), "must be an integer, not a number"),
        ("3", "must be an integer, not a string"),
        (None, "must be an integer, not null"),
        ([2], "must be an integer, not a list"),
    ],
)
def test_a_bad_max_concurrency_names_the_field_and_the_reason(value: object, reason: str) -> None:
    error = refused({"max_concurrency": value})

    assert error.field == "max_concurrency"
    assert error.reason.startswith(reason), error.reason


@pytest.mark.parametrize("value", [True, False])
def test_broadcast_takes_a_boolean(value: bool) -> None:
    found = spec(broadcast=value)

    assert found.broadcast is value
    assert found.lanes is value


@pytest.mark.parametrize(
    ("value", "kind"),
    [(1, "an integer"), (0, "an integer"), ("true", "a string"), (None, "null"), ({}, "an object")],
)
def test_a_broadcast_that_is_not_a_boolean_is_refused(value: object, kind: str) -> None:
    error = refused({"broadcast": value})

    assert (error.field, error.reason) == ("broadcast", f"must be a boolean, not {kind}")


def test_broadcast_with_more_than_one_run_at_once_is_refused_naming_max_concurrency() -> None:
    error = refused({"broadcast": True, "max_concurrency": 2})

    assert (error.field, error.reason) == ("max_concurrency", BROADCAST_REASON)
    assert str(error) == f"max_concurrency: {BROADCAST_REASON}"
    assert spec(broadcast=True, max_concurrency=1).broadcast is True


def test_a_partial_change_keeps_the_fields_and_checks_them_against_the_stored_ones() -> None:
    concurrent = spec(max_concurrency=5, description="d")
    broadcast = spec(broadcast=True)

    changed = build_spec({"description": "e"}, base=concurrent)
    assert (changed.max_concurrency, changed.broadcast) == (5, False)
    assert build_spec({"max_concurrency": 1}, base=concurrent).max_concurrency == 1
    # The stored max_concurrency meets a new broadcast, and the other way round.
    for data, base in (({"broadcast": True}, concurrent), ({"max_concurrency": 3}, broadcast)):
        error = refused(data, base=base)
        assert (error.field, error.reason) == ("max_concurrency", BROADCAST_REASON)
    both = build_spec({"broadcast": False, "max_concurrency": 3}, base=broadcast)
    assert (both.max_concurrency, both.broadcast) == (3, False)
    assert refused({"max_concurrency": 0}, base=concurrent).field == "max_concurrency"
    assert refused({"broadcast": "no"}, base=broadcast).field == "broadcast"


def test_the_fields_round_trip_through_the_json_shape() -> None:
    for original in (spec(max_concurrency=7), spec(broadcast=True)):
        data = codec.spec_to_dict(original)
        assert (data["max_concurrency"], data["broadcast"]) == (
            original.max_concurrency, original.broadcast)
        assert build_spec(data) == original


def test_the_dashboard_form_gives_and_shows_the_fields() -> None:
    form = {"name": "j", "schedule": "@every 1m", "command": "true", "max_concurrency": "3"}

    data = forms.to_job_data(form)
    assert (data["max_concurrency"], data["broadcast"]) == (3, False)
    assert forms.to_job_data({**form, "max_concurrency": "", "broadcast": "on"})["broadcast"] is True
    assert "max_concurrency" not in forms.to_job_data({**form, "max_concurrency": " "})
    with pytest.raises(ValidationError) as info:
        forms.to_job_data({**form, "max_concurrency": "many"})
    assert info.value.field == "max_concurrency"
    shown = forms.from_spec(spec(max_concurrency=3))
    assert (shown["max_concurrency"], shown["broadcast"]) == ("3", "")
    assert forms.from_spec(spec(broadcast=True))["broadcast"] == "on"


def test_a_runs_shard_in_the_cli_and_the_json() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    plain = Run(id=1, job_id=1, job_name="j", fire_id="f", planned_at=at, slot_at=at, attempt=1,
                started_at=None, ended_at=None, session_id=None, node=None,
                status=RunStatus.RUNNING, exit_code=None, output="", error=None)
    sharded = replace(plain, shard=Shard(index=2, total=5))

    assert (_shard_text(plain), _shard_text(sharded)) == ("-", "2/5")
    assert codec.run_to_dict(plain)["shard"] is None
    assert codec.run_to_dict(sharded)["shard"] == {"index": 2, "total": 5}
