"""Screenshots of the dashboard (docs/ui/*.png) from a demo cluster: ``make screenshots``.

A private database ``qlshots_<random>`` on the server of ``QUARTZLITE_DATABASE_URL``
(dropped at the end, also on failure), upgraded and seeded: ~25 shell jobs with realistic
names, one failing (``exit 3`` with stderr), one timing out, one long ``sleep 600``, one
paused, tags and calendars, plus a few hours of synthetic history (``bench.ui.seed``).
Then a real ``quartzlite serve`` (node and API, on a port it picks) and one more
``quartzlite node`` (so the cluster has two), a few writes through the HTTP API (the
audit trail), and, once the long job executes and runs have failed and timed out,
Debian's headless Chromium (``/usr/bin/chromium`` through ``/usr/bin/chromedriver``;
Selenium Manager never downloads anything) signs in and saves each page.

    .venv/bin/python scripts/screenshots.py [--out docs/ui] [--keep-logs]

Every wait polls against a deadline; nothing sleeps and then assumes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.ui (the synthetic history) lives in the checkout

import pymysql  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/quartzlite"
WIDTH, HEIGHT = 1280, 800
PHONE = (390, 844)
MAX_HEIGHT = 2400
T = TypeVar("T")

FAILING = "import-partner-feed"
TIMING_OUT = "reconcile-ledger"
LONG = "rebuild-search-index"
PAUSED = "legacy-ftp-sync"

#: (name, schedule, timezone, command, extra fields). Every-few-seconds jobs build real
#: history while the shots are prepared; the rest are the cron jobs of a real shop.
JOBS: list[tuple[str, str, str, str, dict[str, Any]]] = [
    ("heartbeat-ping", "@every 5s", "UTC", 'echo "ping ok $(date -u +%H:%M:%S)"',
     {"description": "liveness ping to the status page", "tags": ["ops"]}),
    ("queue-drain", "@every 7s", "UTC", 'sleep 0.4; echo "drained $((RANDOM % 40)) messages"',
     {"description": "moves dead letters back to the work queue", "timeout_s": 60}),
    ("metrics-scrape", "@every 10s", "UTC", 'echo "scraped $((RANDOM % 300 + 900)) series"',
     {"tags": ["ops"]}),
    ("refresh-cache", "@every 12s", "UTC", 'sleep 0.2; echo "warmed $((RANDOM % 50 + 10)) keys"', {}),
    ("etl-orders", "@every 15s", "UTC",
     'sleep 1; echo "loaded $((RANDOM % 900 + 100)) orders into the warehouse"',
     {"tags": ["etl"], "max_attempts": 3, "retry_backoff_s": 5, "description": "orders -> warehouse"}),
    ("cleanup-tmp", "@every 20s", "UTC", 'echo "removed $((RANDOM % 5)) stale files from /var/tmp/app"',
     {"tags": ["ops"]}),
    ("sync-inventory", "@every 30s", "UTC", 'sleep 2; echo "synced $((RANDOM % 200)) SKUs"',
     {"tags": ["etl", "eu"]}),
    (FAILING, "@every 6s", "UTC",
     'echo "fetching feed from partner-sftp.example.com"; '
     'echo "error: connection refused (partner-sftp.example.com:22)" >&2; exit 3',
     {"description": "pulls the partner's product feed (their SFTP is down)", "tags": ["etl"]}),
    (TIMING_OUT, "@every 20s", "UTC", 'echo "matching payments against ledger"; sleep 30',
     {"timeout_s": 3, "description": "payments vs. ledger; the bank's API is slow today",
      "tags": ["billing"]}),
    (LONG, "@daily", "UTC", 'echo "reindexing 2.1M documents"; sleep 600',
     {"timeout_s": 3600, "description": "full rebuild of the product search index"}),
    ("backup-db", "0 30 2 * * ?", "Europe/Berlin", "pg_dump -Fc shop | gzip > /backups/shop-$(date +%F).dump.gz",
     {"timeout_s": 3600, "tags": ["backup"], "calendars": ["maintenance"]}),
    ("send-digest", "0 0 8 ? * MON-FRI", "Europe/Berlin", "python -m shop.mail.digest --since 24h",
     {"tags": ["mail"], "calendars": ["holidays-de"], "description": "daily digest to the sales team"}),
    ("report-weekly", "0 0 6 ? * MON", "Europe/London", "python -m shop.reports.weekly --email cfo@example.com",
     {"tags": ["reports"], "calendars": ["holidays-de"]}),
    ("invoice-run", "0 0 1 1 * ?", "Europe/Berlin", "python -m shop.billing.invoices --month last",
     {"tags": ["billing"], "max_attempts": 5, "retry_backoff_s": 60, "calendars": ["holidays-de"]}),
    ("rotate-logs", "@hourly", "UTC", "logrotate /etc/logrotate.d/shop", {"tags": ["ops"]}),
    ("export-analytics", "0 15 3 * * ?", "UTC", "python -m shop.analytics.export --to s3://analytics/daily",
     {"tags": ["etl", "eu"]}),
    ("warm-search-index", "0 */10 * * * ?", "UTC", "curl -fsS http://search.internal/warm", {}),
    ("expire-sessions", "*/5 * * * *", "UTC", "python -m shop.auth.expire_sessions", {}),
    ("etl-customers", "0 */15 * * * ?", "UTC", "python -m shop.etl.customers", {"tags": ["etl"]}),
    ("ml-train-ranker", "0 0 4 ? * SUN", "UTC", "python -m shop.ml.train --model ranker",
     {"tags": ["gpu"], "timeout_s": 14400}),
    ("sitemap-generate", "0 45 1 * * ?", "America/New_York", "python -m shop.seo.sitemap", {}),
    ("certs-check", "0 0 9 * * ?", "UTC", "check-certs --warn-days 21 shop.example.com", {"tags": ["ops"]}),
    ("newsletter-send", "0 0 10 ? * THU", "Europe/Paris", "python -m shop.mail.newsletter",
     {"tags": ["mail"], "calendars": ["holidays-de"]}),
    ("archive-orders", "0 0 3 1 * ?", "UTC", "python -m shop.etl.archive --older-than 2y", {"tags": ["etl"]}),
    (PAUSED, "@every 1m", "UTC", "lftp -f /etc/shop/legacy-sync.lftp",
     {"description": "old supplier FTP, replaced by the partner feed"}),
]
#: Runs a minute of each job in the synthetic history (its schedule's rate, about).
RATES = {"heartbeat-ping": 12, "queue-drain": 8.5, "metrics-scrape": 6, "refresh-cache": 5,
         "etl-orders": 4, "cleanup-tmp": 3, "sync-inventory": 2, FAILING: 10, TIMING_OUT: 3,
         "warm-search-index": 0.1, "expire-sessions": 0.2, "etl-customers": 0.07, PAUSED: 1}
#: The synthetic history's shape over its 3 hours (oldest first): a quiet spell (a network
#: incident, ~2 h ago) and a busy half hour (a backlog drained, ~1 h ago).
PROFILE = ((0.30, 0.36, 0.15), (0.62, 0.72, 1.8))
CALENDARS = [
    {"name": "holidays-de", "timezone": "Europe/Berlin", "description": "German public holidays",
     "rules": {"yearly": ["01-01", "05-01", "10-03", "12-25", "12-26"],
               "dates": ["2026-04-03", "2026-04-06", "2026-05-14", "2026-05-25"]}},
    {"name": "maintenance", "timezone": "Europe/Berlin", "description": "the DBA's Sunday window",
     "rules": {"windows": ["* 0-59 2-3 ? * SUN"]}},
]


def log(message: str) -> None:
    sys.stderr.write(f"[screenshots {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(interval)


# -- the database --------------------------------------------------------------------------


def server_connect(url: str) -> Any:
    u = make_url(url)
    return pymysql.connect(host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                           password=u.password or "", autocommit=True)


@contextmanager
def private_database(base_url: str) -> Iterator[str]:
    """A fresh ``qlshots_<random>`` database on ``base_url``'s server, dropped afterwards."""
    name = f"qlshots_{secrets.token_hex(4)}"
    url = make_url(base_url).set(database=name).render_as_string(hide_password=False)
    conn = server_connect(base_url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        log(f"database {name}")
        try:
            yield url
        finally:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            log(f"dropped {name}")
    finally:
        conn.close()


def quartzlite_env() -> dict[str, str]:
    """Our environment without QUARTZLITE_* settings, plus the ones the demo wants: short
    grace periods (stopping does not wait for the ``sleep 600``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARTZLITE_")}
    env.update({"QUARTZLITE_SHUTDOWN_GRACE_S": "2", "QUARTZLITE_KILL_GRACE_S": "1",
                "QUARTZLITE_POLL_INTERVAL_S": "1"})
    return env


def cli(url: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "quartzlite", "--database-url", url, *args],
                          cwd=ROOT, env=quartzlite_env(), capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"quartzlite {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def seed_demo(url: str) -> None:
    from bench.ui import seed
    from quartzlite import SchedulerClient

    with SchedulerClient(url) as client:
        for calendar in CALENDARS:
            client.add_calendar(calendar)
        for name, schedule, zone, command, extra in JOBS:
            if name == PAUSED:
                continue  # created and paused through the API below (the audit trail)
            client.add_job({"name": name, "schedule": schedule, "timezone": zone, "command": command,
                            **extra})
    host = socket.gethostname()
    # Three hours of history before the cluster starts, at about each job's own rate, run
    # by two earlier incarnations of the nodes, with a quiet spell and a busy one.
    weights = {name: rate for name, rate in RATES.items() if name != PAUSED}
    made = seed(url, jobs=0, runs=round(sum(weights.values()) * 180), span_s=3 * 3600, until_s_ago=20,
                weights=weights, nodes=((host, 4121), (host, 4388)), sessions=0, running=0, audit=0,
                profile=PROFILE, late_share=0.003)
    log(f"synthetic history: {made['runs']:,} runs over 3 hours")


# -- the cluster ---------------------------------------------------------------------------


class Proc:
    """One quartzlite process in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, env=quartzlite_env(), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> bool:
        """False while it runs (for ``x or p.check()`` in a wait); raises once it exited."""
        if not self.alive():
            raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log()[-4000:]}")
        return False

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM, wait; SIGKILL to the group if it does not stop in time."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop within {timeout:g} s: SIGKILL")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever its runs left behind
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(30)
        log(f"{self.name} stopped ({self.proc.returncode})")


