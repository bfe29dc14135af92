"""Exclusion calendars end to end: a real ``quartzlite node`` process (started through the
CLI) runs an every-second job whose calendar excludes a few seconds of wall time, then
(replaced while the node runs) a few others; and the issue's case through the HTTP API
with the node running. Waits on conditions with deadlines; nothing sleeps and then
asserts."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, time, timedelta

import pytest

from quartzlite.api import create_app
from quartzlite.client import SchedulerClient
from tests.cluster.harness import Db, nodes, wait_until

pytestmark = pytest.mark.cluster

SECOND = timedelta(seconds=1)


def naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def seconds_window(first: datetime, count: int) -> list[str]:
    """Quartz windows (7 fields, in UTC) excluding the ``count`` whole seconds from ``first``."""
    return [f"{t.second} {t.minute} {t.hour} {t.day} {t.month} ? {t.year}"
            for t in (first + i * SECOND for i in range(count))]


def test_a_calendar_takes_its_seconds_out_of_an_every_second_jobs_history(
    db_url: str, client: SchedulerClient
) -> None:
    db = Db(db_url)

    def ran_at_or_after(slot: datetime) -> bool:
        return bool(db.scalar(
            "SELECT COUNT(*) FROM ql_runs WHERE job_name = 'ticker' AND status = 'succeeded' "
            "AND slot_at >= :slot", slot=naive(slot)))

    with nodes(db_url) as start:
        node = start("n")
        wait_until(lambda: db.live_sessions() == 1, timeout=60, message="the node's session")
        first = (client.now() + 4 * SECOND).replace(microsecond=0)
        client.put_calendar({"name": "blip", "rules": {"windows": seconds_window(first, 3)}})
        client.add_job({"name": "ticker", "schedule": "* * * * * ?", "command": "true",
                        "calendars": ["blip"]})
        wait_until(lambda: ran_at_or_after(first + 4 * SECOND), timeout=20, interval=0.2,
                   message="the runs after the first window")

        # Replaced while the node runs (the job itself is unchanged): the node reads
        # the calendars again when its watch sees the write, and skips the new seconds.
        second = (client.now() + 4 * SECOND).replace(microsecond=0)
        client.put_calendar({"name": "blip", "rules": {"windows": seconds_window(second, 2)}})
        wait_until(lambda: ran_at_or_after(second + 3 * SECOND), timeout=20, interval=0.2,
                   message="the runs after the second window")

        # The case, through the API with the node running: a daily job with a
        # calendar excluding tomorrow; its upcoming slots and the preview skip tomorrow.
        _, secret = client.create_token("e2e", "admin")
        http = create_app(client).test_client()
        auth = {"Authorization": f"Bearer {secret}"}
        now = client.now()
        today, tomorrow = now.date(), now.date() + timedelta(days=1)
        put = http.put("/api/v1/calendars/tomorrow", headers=auth,
                       json={"rules": {"dates": [tomorrow.isoformat()]}})
        assert put.status_code == 201, put.get_json()
        job = http.put("/api/v1/jobs/daily", headers=auth, json={
            "schedule": "0 12 * * *", "command": "true", "calendars": ["tomorrow"]})
        assert job.status_code == 201, job.get_json()
        shown = http.get("/api/v1/jobs/daily", headers=auth).get_json()
        days = [datetime.fromisoformat(t).astimezone(UTC).date() for t in shown["upcoming"]]
        first_day = today if now.time() < time(12) else tomorrow
        expected = [d for d in (first_day + timedelta(days=i) for i in range(7)) if d != tomorrow]
        assert days == expected[:5]
        preview = http.get("/api/v1/schedule/preview", headers=auth, query_string={
            "schedule": "0 12 * * *", "count": "3", "calendars": "tomorrow",
            "from": now.isoformat()}).get_json()
        assert [datetime.fromisoformat(t).date() for t in preview["times"]] == expected[:3]

        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0, node.log()[-3000:]

    slots = {r.slot_at: r.status for r in db.rows(
        "SELECT slot_at, status FROM ql_runs WHERE job_name = 'ticker' ORDER BY slot_at")}
    excluded = [naive(first + i * SECOND) for i in range(3)] + [
        naive(second + i * SECOND) for i in range(2)]
    assert not set(excluded) & set(slots), "an excluded second has a run or a missed row"
    for around in (first - SECOND, first + 3 * SECOND, second - SECOND, second + 2 * SECOND):
        assert slots.get(naive(around)) == "succeeded", (around, slots)
    early = {slot: status for slot, status in slots.items() if slot <= naive(second + 3 * SECOND)}
    assert set(early.values()) == {"succeeded"}, early  # nothing missed, nothing else
    assert client.get_job("ticker").error is None
    assert client.get_job("daily").error is None
    db.close()
