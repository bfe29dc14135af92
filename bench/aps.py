"""The APScheduler 3.11 workloads: one BackgroundScheduler process (a job store cannot
be shared by two schedulers) with a SQLAlchemyJobStore on a fresh database of the same
MySQL server; see :mod:`bench.aps_runner`."""

from __future__ import annotations

import json
import math
import queue
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import util
from bench.util import LOG_DIR, Server, Window
from bench.wire import CountingProxy

#: What every APScheduler run used (stated in the table). misfire_grace_time and
#: coalesce match quartzlite's defaults (misfire_grace_s 60, misfire_policy fire_once:
#: run the latest passed slot once); APScheduler's own default grace is 1 s.
SETTINGS = {
    "scheduler": "BackgroundScheduler",
    "job_store": "SQLAlchemyJobStore (same MySQL server)",
    "executor": "ThreadPoolExecutor",
    "workers": 20,
    "coalesce": True,
    "misfire_grace_time": 60,
    "max_instances": 1,
}


class Runner:
    """The APScheduler process for one workload, on its own fresh database."""

    def __init__(self, server: Server, name: str, mode: str, jobs: int, port: int | None = None,
                 **extra: Any) -> None:
        self.server = server
        self.database = util.DB_PREFIX + name
        self.records = LOG_DIR / f"{name}.records"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.records.unlink(missing_ok=True)
        server.create(self.database)
        config = {
            "url": util.url_for(self.database, port), "mode": mode, "jobs": jobs,
            "records": str(self.records), "workers": SETTINGS["workers"],
            "coalesce": SETTINGS["coalesce"], "misfire_grace_time": SETTINGS["misfire_grace_time"],
            **extra,
        }
        self.log_path = LOG_DIR / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [util.PY, "-m", "bench.aps_runner", json.dumps(config)], cwd=util.ROOT,
            env=util.env_with_repo(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True, start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self._read("ready", timeout=900)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, expected: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError(f"APScheduler runner exited {self.proc.wait()}; see {self.log_path}")
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == expected:
                return dict(event)
        raise TimeoutError(f"APScheduler runner: no {expected!r} within {timeout}s")

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            done = self._read("done", timeout=300)
        finally:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self._log.close()
            self.server.drop(self.database)
        return done


def burst(server: Server, jobs: int) -> dict[str, Any]:
    t0 = math.ceil(time.time() + 12.0)
    runner = Runner(server, "aps_burst", "date", jobs, t0=t0, expect=jobs)
    create_s = runner.ready["create_s"]
    if time.time() > t0 - 2:
        util.log(f"warning: APScheduler took {create_s:.1f}s to create the burst, T0 is close")
    try:
        with Window(server, [runner.pid], [runner.database]) as window:
            try:
                runner._read("fired_all", timeout=t0 + 120 - time.time())
            except TimeoutError:
                util.log("APScheduler did not run the whole burst within 120 s of T0")
            time.sleep(1.0)
    finally:
        done = runner.stop()
    records = util.read_records(runner.records)
    counters = window.counters()
    return {
        "system": "apscheduler",
        "nodes": 1,
        "jobs": jobs,
        "t0": t0,
        "create_s": round(create_s, 3),
        **util.burst_stats(records, jobs, t0),
        **window.summary(),
        "statements_per_fire": round(counters["Questions"] / len(records), 2) if records else None,
        "cpu_s": {str(runner.pid): window.cpu()[runner.pid]},
        "runner": done,
        "settings": SETTINGS,
    }


def steady(server: Server, name: str, jobs: int, duration: int, warmup: float = 4.0) -> dict[str, Any]:
    # The grid starts at a whole second after the jobs exist (APScheduler creates them
    # one INSERT each, so give it time), then the same warm-up as quartzlite.
    start = math.ceil(time.time() + 3 + jobs / 1500)
    runner = Runner(server, name, "interval", jobs, start=start)
    try:
        ws = math.ceil(max(time.time(), start) + warmup)
        we = ws + duration
        util.sleep_until(ws)
        with Window(server, [runner.pid], [runner.database]) as window:
            util.sleep_until(we)
        threads = util.thread_count(runner.pid)
        time.sleep(2.0)
    finally:
        done = runner.stop()
    records = util.read_records(runner.records)
    names = [f"tick{i:05d}" for i in range(jobs)]
    report = util.slots_report(records, names, ws, we)
    counters = window.counters()
    cpu = window.cpu()
    return {
        "system": "apscheduler",
        "nodes": 1,
        "jobs": jobs,
        "duration_s": duration,
        "create_s": round(runner.ready["create_s"], 3),
        **report,
        "fires_per_s": round(report["fires"] / duration, 1),
        "duplicates_all": util.duplicates(records),
        **window.summary(),
        "statements_per_s": round(counters["Questions"] / window.seconds, 1),
        "statements_per_fire": round(counters["Questions"] / report["fires"], 2) if report["fires"] else None,
        "cpu_s": {str(k): v for k, v in cpu.items()},
        "cpu_ms_per_fire": round(1000 * sum(cpu.values()) / report["fires"], 3) if report["fires"] else None,
        "cpu_utilisation": round(sum(cpu.values()) / window.seconds, 3),
        "threads": {name: threads},
        "runner": done,
        "settings": SETTINGS,
    }


def idle(server: Server, jobs: int, seconds: float, settle: float = 5.0) -> dict[str, Any]:
    at = (datetime.now(UTC) + timedelta(days=180)).replace(microsecond=0).timestamp()
    params = util.server_params()
    proxy = CountingProxy(params["host"], params["port"])
    try:
        runner = Runner(server, f"aps_idle_{jobs}", "idle", jobs, at=at,
                        run_url=util.url_for(util.DB_PREFIX + f"aps_idle_{jobs}", proxy.port))
        create_s = runner.ready["create_s"]
        try:
            time.sleep(settle)
            window, wire, attempts = util.idle_window(server, proxy, [runner.pid],
                                                      [runner.database], seconds)
            threads = util.thread_count(runner.pid)
        finally:
            runner.stop()
    finally:
        proxy.close()
    cpu = window.cpu()[runner.pid]
    return {
        "system": "apscheduler",
        "jobs": jobs,
        "creation": {"path": "BackgroundScheduler.add_job in a loop (paused; one INSERT each)",
                     "jobs": jobs, "seconds": round(create_s, 2),
                     "jobs_per_s": round(jobs / create_s) if create_s else None},
        **window.idle_summary(wire),
        "cpu_s_node": cpu,
        "cpu_pct_node": round(100 * cpu / window.seconds, 2),
        "threads": threads,
        "attempts": attempts,
        "settings": SETTINGS,
    }
