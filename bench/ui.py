"""The dashboard's page speed (the issue: "overview, jobs list and job page render in
under 200 ms server time with 100,000 jobs and 1,000,000 runs in the database").

A fresh database (``quartzlite db upgrade``) is seeded by :func:`seed`: jobs through the
bulk path (``SchedulerClient.add_jobs``), runs spread over the last days by direct
multi-row INSERTs, a few live sessions (with runs executing on them) and an audit trail;
then ``ANALYZE TABLE``. A Flask test client of ``quartzlite.api.create_app`` signs in
through the form and times each page (wall time of ``test_client.get``: all of it is
server work: routing, the session check, the reads, the template). For each page the
statements it runs are captured (a ``before_cursor_execute`` listener on the client's
two engines) and explained (MariaDB's ``ANALYZE``: the plan's key and estimated rows,
and the rows it really read).

:func:`seed` is also the synthetic history of ``scripts/screenshots.py`` (a small demo):
with ``jobs=0`` it spreads the runs over the jobs already in the database.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pymysql
from sqlalchemy import create_engine, event, func, insert, select, update
from sqlalchemy.engine import Connection, Engine

from bench import util
from bench.util import Server, Window, log
from quartzlite.storage import tables as _t

#: Jobs per ``add_jobs`` call, runs per INSERT batch.
JOB_CHUNK = 5000
RUN_CHUNK = 10_000
#: The pages the issue names (pass/fail against :data:`LIMIT_MS`); the rest are information.
TARGET_PAGES = ("overview", "jobs", "job")
LIMIT_MS = 200.0
WARMUP = 5
TIMED = 30
#: The fake nodes of the live sessions (host, pid) and of older history.
NODES = (("host-a", 123), ("host-b", 456), ("host-c", 789), ("host-d", 1011), ("host-e", 2024))
SCHEDULES = (
    "0 */5 * * * ?", "*/15 * * * *", "0 0 * * * ?", "30 2 * * *", "@every 10m", "@every 1h",
    "@every 90s", "0 0 12 ? * MON-FRI", "@daily", "0 15 6 * * ?", "*/2 * * * *", "@every 30s",
)
ZONES = ("UTC", "UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
TAGS = ("etl", "billing", "reports", "backup", "ml", "ops", "mail", "cleanup", "gpu", "eu")
OUTPUTS = (
    "ok", "processed {n} rows in {s:.1f}s", "uploaded {n} objects", "sent {n} messages",
    "nothing to do", "rotated {n} files", "checkpoint written ({n} KiB)",
)


def session_id_of(host: str, pid: int) -> str:
    """A stable session id (32 hex digits, like a node's uuid4().hex) for a fake node."""
    return hashlib.sha256(f"{host}:{pid}".encode()).hexdigest()[:32]


def _engine(url: str) -> Engine:
    return create_engine(url, connect_args={"init_command": "SET time_zone='+00:00'"},
                         pool_pre_ping=True)


def seed(
    url: str,
    jobs: int = 100_000,
    runs: int = 1_000_000,
    *,
    span_s: float = 7 * 86400,
    until_s_ago: float = 180,
    weights: Mapping[str, float] | None = None,
    nodes: Sequence[tuple[str, int]] = NODES,
    profile: Sequence[tuple[float, float, float]] = (),
    late_share: float = 0.01,
    sessions: int = 3,
    running: int = 40,
    audit: int = 20_000,
    hot_share: float = 0.5,
    prefix: str = "job-",
    seed_value: int = 20261124,
) -> dict[str, Any]:
    """Seed the (upgraded, empty of these names) database at ``url``.

    ``jobs`` new jobs named ``prefix`` + six digits (a mix of cron and ``@every``
    schedules, time zones, tags; 5% paused) through ``SchedulerClient.add_jobs``; then
    ``runs`` finished runs planned over ``span_s`` seconds ending ``until_s_ago`` seconds
    ago, across *all* the database's jobs (``jobs=0``: those already there): one busiest
    job (a run a minute, up to 1% of the runs), 1% "hot" jobs sharing ``hot_share`` of
    the rest, the others the remainder; or, with ``weights`` (job name: weight), in
    proportion to those (jobs not named get none). They ran on ``nodes`` (host, pid).
    ``profile``: (from, to, density) pieces of the span (fractions, oldest first) where
    runs are denser or sparser than elsewhere (density 1), for a chart with a shape;
    ``late_share`` of the runs started 1-3 s late.
    Statuses: ~95% succeeded, 3% failed, 0.3% timed out, 0.2% abandoned, 0.1% killed, 1%
    missed. Ids follow the planned instants, as a real cluster's do. ``sessions`` fake
    live nodes (the first of ``nodes``) with ``running`` runs executing on them (their
    jobs ``executing``), and ``audit`` audit entries. Then ``ANALYZE TABLE``. Returns
    what it made (counts, seconds, the busiest job)."""
    rng = random.Random(seed_value)  # noqa: S311 - synthetic data, reproducible
    found: dict[str, Any] = {"jobs_created": 0, "runs": 0}
    started = time.perf_counter()
    if jobs:
        found["jobs_created"] = jobs
        found["jobs_seconds"] = round(_seed_jobs(url, jobs, prefix, rng), 1)
        log(f"seed: {jobs:,} jobs in {found['jobs_seconds']} s")
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            now = conn.execute(select(func.utc_timestamp(6))).scalar_one()
            t0 = time.perf_counter()
            found.update(_seed_runs(conn, now, runs, span_s, until_s_ago, hot_share, weights,
                                    nodes, profile, late_share, rng))
            found["runs_seconds"] = round(time.perf_counter() - t0, 1)
            log(f"seed: {found['runs']:,} runs in {found['runs_seconds']} s")
            found["sessions"] = _seed_sessions(conn, now, nodes[:sessions])
            found["running"] = _seed_running(conn, now, running, nodes[:sessions], rng)
            found["audit"] = _seed_audit(conn, now, audit, span_s, rng)
            conn.commit()
            t0 = time.perf_counter()
            for table in ("ql_jobs", "ql_runs", "ql_sessions", "ql_audit"):
                conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
            found["analyze_seconds"] = round(time.perf_counter() - t0, 1)
            found["job_count"] = conn.execute(select(func.count()).select_from(_t.jobs)).scalar_one()
            found["run_count"] = conn.execute(select(func.count()).select_from(_t.runs)).scalar_one()
    finally:
        engine.dispose()
    found["seconds"] = round(time.perf_counter() - started, 1)
    return found


def _seed_jobs(url: str, count: int, prefix: str, rng: random.Random) -> float:
    from quartzlite import SchedulerClient

    specs: list[dict[str, Any]] = []
    for i in range(count):
        name = f"{prefix}{i:06d}"
        tags = sorted(rng.sample(TAGS, rng.choice((0, 1, 1, 2, 3))))
        specs.append({
            "name": name,
            "schedule": SCHEDULES[i % len(SCHEDULES)],
            "timezone": ZONES[i % len(ZONES)],
            "command": f"/opt/jobs/{tags[0] if tags else 'misc'}/run.sh --job {name}",
            "tags": tags,
            "paused": rng.random() < 0.05,
            "timeout_s": 30.0 if i % 3 == 0 else None,
            "description": f"synthetic job {i:,} of the page-speed benchmark",
        })
    started = time.perf_counter()
    with SchedulerClient(url) as client:
        for start in range(0, len(specs), JOB_CHUNK):
            client.add_jobs(specs[start : start + JOB_CHUNK])
    return time.perf_counter() - started


def _counts(n_jobs: int, runs: int, span_s: float, hot_share: float, rng: random.Random) -> list[int]:
    """Runs per job (index into the job list): the busiest first, then hot and cold ones."""
    counts = [0] * n_jobs
    if not n_jobs or not runs:
        return counts
    cap = max(1, int(span_s) - 1)  # at most one run a second
    busiest = min(runs // 100, int(span_s // 60), cap) if n_jobs > 1 else min(runs, cap)
    counts[0] = busiest
    rest = runs - busiest
    others = list(range(1, n_jobs))
    rng.shuffle(others)
    hot = others[: max(1, len(others) // 100)] if others else []
    cold = others[len(hot):]
    hot_runs = round(rest * hot_share) if cold else rest
    for group, total in ((hot, hot_runs), (cold, rest - hot_runs)):
        if not group:
            continue
        each, extra = divmod(total, len(group))
        for k, index in enumerate(group):
            counts[index] = min(cap, each + (1 if k < extra else 0))
    return counts


def _weighted(names: Sequence[str], runs: int, span_s: float, weights: Mapping[str, float]) -> list[int]:
    """Runs per job in proportion to ``weights`` (largest remainders get the rest)."""
    total = sum(max(0.0, weights.get(n, 0.0)) for n in names)
    if total <= 0:
        return [0] * len(names)
    shares = [runs * max(0.0, weights.get(n, 0.0)) / total for n in names]
    counts = [int(x) for x in shares]
    for i in sorted(range(len(names)), key=lambda i: counts[i] - shares[i])[: runs - sum(counts)]:
        counts[i] += 1
    cap = max(1, int(span_s) - 1)
    return [min(c, cap) for c in counts]


def _warp(profile: Sequence[tuple[float, float, float]]) -> Callable[[float], float]:
    """The inverse distribution of a piecewise constant density on [0, 1) (1 outside the
    ``profile``'s pieces): evenly spaced ``u`` become instants that many times denser."""
    cuts = sorted({0.0, 1.0, *(min(max(x, 0.0), 1.0) for a, b, _ in profile for x in (a, b))})
    pieces = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        density = next((d for lo, hi, d in profile if lo <= a and b <= hi), 1.0)
        pieces.append((a, b, max(density, 0.0) * (b - a)))
    total = sum(mass for _, _, mass in pieces) or 1.0

    def warp(u: float) -> float:
        left = u * total
        for a, b, mass in pieces:
            if left < mass:
                return a + (b - a) * left / mass
            left -= mass
        return math.nextafter(1.0, 0.0)

    return warp


def _seed_runs(conn: Connection, now: datetime, runs: int, span_s: float, until_s_ago: float,
               hot_share: float, weights: Mapping[str, float] | None,
               nodes: Sequence[tuple[str, int]], profile: Sequence[tuple[float, float, float]],
               late_share: float, rng: random.Random) -> dict[str, Any]:
    jobs = _t.jobs
    rows = conn.execute(
        select(jobs.c.id, jobs.c.name, jobs.c.paused, jobs.c.timeout_s)
        .where(jobs.c.deleted.is_(False)).order_by(jobs.c.id)
    ).all()
    if not rows or not runs:
        return {"runs": 0, "busiest_job": rows[0].name if rows else None, "busiest_runs": 0}
    # The busiest job: an active one (a paused job with a run a minute looks odd).
    order = sorted(range(len(rows)), key=lambda i: (bool(rows[i].paused), i))
    if weights is None:
        counts = _counts(len(rows), runs, span_s, hot_share, rng)
    else:
        counts = _weighted([rows[i].name for i in order], runs, span_s, weights)
    end = now - timedelta(seconds=until_s_ago)
    start = end - timedelta(seconds=span_s)
    warp = _warp(profile)
    # (planned second since ``start``) << 20 | job position: sorted, ids follow the instants.
    keys: list[int] = []
    for position, count in zip(order, counts, strict=True):
        if not count:
            continue
        offset = rng.random()
        seconds = {int(span_s * warp((i + offset) / count)) for i in range(count)}
        keys.extend((second << 20) | position for second in seconds)
    assert len(rows) < 1 << 20, "job positions are packed in 20 bits"
    keys.sort()
    stmt = insert(_t.runs)
    inserted = 0
    batch: list[dict[str, Any]] = []
    for key in keys:
        row = rows[key & 0xFFFFF]
        planned = start + timedelta(seconds=(key >> 20))
        batch.append(_run_row(row.id, row.name, planned, row.timeout_s, nodes, late_share, rng))
        if len(batch) >= RUN_CHUNK:
            conn.execute(stmt, batch)
            inserted += len(batch)
            batch = []
            if inserted % 200_000 == 0:
                log(f"seed: {inserted:,} runs")
    if batch:
        conn.execute(stmt, batch)
        inserted += len(batch)
    conn.commit()
    top = max(range(len(counts)), key=lambda k: counts[k])
    return {"runs": inserted, "busiest_job": rows[order[top]].name, "busiest_runs": counts[top]}


def _run_row(job_id: int, name: str, planned: datetime, timeout_s: float | None,
             nodes: Sequence[tuple[str, int]], late_share: float, rng: random.Random) -> dict[str, Any]:
    host, pid = nodes[rng.randrange(len(nodes))]
    node, session = f"{host}:{pid}", session_id_of(host, pid)
    r = rng.random()
    late = timedelta(seconds=min(rng.expovariate(1 / 0.015), 1.0) if r >= late_share else rng.uniform(1.0, 3.0))
    started: datetime | None = planned + late
    exit_code: int | None = 0
    error: str | None = None
    n = rng.randrange(1, 5000)
    took = min(rng.lognormvariate(0.0, 1.2), 600.0)
    output = rng.choice(OUTPUTS).format(n=n, s=took)
    status = "succeeded"
    x = rng.random()
    if x < 0.03:
        status, exit_code = "failed", rng.choice((1, 1, 2, 3, 127))
        output = f"{output}\nERROR: upstream returned 503 after {n} rows"
        error = f"exit code {exit_code}"
    elif x < 0.033:
        status, exit_code = "timed_out", None
        took = timeout_s or 30.0
        error = f"timed out after {took:g}s"
    elif x < 0.035:
        status, exit_code = "abandoned", None
        error = f"abandoned: node {node} expired; recovery policy rerun"
    elif x < 0.036:
        status, exit_code, error = "killed", None, "killed on request (token ops-admin)"
    elif x < 0.046:
        status, exit_code, started, output = "missed", None, None, ""
        error = "missed: more than 60s late (misfire grace)"
    return {
        "job_id": job_id, "job_name": name, "fire_id": None if started is None else f"{session[:8]}-{job_id}",
        "planned_at": planned, "slot_at": planned, "attempt": 1,
        "started_at": started,
        "ended_at": None if started is None else started + timedelta(seconds=took),
        "session_id": None if started is None else session, "node": node, "status": status,
        "exit_code": exit_code, "output": output, "error": error,
    }


def _seed_sessions(conn: Connection, now: datetime, live: Sequence[tuple[str, int]]) -> list[str]:
    made = []
    for host, pid in live:
        conn.execute(insert(_t.sessions).values(
            id=session_id_of(host, pid), host=host, pid=pid,
            started_at=now - timedelta(hours=26 + 3 * pid % 17), heartbeat_at=now,
            clock_offset_ms=round((pid % 7 - 3) * 0.4, 1), capacity=16, tags="eu,etl" if pid % 2 else "",
            version="bench",
        ))
        made.append(f"{host}:{pid}")
    return made


def _seed_running(conn: Connection, now: datetime, count: int, live: Sequence[tuple[str, int]],
                  rng: random.Random) -> int:
    """Runs executing now on the fake sessions: planned within the last minutes (after
    every seeded finished run), their jobs ``executing`` with the matching fire id."""
    if not count or not live:
        return 0
    jobs = _t.jobs
    candidates = list(conn.execute(
        select(jobs.c.id, jobs.c.name).where(jobs.c.deleted.is_(False), jobs.c.paused.is_(False),
                                             jobs.c.state == "idle").order_by(jobs.c.id).limit(count * 50)
    ))
    chosen = rng.sample(candidates, min(count, len(candidates)))
    for row in chosen:
        host, pid = live[rng.randrange(len(live))]
        session = session_id_of(host, pid)
        planned = now - timedelta(seconds=rng.uniform(5, 170))
        started = planned + timedelta(seconds=rng.uniform(0.002, 0.05))
        fire_id = f"{session[:8]}-{row.id}"
        conn.execute(insert(_t.runs).values(
            job_id=row.id, job_name=row.name, fire_id=fire_id, planned_at=planned, slot_at=planned,
            attempt=1, started_at=started, session_id=session, node=f"{host}:{pid}",
            status="running", output="",
        ))
        conn.execute(update(jobs).where(jobs.c.id == row.id).values(
            state="executing", owner_session=session, fire_id=fire_id, prepared_at=planned,
            started_at=started,
        ))
    return len(chosen)


def _seed_audit(conn: Connection, now: datetime, count: int, span_s: float, rng: random.Random) -> int:
    if not count:
        return 0
    names = [r[0] for r in conn.execute(select(_t.jobs.c.name).order_by(_t.jobs.c.id).limit(5000))]
    actions = (("jobs.put", "PUT"), ("jobs.pause", "POST"), ("jobs.resume", "POST"),
               ("jobs.trigger", "POST"), ("ui.job_action", "POST"), ("ui.login", "POST"))
    batch: list[dict[str, Any]] = []
    step = span_s / count
    for i in range(count):
        action, method = actions[rng.randrange(len(actions))]
        job = None if action == "ui.login" or not names else rng.choice(names)
        path = "/ui/login" if job is None else f"/api/v1/jobs/{job}"
        batch.append({
            "recorded_at": now - timedelta(seconds=span_s - i * step), "token_name":
            rng.choice(("ops-admin", "ci-deployer", "alice")), "action": action, "job_name": job,
            "client_address": f"10.0.{rng.randrange(4)}.{rng.randrange(2, 250)}",
            "details": f'{{"method": "{method}", "path": "{path}", "status": 200}}',
        })
        if len(batch) >= RUN_CHUNK:
            conn.execute(insert(_t.audit), batch)
            batch = []
    if batch:
        conn.execute(insert(_t.audit), batch)
    return count


# -- measuring ---------------------------------------------------------------------------


CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
FORM_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Capture:
    """Statements sent on the client's engines while ``on``, with their time."""

    on: bool = False
    statements: list[tuple[str, Any, float]] = field(default_factory=list)
    _started: list[float] = field(default_factory=list)

    def before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        self._started.append(time.perf_counter())

    def after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
              executemany: bool) -> None:
        began = self._started.pop() if self._started else time.perf_counter()
        if self.on:
            self.statements.append((statement, parameters, (time.perf_counter() - began) * 1000))

    def attach(self, engines: Sequence[Engine]) -> None:
        for engine in engines:
            event.listen(engine, "before_cursor_execute", self.before)
            event.listen(engine, "after_cursor_execute", self.after)

    @contextmanager
    def recording(self) -> Iterator[list[tuple[str, Any, float]]]:
        self.statements = []
        self.on = True
        try:
            yield self.statements
        finally:
            self.on = False


def pages(busiest: str) -> list[tuple[str, str, bool]]:
    """(key, path, htmx fragment request) of each page measured."""
    return [
        ("overview", "/ui/", False),
        ("overview_live", "/ui/?fragment=live", True),
        ("jobs", "/ui/jobs", False),
        ("jobs_prefix", "/ui/jobs?prefix=job-05", False),
        ("jobs_last_failed", "/ui/jobs?last_status=failed", False),
        ("jobs_executing", "/ui/jobs?state=executing", False),
        ("job", f"/ui/job/{busiest}", False),
        ("job_history", f"/ui/job/{busiest}?fragment=history", True),
        ("runs", "/ui/runs", False),
        ("runs_failed", "/ui/runs?status=failed", False),
        ("runs_job", f"/ui/runs?job={busiest}", False),
        ("audit", "/ui/audit", False),
    ]


def _explain(database: str, statement: str, parameters: Any) -> dict[str, Any]:
    """MariaDB's ANALYZE of one SELECT: each table's access (key, estimated rows, rows
    really read), from a connection of its own."""
    conn = pymysql.connect(**util.server_params(), database=database, autocommit=True,
                           init_command="SET time_zone='+00:00'")
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("ANALYZE " + statement, parameters)
            plan = cur.fetchall()
    finally:
        conn.close()
    tables = []
    for row in plan:
        tables.append({
            "table": row.get("table"), "type": row.get("type"), "key": row.get("key"),
            "rows": row.get("rows"), "r_rows": row.get("r_rows"),
            "extra": (row.get("Extra") or "")[:120],
        })
    # A const/system access (one row by a unique key) has no r_rows: it read its one row.
    return {"tables": tables, "rows_estimate": sum(int(t["rows"] or 0) for t in tables),
            "rows_read": round(sum(float(t["r_rows"] if t["r_rows"] is not None else t["rows"] or 0)
                                   for t in tables), 1)}


def shorten(statement: str, limit: int = 150) -> str:
    """One line, the column lists elided: what a reader needs to see which statement."""
    s = " ".join(statement.split())
    s = re.sub(r"SELECT (?!count)(.{60,}?) FROM", "SELECT … FROM", s)
    s = re.sub(r"%\(\w+\)s", "?", s)
    s = re.sub(r"\((?:\?, ){3,}\?\)", "(?, …, ?)", s)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = util.percentile(ordered, 95)
    return {"median_ms": round(statistics.median(ordered), 1), "p95_ms": round(p95 or 0.0, 1),
            "max_ms": round(ordered[-1], 1), "min_ms": round(ordered[0], 1)}


def measure(server: Server, jobs: int, runs: int, warmup: int = WARMUP, timed: int = TIMED) -> dict[str, Any]:
    """The workload: a fresh database seeded by :func:`seed`, every page timed."""
    from quartzlite import SchedulerClient
    from quartzlite.api import create_app

    database = util.DB_PREFIX + "ui"
    server.drop(database)
    util.quartzlite(database, "db", "upgrade")
    url = util.url_for(database)
    try:
        seeded = seed(url, jobs=jobs, runs=runs)
        client = SchedulerClient(url)
        try:
            _, secret = client.create_token("bench-ui", "admin")
            capture = Capture()
            capture.attach([client.db.engine, client.db.auto])
            app = create_app(client)
            http = app.test_client()
            form = http.get("/ui/login")
            token = FORM_CSRF.search(form.text)
            assert token is not None, "no csrf_token on the sign-in form"
            signed = http.post("/ui/login", data={"token": secret, "csrf_token": token.group(1)})
            assert signed.status_code == 303, f"sign-in answered {signed.status_code}"
            busiest = str(seeded["busiest_job"])
            results: dict[str, Any] = {}
            util.wait_quiet(limit_s=30)
            load_before = os.getloadavg()
            with Window(server, [], [database]) as window:
                for key, path, fragment in pages(busiest):
                    headers = {"HX-Request": "true"} if fragment else {}
                    for _ in range(warmup):
                        _check(http.get(path, headers=headers), path)
                    times = []
                    for _ in range(timed):
                        t0 = time.perf_counter()
                        response = http.get(path, headers=headers)
                        times.append((time.perf_counter() - t0) * 1000)
                        _check(response, path)
                    with capture.recording() as statements:
                        _check(http.get(path, headers=headers), path)
                    page: dict[str, Any] = {"path": path, **_stats(times),
                                            "target": key in TARGET_PAGES}
                    if page["target"]:
                        page["pass"] = page["p95_ms"] < LIMIT_MS
                    page["statements"] = [
                        {"sql": shorten(sql), "full_sql": " ".join(sql.split()), "ms": round(ms, 2)}
                        for sql, _, ms in statements
                    ]
                    page["_raw"] = [(sql, params) for sql, params, _ in statements]
                    results[key] = page
                    log(f"ui {key}: median {page['median_ms']} ms, p95 {page['p95_ms']} ms, "
                        f"max {page['max_ms']} ms, {len(statements)} statements")
            load_after = os.getloadavg()
            for page in results.values():
                for entry, (sql, params) in zip(page["statements"], page.pop("_raw"), strict=True):
                    if sql.lstrip().upper().startswith("SELECT"):
                        try:
                            entry["explain"] = _explain(database, sql, params)
                        except pymysql.err.MySQLError as error:
                            entry["explain"] = {"error": str(error)}
        finally:
            client.close()
    finally:
        server.drop(database)
    return {
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "quartzlite_commit": util.git_head(),
        "jobs": seeded["job_count"], "runs": seeded["run_count"], "seed": seeded,
        "warmup": warmup, "timed": timed, "limit_ms": LIMIT_MS, "pages": results,
        "loadavg_before": [round(v, 2) for v in load_before],
        "loadavg_after": [round(v, 2) for v in load_after], **window.summary(),
    }


def _check(response: Any, path: str) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    if 'id="sign-in"' in response.text:
        raise RuntimeError(f"GET {path} answered the sign-in page")


__all__ = ["measure", "seed", "session_id_of"]
