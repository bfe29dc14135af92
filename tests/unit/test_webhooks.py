"""Webhooks without I/O: the signature (against an HMAC computed here by hand), replay
protection, backoff, subscription matching, input checks, and the status tables."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from quartzlite.enums import (
    DELIVERY_TRANSITIONS,
    SUBSCRIBABLE_EVENTS,
    DeliveryStatus,
    EventType,
    RunStatus,
)
from quartzlite.errors import ValidationError
from quartzlite.storage.webhooks import EVENT_STATUSES
from quartzlite.webhooks import (
    SECRET_PREFIX,
    backoff_s,
    matches,
    new_secret,
    signature,
    validate_events,
    validate_url,
    verify,
)

SECRET = "whsec_test-secret"
BODY = b'{"id":7,"event":"run.failed","job":"nightly"}'


def test_the_signature_is_the_hmac_of_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), b"1767225600." + BODY, hashlib.sha256).hexdigest()
    assert signature(SECRET, BODY, 1767225600) == f"t=1767225600,v1={expected}"


def test_verify_accepts_the_signature_within_the_tolerance_only() -> None:
    header = signature(SECRET, BODY, 1000)
    assert verify(SECRET, BODY, header, now=1000)
    assert verify(SECRET, BODY, header, now=1299)
    assert not verify(SECRET, BODY, header, now=1301), "an old request is a replay"
    assert not verify(SECRET, BODY, header, now=699), "from the future"
    assert verify(SECRET, BODY, header, now=5000, tolerance_s=4001)


def test_verify_refuses_another_body_secret_or_timestamp() -> None:
    header = signature(SECRET, BODY, 1000)
    assert not verify(SECRET, BODY + b" ", header, now=1000)
    assert not verify("whsec_other", BODY, header, now=1000)
    forged = header.replace("t=1000", "t=1001")
    assert not verify(SECRET, BODY, forged, now=1001), "the timestamp is signed too"
    for broken in ("", "t=abc,v1=00", "v1=" + "0" * 64, "t=1000"):
        assert not verify(SECRET, BODY, broken, now=1000)


def test_verify_accepts_any_of_several_v1_signatures() -> None:
    """A receiver given two (say, during a secret's rotation) accepts either."""
    good = signature(SECRET, BODY, 1000).rpartition("v1=")[2]
    assert verify(SECRET, BODY, f"t=1000,v1={'0' * 64},v1={good}", now=1000)


def test_secrets_are_prefixed_and_random() -> None:
    one, two = new_secret(), new_secret()
    assert one.startswith(SECRET_PREFIX)
    assert len(one) == len(SECRET_PREFIX) + 43
    assert one != two


def test_backoff_doubles_from_one_second_up_to_ten_minutes() -> None:
    assert [backoff_s(n) for n in range(1, 7)] == [1, 2, 4, 8, 16, 32]
    assert backoff_s(10) == 512
    assert backoff_s(11) == 600
    assert backoff_s(1000) == 600


def test_matching_events_job_prefix_and_tag() -> None:
    def m(event: str, job: str | None, tags: tuple[str, ...] = (), **sub: object) -> bool:
        return matches(events=sub.get("events", ["run.failed", "node.expired"]),  # type: ignore[arg-type]
                       job_prefix=sub.get("job_prefix"), tag=sub.get("tag"),  # type: ignore[arg-type]
                       event=event, job_name=job, job_tags=tags)

    assert m("run.failed", "etl-load")
    assert not m("run.missed", "etl-load"), "not subscribed"
    assert m("run.failed", "etl-load", job_prefix="etl-")
    assert not m("run.failed", "report", job_prefix="etl-")
    assert m("run.failed", "x", ("db", "nightly"), tag="db")
    assert not m("run.failed", "x", ("nightly",), tag="db")
    assert not m("run.failed", "etl-x", ("nightly",), tag="db", job_prefix="etl-")
    # Node events are not about a job: the job filters do not apply.
    assert m("node.expired", None, job_prefix="etl-", tag="db")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/hook", "https://alerts.example.com/q?x=1", "http://[::1]:9/x",
    "https://user:pw@example.com/path",
])
def test_good_urls(url: str) -> None:
    assert validate_url(url) == url


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://example.com/x", "http:// or https://"),
    ("HTTP://example.com", "http:// or https://"),
    ("example.com/hook", "http:// or https://"),
    ("http://", "must name a host"),
    ("http://exa mple.com", "spaces"),
    ("http://example.com/\n", "control"),
    ("http://exämple.com", "ASCII"),
    ("http://example.com:99999/", "not a valid URL"),
    ("http://example.com:0/", "port 0"),
    ("", "empty"),
    ("http://e.com/" + "a" * 2048, "at most 2048"),
    (5, "must be a string"),
])
def test_bad_urls_name_the_field_and_the_reason(url: object, reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_url(url)
    assert caught.value.field == "url"
    assert reason in caught.value.reason


def test_events_are_checked_and_put_in_order() -> None:
    assert validate_events(["node.expired", "run.failed", "run.failed"]) == (
        EventType.RUN_FAILED, EventType.NODE_EXPIRED)
    for bad, reason in (([], "at least one"), (["run.exploded"], "unknown event type"),
                        (["webhook.test"], "unknown event type"), ("run.failed", "a list")):
        with pytest.raises(ValidationError) as caught:
            validate_events(bad)
        assert caught.value.field == "events"
        assert reason in caught.value.reason


def test_run_event_types_are_run_dot_the_status_they_report() -> None:
    """Storage writes them as CONCAT('run.', status) in SQL."""
    for status in EVENT_STATUSES:
        assert EventType(f"run.{status.value}")
    assert EventType(f"run.{RunStatus.MISSED.value}") is EventType.RUN_MISSED
    assert EventType.TEST not in SUBSCRIBABLE_EVENTS


def test_the_delivery_status_table_is_complete() -> None:
    assert set(DELIVERY_TRANSITIONS) == set(DeliveryStatus)
    assert all(not targets for status, targets in DELIVERY_TRANSITIONS.items() if status.is_final)
    for status, targets in DELIVERY_TRANSITIONS.items():
        assert status not in targets
        assert targets <= set(DeliveryStatus)
    assert {s for s in DeliveryStatus if s.is_final} == {
        DeliveryStatus.DELIVERED, DeliveryStatus.FAILED}
