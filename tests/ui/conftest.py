"""Fixtures of the dashboard's browser tests: a real ``quartzlite serve`` (a node and the
API, dashboard included, in one process) on the module's database, and Debian's headless
Chromium driven by Selenium through Debian's chromedriver (``make tools`` installs both;
Selenium Manager never downloads anything).

One server per test module (each test uses its own job names and, when it revokes one,
its own token); one browser per test. Every wait has a deadline (WebDriverWait or
``wait_until``); nothing sleeps and then asserts. The browser's console is read at the
end of every test: a Content-Security-Policy violation fails it (older Chromium logs "Refused to
...", Debian's 156 "... violates the following Content Security Policy directive ...":
both are caught; test_the_console_check_sees_a_csp_violation proves it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, update

from quartzlite.client import SchedulerClient
from tests.cluster.harness import FAST, ROOT, wait_until

from .support import Console, UiServer, assert_no_csp_violations

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


# ---- the database and the client: one per module ----------------------------------------


@pytest.fixture(scope="module")
def db_url(database_url: str) -> str:
    """The session's database with every table emptied once for this module (lock rows
    kept). Module scoped, so that no test empties the tables under the running server."""
    from quartzlite.storage.tables import locks, metadata

    engine = create_engine(database_url)
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            if table is not locks:
                conn.execute(delete(table))
        conn.execute(update(locks).values(version=0))
    engine.dispose()
    return database_url


@pytest.fixture(scope="module")
def client(db_url: str) -> Iterator[SchedulerClient]:
    c = SchedulerClient(db_url)
    yield c
    checked_out = c.db.checked_out()
    c.close()
    assert checked_out == 0, f"{checked_out} connection(s) still checked out"


# ---- the server ----------------------------------------------------------------------------


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def ui_server(client: SchedulerClient, db_url: str) -> Iterator[UiServer]:
    """``quartzlite serve`` on a free port with the harness's FAST node settings, once
    /readyz answers 200 (database, schema and the node's session live)."""
    _, admin_secret = client.create_token("ui-admin", "admin")
    _, viewer_secret = client.create_token("ui-viewer", "viewer")
    fd, log_name = tempfile.mkstemp(prefix="ql-ui-serve-", suffix=".log")
    args = [sys.executable, "-m", "quartzlite", "--database-url", db_url, "serve"]
    for key, value in FAST.items():
        args += [f"--{key}", value]
    args += ["--api-host", "127.0.0.1", "--api-port", "0"]
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
        )
    server = UiServer(proc, Path(log_name), admin_secret, viewer_secret)
    try:
        found = wait_until(
            lambda: re.search(r"API listening on 127\.0\.0\.1:(\d+)", server.log())
            or not server.alive(),
            timeout=60, message="`quartzlite serve` to log where its API listens",
        )
        assert server.alive(), (
            f"`quartzlite serve` exited with {proc.returncode}:\n{server.log()[-6000:]}"
        )
        assert isinstance(found, re.Match)
        server.url = f"http://127.0.0.1:{found.group(1)}"
        wait_until(lambda: _status(f"{server.url}/readyz") == 200 or not server.alive(),
                   timeout=60, message="/readyz to answer 200")
        assert server.alive(), f"`quartzlite serve` died:\n{server.log()[-6000:]}"
        yield server
        assert server.alive(), f"`quartzlite serve` died during the tests:\n{server.log()[-6000:]}"
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"`quartzlite serve` did not exit within 60 s of SIGTERM:\n{server.log()[-6000:]}"
            ) from None
        assert code == 0, f"`quartzlite serve` exited with {code}:\n{server.log()[-6000:]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        server.log_path.unlink(missing_ok=True)


# ---- the browser -------------------------------------------------------------------------


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Headless Chromium (1280x800) through Debian's chromedriver; ``browser.console``
    holds its console messages. A CSP violation in the console fails the test."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: run `make tools` (installs Debian's chromium "
            "and chromium-driver); the browser tests never skip without them",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    # Never let Selenium Manager look for (or download) a browser or a driver.
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,800", "--disable-gpu", "--disable-extensions",
                     "--no-first-run", "--disable-background-networking"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # A window.confirm() that a test did not expect is accepted (click() accepts the
    # expected ones itself, see below).
    options.unhandled_prompt_behavior = "accept"
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.console = Console(driver)
    try:
        yield driver
        assert_no_csp_violations(driver)
    finally:
        driver.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failure: the page the browser was on, its console, and the server's log."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    driver = funcargs.get("browser")
    if driver is not None:
        try:
            console = "\n".join(f"{e['level']} {e['message']}" for e in driver.console.read())
            source = driver.page_source
            report.sections.append(("browser", f"url: {driver.current_url}\n"
                                               f"console:\n{console}\n"
                                               f"page (first 6000 chars):\n{source[:6000]}"))
        except Exception as error:  # noqa: BLE001 - a report's extra must not hide the failure
            report.sections.append(("browser", f"(not readable: {error!r})"))
    server = funcargs.get("ui_server")
    if server is not None:
        report.sections.append(("quartzlite serve log (last 6000 chars)", server.log()[-6000:]))