def http(base: str, method: str, path: str, secret: str | None = None,
         body: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.startswith(b"{") else raw
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, None


def start_cluster(url: str, logs: Path) -> tuple[list[Proc], str]:
    serve = Proc("serve", [sys.executable, "-m", "quartzlite", "--database-url", url, "serve",
                           "--tag", "ops", "--api-host", "127.0.0.1", "--api-port", "0"], logs)
    procs = [serve]
    found = wait_for(lambda: re.search(r"API listening on 127\.0\.0\.1:(\d+)", serve.log())
                     or serve.check(), 60, "`quartzlite serve` to say where its API listens")
    assert isinstance(found, re.Match)
    base = f"http://127.0.0.1:{found.group(1)}"
    wait_for(lambda: http(base, "GET", "/readyz")[0] == 200 or serve.check(), 60, "/readyz to answer 200")
    procs.append(Proc("node-2", [sys.executable, "-m", "quartzlite", "--database-url", url, "node",
                                 "--tag", "etl", "--tag", "eu", "--tag", "billing"], logs))
    log(f"serve at {base}, and a second node")
    return procs, base


def wait_for_story(url: str, procs: list[Proc], since: datetime) -> None:
    """Two live nodes, the long job executing, real failures and a timeout."""
    from quartzlite import SchedulerClient

    with SchedulerClient(url) as client:
        def live() -> bool:
            for p in procs:
                p.check()
            return len(client.cluster()) == 2

        wait_for(live, 60, "two live nodes")

        def executing() -> bool:
            return client.get_job(LONG).state.value == "executing"

        wait_for(executing, 60, f"{LONG} to execute")

        def count(job: str, status: str) -> int:
            return sum(1 for r in client.list_runs(job=job, status=status, since=since, limit=50).items)

        wait_for(lambda: count(FAILING, "failed") >= 3, 90, f"3 failed runs of {FAILING}")
        wait_for(lambda: count(TIMING_OUT, "timed_out") >= 1, 90, f"a timed-out run of {TIMING_OUT}")
        wait_for(lambda: count("etl-orders", "succeeded") >= 2, 90, "2 runs of etl-orders")
    log("the story is in place: two nodes, a long run, failures, a timeout")


# -- the browser ---------------------------------------------------------------------------


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        raise SystemExit(f"{' and '.join(missing)} not found: `make tools` installs Debian's chromium "
                         "and chromium-driver")
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium Manager download anything
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     f"--window-size={WIDTH},{HEIGHT}", "--disable-gpu", "--disable-extensions",
                     "--no-first-run", "--disable-background-networking", "--hide-scrollbars",
                     "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(argument)
    # The pages show times in the viewer's zone: UTC, so that the shots match the text.
    service = Service(CHROMEDRIVER, env={**os.environ, "TZ": "UTC"})
    return webdriver.Chrome(options=options, service=service)


class Shooter:
    def __init__(self, driver: Any, base: str, out: Path) -> None:
        self.driver = driver
        self.base = base
        self.out = out

    def wait(self, condition: Callable[[Any], Any], what: str, timeout: float = 30) -> Any:
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, timeout, poll_frequency=0.1, ignored_exceptions=(
            NoSuchElementException, StaleElementReferenceException)).until(
            condition, message=f"waited {timeout:g} s for {what} on {self.driver.current_url}")

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def shown(self, selector: str, timeout: float = 30) -> Any:
        return self.wait(lambda d: (e := self.css(selector)).is_displayed() and e, selector, timeout)

    def open(self, path: str, ready: str) -> None:
        """Load ``path`` (signed in: never the sign-in page) and wait for ``ready`` and for
        app.js to have localized every time."""
        self.driver.get(self.base + path)
        self.shown(ready)
        if "/ui/login" in self.driver.current_url and path != "/ui/login":
            raise RuntimeError(f"{path} showed the sign-in page")
        self.wait(lambda d: d.execute_script(
            "return document.querySelectorAll('time[datetime]:not([data-localized])').length === 0"),
            "app.js to localize the times")

    def type(self, selector: str, text: str) -> None:
        from selenium.webdriver.common.keys import Keys

        element = self.shown(selector)
        element.send_keys(Keys.CONTROL, "a")
        element.send_keys(Keys.DELETE)
        element.send_keys(text)

    def viewport(self, width: int, height: int) -> None:
        """Emulate a ``width`` x ``height`` viewport (a phone's below 600 px: its meta
        viewport applies), exactly the size of the screenshot; the window stays 1280x800
        (its own size counts the browser's frame)."""
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        self.wait(lambda d: d.execute_script(
            "return [document.documentElement.clientWidth, window.innerHeight]") == [width, height],
            f"a {width}x{height} viewport", timeout=10)

    def save(self, name: str, width: int = WIDTH, full: bool = True) -> None:
        """The page at ``width``; with ``full``, as tall as its content (capped)."""
        base = HEIGHT if width == WIDTH else PHONE[1]
        self.viewport(width, base)
        height = base
        if full:
            content = int(self.driver.execute_script(
                "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
            height = min(max(content, base), MAX_HEIGHT)
            self.viewport(width, height)
        path = self.out / f"{name}.png"
        if not self.driver.save_screenshot(str(path)):
            raise RuntimeError(f"could not save {path}")
        log(f"saved {path.relative_to(ROOT)} ({width}x{height})")
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def shoot(base: str, secret: str, out: Path) -> None:
    driver = browser()
    try:
        s = Shooter(driver, base, out)
        s.open("/ui/login", "#login-form")
        s.type("#token", secret)
        s.save("login", full=False)
        s.css("#sign-in").click()
        s.wait(lambda d: "/ui/login" not in d.current_url and self_has(d, "#nav"), "the signed-in overview")

        s.open("/ui/", "#nodes")
        s.wait(lambda d: len(s.all("#nodes tr.node")) == 2, "two nodes in #nodes")
        s.wait(lambda d: any(LONG in r.text for r in s.all("#executing tr[data-run-id]")),
               f"{LONG} in #executing")
        s.shown("svg.chart")
        s.save("overview")

        s.open("/ui/jobs", "#jobs-table")
        s.save("jobs")

        s.open(f"/ui/job/{FAILING}", "#history")
        s.wait(lambda d: s.all('#history tr[data-status="failed"]'), "failed runs in #history")
        s.save("job")

        s.open("/ui/jobs/new", "#job-form")
        s.type("#name", "nightly-export")
        s.type("#command", "python -m shop.analytics.export --to s3://analytics/nightly")
        s.type("#schedule", "0 30 25 * * ?")  # hour 25: refused
        s.type("#description", "nightly export for the data team")
        s.css("#save").click()
        s.wait(lambda d: s.css("#schedule").get_attribute("aria-invalid") == "true"
               and s.css("#error-schedule").text.strip(), "the schedule's inline error")
        s.type("#schedule", "0 30 2 * * ?")
        s.type("#timezone", "Europe/Berlin")
        driver.execute_script(
            "var el = document.getElementById('preview_from'); el.value = '2027-03-26';"
            "el.dispatchEvent(new Event('change', {bubbles: true}));")
        s.wait(lambda d: "0 30 2 * * ?" in s.css("#schedule-preview").text
               and "Europe/Berlin" in s.css("#schedule-preview").text
               and "2027-03-2" in s.css("#schedule-preview").text, "the preview of 0 30 2 * * ? in Berlin")
        s.save("job-form")

        s.open("/ui/runs", "#runs-table")
        s.save("runs")

        s.open("/ui/audit", "#audit-table")
        s.save("audit")

        s.open("/ui/jobs", "#jobs-table")
        s.save("jobs-phone", width=PHONE[0])
    finally:
        driver.quit()


def self_has(driver: Any, selector: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(driver.find_elements(By.CSS_SELECTOR, selector))


# -- main ----------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "ui"), help="where the PNGs go")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base_url = os.environ.get("QUARTZLITE_DATABASE_URL") or DEFAULT_URL
    logs = Path(tempfile.mkdtemp(prefix="qlshots-logs-"))
    procs: list[Proc] = []
    failed = True
    try:
        with private_database(base_url) as url:
            try:
                cli(url, "db", "upgrade")
                seed_demo(url)
                from quartzlite import SchedulerClient

                with SchedulerClient(url) as client:
                    _, secret = client.create_token("screenshots", "admin")
                    client.create_token("grafana", "viewer")
                since = datetime.now(UTC) - timedelta(seconds=5)
                procs, base = start_cluster(url, logs)
                # A few writes through the API, for the audit trail and the story.
                name, schedule, zone, command, extra = next(j for j in JOBS if j[0] == PAUSED)
                for method, path, body in (
                    ("PUT", f"/api/v1/jobs/{PAUSED}",
                     {"schedule": schedule, "timezone": zone, "command": command, **extra}),
                    ("POST", f"/api/v1/jobs/{PAUSED}/pause", None),
                    ("PATCH", "/api/v1/jobs/report-weekly", {"description": "weekly KPIs for the CFO"}),
                    ("POST", f"/api/v1/jobs/{LONG}/trigger", None),
                ):
                    status, answer = http(base, method, path, secret, body)
                    if status not in (200, 201, 202):
                        raise RuntimeError(f"{method} {path} answered {status}: {answer!r}")
                wait_for_story(url, procs, since)
                shoot(base, secret, out)
                failed = False
            finally:
                for proc in reversed(procs):
                    proc.stop()
                if failed:
                    for proc in procs:
                        log(f"{proc.name} log (tail):\n{proc.log()[-3000:]}")
    finally:
        if args.keep_logs or failed:
            log(f"logs in {logs}")
        else:
            for file in logs.iterdir():
                file.unlink()
            logs.rmdir()
    log(f"wrote {len(list(out.glob('*.png')))} screenshots to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
