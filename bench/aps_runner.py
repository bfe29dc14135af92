"""One APScheduler 3.11 process: a BackgroundScheduler with a SQLAlchemyJobStore on the
bench's MySQL database and a thread pool executor, driven by the bench over stdio.

    python -m bench.aps_runner '{"url": ..., "mode": "date"|"interval"|"idle", ...}'

It creates the jobs with the scheduler paused (so each ``add_job`` is one INSERT and no
wake-up), resumes, prints ``{"event": "ready", ...}``, runs until it reads ``stop`` on
stdin, shuts down (waiting for running jobs), writes the records and prints
``{"event": "done", ...}``.

Planned instants: date jobs get theirs as an argument; for every execution the
scheduler also emits an EXECUTED event carrying ``scheduled_run_time``, dispatched
after the body returned. With ``max_instances=1`` a job's executions never overlap, so
its bodies' starts and its events pair up in order; interval jobs take their planned
instant from that pairing (the grid start_date + k * interval, as the scheduler saw it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from bench import jobs as bodies

BODY = "bench.jobs:aps_record"
NOOP = "bench.jobs:noop"


def say(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def main() -> int:
    config = json.loads(sys.argv[1])
    events: list[tuple[str, float]] = []
    missed: list[tuple[str, float]] = []
    lock = threading.Lock()

    def on_event(event: Any) -> None:
        with lock:
            if event.code == EVENT_JOB_MISSED:
                missed.append((event.job_id, event.scheduled_run_time.timestamp()))
            else:
                events.append((event.job_id, event.scheduled_run_time.timestamp()))

    def build(url: str) -> BackgroundScheduler:
        scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=url)},
            executors={"default": ThreadPoolExecutor(config["workers"])},
            job_defaults={
                "coalesce": config["coalesce"],
                "misfire_grace_time": config["misfire_grace_time"],
                "max_instances": 1,
            },
            timezone=UTC,
        )
        scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        return scheduler

    scheduler = build(config["url"])
    scheduler.start(paused=True)
    n = config["jobs"]
    mode = config["mode"]
    started = time.perf_counter()
    if mode == "date":
        t0 = datetime.fromtimestamp(config["t0"], UTC)
        for i in range(n):
            name = f"burst{i:05d}"
            scheduler.add_job(BODY, "date", run_date=t0, args=[name, config["t0"]], id=name)
    elif mode == "interval":
        start = datetime.fromtimestamp(config["start"], UTC)
        for i in range(n):
            name = f"tick{i:05d}"
            scheduler.add_job(BODY, "interval", seconds=1, start_date=start, args=[name], id=name)
    elif mode == "idle":
        at = datetime.fromtimestamp(config["at"], UTC)
        for i in range(n):
            scheduler.add_job(NOOP, "date", run_date=at, id=f"idle{i:06d}")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    created = time.perf_counter() - started
    if config.get("run_url"):
        # Run on the stored jobs through another URL (the bench's counting proxy): a
        # fresh scheduler starting on an existing job store.
        scheduler.shutdown(wait=True)
        scheduler = build(config["run_url"])
        scheduler.start(paused=True)
    scheduler.resume()
    say(event="ready", pid=os.getpid(), create_s=created)
    if config.get("expect"):
        threading.Thread(target=announce, args=(config["expect"],), daemon=True).start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    scheduler.shutdown(wait=True)
    records = pair(list(bodies.APS_RECORDS), events)
    with open(config["records"], "w") as out:
        for job, planned, actual in records:
            out.write(bodies.LINE.format(job=job, planned=planned, actual=actual, pid=os.getpid()))
    say(event="done", executions=len(bodies.APS_RECORDS), events=len(events),
        missed_events=len(missed), unpaired=len(bodies.APS_RECORDS) - len(records))
    return 0


def announce(expected: int) -> None:
    """Print ``fired_all`` once ``expected`` bodies ran (the bench then stops waiting
    without asking the database anything)."""
    while len(bodies.APS_RECORDS) < expected:
        time.sleep(0.01)
    say(event="fired_all", at=time.time())


def pair(runs: list[tuple[str, float | None, float]],
         events: list[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """(job, planned, actual) per execution: the planned instant given to the body, else
    the job's n-th EXECUTED event's scheduled_run_time for its n-th execution."""
    by_job: dict[str, list[float]] = defaultdict(list)
    for job, planned_at in events:
        by_job[job].append(planned_at)
    seen: dict[str, int] = defaultdict(int)
    found = []
    for job, planned, actual in sorted(runs, key=lambda r: r[2]):
        index = seen[job]
        seen[job] += 1
        if planned is None:
            times = by_job.get(job, [])
            if index >= len(times):
                continue
            planned = times[index]
        found.append((job, planned, actual))
    return found


if __name__ == "__main__":
    sys.exit(main())
