"""The dashboard end to end: Debian's headless Chromium against a real ``quartzlite serve``
(its node runs the jobs), every step through the browser as an operator would take it:
sign-in, the overview, a job created through the form (its errors inline, the schedule's
preview and the run history updating without a page load), trigger and kill, pause and
resume, delete with confirmation, what a viewer sees, forged POSTs refused, sign-out and
revocation, the Content-Security-Policy, and a phone-sized screen.

Each test uses its own job names (the server is shared by the module); every wait has a
deadline; the console of every page is checked for CSP violations (see conftest.py)."""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest

from quartzlite.client import SchedulerClient
from quartzlite.enums import RunStatus
from quartzlite.errors import NotFound

from .support import (
    COOKIE,
    UiServer,
    assert_html,
    assert_no_csp_violations,
    click,
    document_is_marked,
    find,
    mark_document,
    present,
    session_cookie,
    sign_in,
    type_into,
    wait,
    wait_for_url,
)

pytestmark = [pytest.mark.db, pytest.mark.cluster]

#: The write controls no viewer may see (the contract's list).
WRITE_CONTROLS = ("#trigger", "#pause", "#resume", "#kill", "#delete", "#edit", "#new-job")
#: The job form's fields, named like the API's.
JOB_FIELDS = (
    "name", "schedule", "timezone", "command", "callable", "kwargs", "timeout_s",
    "max_attempts", "retry_backoff_s", "retry_max_backoff_s", "misfire_policy",
    "misfire_grace_s", "overrun_policy", "recovery_policy", "priority", "tags", "calendars",
    "description", "paused", "start_at", "end_at", "max_runs", "jitter_s",
)
#: A schedule that does not fire during the tests (the API tests' choice too).
NEVER_SOON = "0 0 1 1 *"
FLASH_OK = "#flash.ok, #flash .flash.ok"
#: Markup in a job's description: shown as text, never run.
XSS = '<img src="x" onerror="window.__xss = 1">'


# ---- helpers -------------------------------------------------------------------------------


def job_page(server: UiServer, name: str) -> str:
    return f"{server.url}/ui/job/{quote(name)}"


def response_status(browser: Any) -> int | None:
    """The HTTP status of the document the browser shows (Navigation Timing)."""
    status = browser.execute_script(
        "var e = performance.getEntriesByType('navigation')[0];"
        " return e ? e.responseStatus : null;")
    return None if status is None else int(status)


def htmx_requests(browser: Any) -> int:
    """How many requests the page's scripts made (htmx's refreshes)."""
    return int(browser.execute_script(
        "return performance.getEntriesByType('resource').filter(function (e) {"
        " return e.initiatorType === 'xmlhttprequest' || e.initiatorType === 'fetch'; }).length;"))


def history_has(browser: Any, status: str) -> bool:
    return present(browser, f'#history tr[data-run-id][data-status="{status}"]')


def csrf_token(browser: Any) -> str:
    """The session's CSRF token as the page carries it (meta for htmx, or a form's field)."""
    token = browser.execute_script(
        "var m = document.querySelector('meta[name=\"csrf-token\"]');"
        " if (m && m.getAttribute('content')) { return m.getAttribute('content'); }"
        " var i = document.querySelector('input[name=\"csrf_token\"]');"
        " return i ? i.value : null;")
    assert token, f"no CSRF token on {browser.current_url}"
    return str(token)


def http_request(server: UiServer, method: str, path: str, *, cookie: str | None = None,
                 form: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """One request as a forger would send it (no redirect followed): status, headers
    (lower-case names) and body. Same-origin ``Origin``, so that only what the test
    leaves out (the CSRF token) differs from the browser's own request."""
    parts = urlsplit(server.url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Origin": server.url}
    if cookie is not None:
        headers["Cookie"] = f"{COOKIE}={cookie}"
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text
    finally:
        conn.close()


def paused(client: SchedulerClient, name: str) -> bool:
    return client.get_job(name).spec.paused


def sign_in_as(browser: Any, server: UiServer, secret: str, expected_name: str, role: str) -> None:
    sign_in(browser, server.url, secret)
    who = find(browser, "#whoami").text
    assert expected_name in who, who
    assert role in who.lower(), who


# ---- the harness itself ----------------------------------------------------------------------


def test_the_harness_serves_healthz_to_the_browser(ui_server: UiServer, browser: Any) -> None:
    browser.get(f"{ui_server.url}/healthz")
    assert '"status"' in find(browser, "body").text
    assert response_status(browser) == 200


@pytest.fixture
def csp_breaking_page() -> Iterator[str]:
    """A page on this machine whose CSP forbids its own inline script and style."""
    page = (b"<!doctype html><html><head><title>x</title></head><body>"
            b"<p style='color: red'>inline style</p><script>document.title = 'ran';</script>"
            b"</body></html>")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Security-Policy", "default-src 'none'; script-src 'self'")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_console_check_sees_a_csp_violation(browser: Any, csp_breaking_page: str) -> None:
    """The check every test ends with is not vacuous."""
    browser.get(csp_breaking_page)
    violations = wait(browser, lambda b: len(b.console.csp_violations()) >= 2 and b.console.csp_violations(),
                      "both CSP violations logged")
    assert any("inline script" in v for v in violations), violations
    assert any("inline style" in v for v in violations), violations
    assert browser.title == "x"  # the inline script did not run
    browser.console.entries.clear()


# ---- a. sign-in and the overview ----------------------------------------------------------


def test_sign_in_shows_the_overview_with_the_node(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    browser.get(f"{ui_server.url}/ui/")
    wait_for_url(browser, r"/ui/login\?next=.+")
    assert_html(browser)

    type_into(browser, "#login-form #token", "not-a-token")
    click(browser, "#sign-in")
    error = find(browser, "#login-error")
    assert error.text.strip()
    assert response_status(browser) == 401
    wait_for_url(browser, r"/ui/login(\?.*)?")

    type_into(browser, "#login-form #token", ui_server.admin_secret)
    click(browser, "#sign-in")
    wait_for_url(browser, r"/ui/")
    who = find(browser, "#whoami").text
    assert "ui-admin" in who
    assert "admin" in who.lower()
    for link in ("#nav-overview", "#nav-jobs", "#nav-runs", "#nav-audit"):
        find(browser, f"#nav {link}")
    cookie = browser.get_cookie(COOKIE)
    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"

    sessions = client.cluster()
    assert len(sessions) == 1
    node = wait(browser, lambda b: b.find_elements("css selector", "#nodes tr.node"),
                "the node in #nodes")
    assert len(node) == 1
    row = node[0].text
    assert sessions[0].id in row or sessions[0].host in row, row
    for region in ("#executing", "#failures", "#missed", "#chart svg.chart"):
        assert present(browser, region), region


# ---- b. a job through the form --------------------------------------------------------------


def test_create_a_job_through_the_form_and_watch_it_run(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    name = "ui-every-second"
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(f"{ui_server.url}/ui/jobs")
    click(browser, "a#new-job")
    wait_for_url(browser, r"/ui/jobs/new")
    form = find(browser, "#job-form")

    # Every field of the API, each with its label.
    for field in JOB_FIELDS:
        inputs = form.find_elements("css selector", f'[name="{field}"]')
        assert inputs, f"no input named {field}"
        ident = inputs[0].get_attribute("id")
        assert ident, f"the input {field} has no id"
        assert form.find_elements("css selector", f'label[for="{ident}"]'), f"no label for {field}"

    # An invalid cron: the error inline, the field marked, no job.
    type_into(browser, '#job-form [name="name"]', name)
    type_into(browser, '#job-form [name="schedule"]', "61 * * * *")
    type_into(browser, '#job-form [name="command"]', "echo hi")
    click(browser, "#save")
    error = find(browser, "#error-schedule")
    assert error.text.strip(), "the schedule's error is empty"
    assert response_status(browser) == 400
    wait_for_url(browser, r"/ui/jobs/new")
    schedule = find(browser, '#job-form [name="schedule"]')
    assert schedule.get_attribute("aria-invalid") == "true"
    assert schedule.get_attribute("value") == "61 * * * *"  # what was typed is kept
    with pytest.raises(NotFound):
        client.get_job(name)

    # The preview follows the typing, without a page load.
    mark_document(browser)
    type_into(browser, '#job-form [name="schedule"]', "*/5 * * * *")

    def instants(b: Any) -> list[datetime] | bool:
        """The instants in the preview: <time datetime> elements, or written out."""
        times = b.find_elements("css selector", "#schedule-preview time[datetime]")
        found = [datetime.fromisoformat(t.get_attribute("datetime")) for t in times]
        if not found:
            text = find(b, "#schedule-preview").text
            found = [datetime.fromisoformat(f"{day}T{clock}") for day, clock in
                     re.findall(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)", text)]
        return found or False

    shown = wait(browser, instants, "the next fire instants in #schedule-preview")
    assert all(t.minute % 5 == 0 and t.second == 0 for t in shown), shown
    assert document_is_marked(browser), "the preview reloaded the page"

    # A valid every-second job: saved, and its page shows the runs as they happen.
    type_into(browser, '#job-form [name="name"]', name)
    type_into(browser, '#job-form [name="schedule"]', "@every 1s")
    type_into(browser, '#job-form [name="command"]', "echo hi")
    click(browser, "#save")
    try:
        wait_for_url(browser, rf"/ui/job/{name}")
        assert client.get_job(name).spec.schedule == "@every 1s"
        find(browser, "#job-definition")
        find(browser, "#history")
        mark_document(browser)
        wait(browser, lambda b: history_has(b, "succeeded"), "a succeeded run in #history")
        assert document_is_marked(browser), "#history changed by a page load, not by itself"

        # The run's page, from the runs list, shows what the command printed.
        browser.get(f"{ui_server.url}/ui/runs?job={name}")
        find(browser, "#run-filters")
        find(browser, "#runs-table tr[data-run-id]")
        run = next(r for r in client.list_runs(job=name).items
                   if r.status is RunStatus.SUCCEEDED)
        browser.get(f"{ui_server.url}/ui/runs/{run.id}")
        find(browser, "#run-detail")
        assert find(browser, "pre#run-output").text.strip() == "hi"
    finally:
        try:
            client.delete_job(name)  # a job every second: not for the rest of the module
        except NotFound:
            pass


# ---- c. trigger and kill ------------------------------------------------------------------


def test_trigger_then_kill_a_long_job(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    name = "ui-sleeper"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "sleep 300"})
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(job_page(ui_server, name))
    find(browser, "#job-state")
    assert not present(browser, "#kill")
    # The parameters, outside the controls' live region, go with its Trigger button (by
    # the form attribute), also once a refresh replaced the region.
    type_into(browser, "#params", "who=browser\nwhen=now")
    browser.execute_script("document.getElementById('job-controls').__old = true;")
    wait(browser, lambda b: b.execute_script(
        "return !document.getElementById('job-controls').__old;"), "a refresh of #job-controls")

    click(browser, "#trigger")
    wait_for_url(browser, rf"/ui/job/{name}")
    find(browser, FLASH_OK)
    mark_document(browser)
    wait(browser, lambda b: history_has(b, RunStatus.RUNNING.value), "a running run in #history")
    assert document_is_marked(browser)

    if not present(browser, "#kill"):  # the buttons are rendered with the page
        browser.refresh()
    click(browser, "#kill")
    wait_for_url(browser, rf"/ui/job/{name}")
    find(browser, FLASH_OK)
    wait(browser, lambda b: history_has(b, RunStatus.KILLED.value), "the killed run in #history")
    runs = client.list_runs(job=name).items
    assert [r.status for r in runs] == [RunStatus.KILLED]
    assert runs[0].params == {"who": "browser", "when": "now"}


# ---- d. pause and resume ------------------------------------------------------------------


def test_pause_and_resume(ui_server: UiServer, browser: Any, client: SchedulerClient) -> None:
    name = "ui-pausable"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "true"})
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(job_page(ui_server, name))

    click(browser, "#pause")
    wait_for_url(browser, rf"/ui/job/{name}")
    find(browser, "#resume")
    assert not present(browser, "#pause")
    assert "paused" in find(browser, "#job-state").text.lower()
    assert paused(client, name) is True

    click(browser, "#resume")
    wait_for_url(browser, rf"/ui/job/{name}")
    find(browser, "#pause")
    assert not present(browser, "#resume")
    assert "paused" not in find(browser, "#job-state").text.lower()
    assert paused(client, name) is False

    # Both writes are in the audit trail.
    browser.get(f"{ui_server.url}/ui/audit")
    table = find(browser, "#audit-table")
    assert table.text.count(name) >= 2, table.text


# ---- e. delete with confirmation --------------------------------------------------------


def test_delete_with_confirmation(ui_server: UiServer, browser: Any, client: SchedulerClient) -> None:
    name = "ui-doomed"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "true"})
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(f"{ui_server.url}/ui/jobs")
    find(browser, f'#jobs-table tr[data-job="{name}"] a.job-link').click()
    wait_for_url(browser, rf"/ui/job/{name}")

    click(browser, "a#delete")
    wait_for_url(browser, rf"/ui/job/{name}/delete")
    assert client.get_job(name).name == name  # asking deletes nothing
    click(browser, "#confirm-delete")
    wait_for_url(browser, r"/ui/jobs(\?.*)?")
    find(browser, "#jobs-table")
    find(browser, FLASH_OK)
    assert not present(browser, f'#jobs-table tr[data-job="{name}"]')
    with pytest.raises(NotFound):
        client.get_job(name)


# ---- f. the viewer, and forged POSTs ---------------------------------------------------


def test_a_viewer_sees_no_write_controls(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    name = "ui-viewed"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "true"})
    sign_in_as(browser, ui_server, ui_server.viewer_secret, "ui-viewer", "viewer")
    assert not present(browser, "#nav-audit")

    browser.get(job_page(ui_server, name))
    find(browser, "#job-definition")
    find(browser, "#history")
    shown = [css for css in WRITE_CONTROLS if present(browser, css)]
    assert not shown, f"a viewer sees {shown}"

    browser.get(f"{ui_server.url}/ui/jobs")
    find(browser, f'#jobs-table tr[data-job="{name}"]')
    assert not present(browser, "#new-job")

    browser.get(f"{ui_server.url}/ui/audit")
    wait(browser, lambda b: response_status(b) is not None, "the audit page")
    assert response_status(browser) == 403
    wait_for_url(browser, r"/ui/audit")


def test_forged_posts_are_refused(ui_server: UiServer, browser: Any, client: SchedulerClient) -> None:
    name = "ui-forged"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "true"})
    path = f"/ui/job/{name}/pause"

    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(job_page(ui_server, name))
    find(browser, "#pause")
    admin_cookie = session_cookie(browser)
    admin_csrf = csrf_token(browser)

    # The admin's session, without the CSRF token and with a wrong one.
    status, _, _ = http_request(ui_server, "POST", path, cookie=admin_cookie, form={})
    assert status == 403
    assert paused(client, name) is False
    status, _, _ = http_request(ui_server, "POST", path, cookie=admin_cookie,
                                form={"csrf_token": "0" * len(admin_csrf)})
    assert status == 403
    assert paused(client, name) is False
    status, _, _ = http_request(ui_server, "POST", path, cookie=admin_cookie,
                                form={"csrf_token": admin_csrf + "x"})
    assert status == 403
    assert paused(client, name) is False

    # The viewer's session: refused even with its own valid CSRF token.
    browser.delete_all_cookies()
    sign_in(browser, ui_server.url, ui_server.viewer_secret)
    browser.get(job_page(ui_server, name))
    find(browser, "#job-definition")
    viewer_cookie = session_cookie(browser)
    assert viewer_cookie != admin_cookie
    viewer_csrf = csrf_token(browser)
    for form in ({}, {"csrf_token": "wrong"}, {"csrf_token": viewer_csrf}):
        status, _, _ = http_request(ui_server, "POST", path, cookie=viewer_cookie, form=form)
        assert status == 403, form
        assert paused(client, name) is False
    # Nor does the admin's token work with the viewer's session, or the reverse.
    status, _, _ = http_request(ui_server, "POST", path, cookie=viewer_cookie,
                                form={"csrf_token": admin_csrf})
    assert status == 403
    status, _, _ = http_request(ui_server, "POST", path, cookie=admin_cookie,
                                form={"csrf_token": viewer_csrf})
    assert status == 403
    assert paused(client, name) is False

    # No session at all: to the login page, nothing changes.
    status, headers, _ = http_request(ui_server, "POST", path, form={"csrf_token": admin_csrf})
    assert status == 303
    assert urlsplit(headers["location"]).path == "/ui/login"
    assert paused(client, name) is False

    # The control: the same request with the admin's own token does pause.
    status, headers, _ = http_request(ui_server, "POST", path, cookie=admin_cookie,
                                      form={"csrf_token": admin_csrf})
    assert status == 303
    assert urlsplit(headers["location"]).path == f"/ui/job/{name}"
    assert paused(client, name) is True


# ---- g. sign-out and revocation ----------------------------------------------------------


def test_sign_out_and_revocation_end_the_session(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    cookie = session_cookie(browser)
    click(browser, "#sign-out")
    wait_for_url(browser, r"/ui/login(\?.*)?")
    find(browser, "#login-form")
    browser.get(f"{ui_server.url}/ui/")
    wait_for_url(browser, r"/ui/login\?next=.+")
    # The old cookie is dead on the server too, not only forgotten by the browser.
    status, headers, _ = http_request(ui_server, "GET", "/ui/jobs", cookie=cookie)
    assert status == 303
    assert urlsplit(headers["location"]).path == "/ui/login"

    _, secret = client.create_token("ui-revocable", "admin")
    sign_in(browser, ui_server.url, secret)
    browser.get(f"{ui_server.url}/ui/jobs")
    find(browser, "#jobs-table")
    client.revoke_token("ui-revocable")
    browser.get(f"{ui_server.url}/ui/jobs")
    wait_for_url(browser, r"/ui/login\?next=.+")
    find(browser, "#login-form")


# ---- h. the Content-Security-Policy -------------------------------------------------------


def csp_directives(header: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


def test_the_pages_keep_their_content_security_policy(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    name = "ui-csp"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "true",
                    "description": XSS})
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    cookie = session_cookie(browser)

    for path, signed_in in (("/ui/", True), ("/ui/login", False), (f"/ui/job/{name}", True)):
        status, headers, _ = http_request(ui_server, "GET", path,
                                          cookie=cookie if signed_in else None)
        assert status == 200, path
        header = headers.get("content-security-policy")
        assert header, f"no Content-Security-Policy on {path}"
        directives = csp_directives(header)
        assert directives.get("script-src") == ["'self'"], header
        assert "'unsafe-inline'" not in header, header
        assert "'unsafe-eval'" not in header, header
        assert directives.get("default-src") == ["'none'"], header

    # Every page in the browser: no violation in the console (checked when the test ends),
    # htmx and app.js loaded and working.
    browser.get(f"{ui_server.url}/ui/")
    find(browser, "#nodes")
    assert browser.execute_script("return typeof window.htmx;") == "object"
    wait(browser, lambda b: htmx_requests(b) >= 1, "htmx to refresh a region of the overview")
    for path in ("/ui/jobs", f"/ui/job/{name}", "/ui/jobs/new", f"/ui/job/{name}/edit",
                 f"/ui/job/{name}/delete", "/ui/runs", "/ui/audit"):
        browser.get(f"{ui_server.url}{path}")
        find(browser, "#nav")
        assert response_status(browser) == 200, path
        assert_no_csp_violations(browser)
    browser.get(job_page(ui_server, name))
    find(browser, "#job-definition")
    # The description is shown as text (nor could a handler in it run: the CSP).
    assert XSS in find(browser, "#job-definition").text
    assert browser.execute_script("return window.__xss === undefined;")
    # app.js rewrote the UTC instants into the browser's zone.
    wait(browser, lambda b: present(b, "#job-definition time[data-localized]"), "localized times")
    # An inline style= attribute anywhere would be refused: there are none.
    assert browser.execute_script("return document.querySelectorAll('[style]').length;") == 0


# ---- i. a phone -------------------------------------------------------------------------------


def on_a_phone(browser: Any) -> None:
    """A 390x844 phone screen (its browser honours <meta name=viewport>)."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True,
    })


def assert_fits_the_screen(browser: Any) -> None:
    # Without it a phone lays the page out 980 px wide and shrinks it.
    viewport = browser.execute_script(
        "var m = document.querySelector('meta[name=\"viewport\"]');"
        " return m ? m.getAttribute('content') : null;")
    assert viewport is not None, "no <meta name=viewport>"
    assert "width=device-width" in viewport, viewport
    # A phone widens its layout viewport (innerWidth) to whatever does not fit.
    width, scroll = browser.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth];")
    assert width == 390, f"the page is laid out {width} px wide on a 390 px screen"
    assert scroll <= width + 1, f"the page is {scroll} px wide on a {width} px screen"


def test_the_jobs_list_fits_a_phone(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    client.add_jobs([
        {"name": f"ui-phone-nightly-report-for-the-finance-team-{i}", "schedule": NEVER_SOON,
         "command": "true", "tags": ["finance", "reports", "nightly"],
         "description": "a long description " * 5}
        for i in range(3)
    ])
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    on_a_phone(browser)
    browser.get(f"{ui_server.url}/ui/jobs")
    find(browser, '#jobs-table tr[data-job="ui-phone-nightly-report-for-the-finance-team-0"]')
    assert_fits_the_screen(browser)
    assert_no_csp_violations(browser)


def test_the_overview_fits_a_phone_while_a_job_runs(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    """The overview's widest table (#executing, with its kill buttons) fills only while a
    run executes."""
    name = "ui-phone-running-job-with-a-long-name"
    client.add_job({"name": name, "schedule": NEVER_SOON, "command": "sleep 300"})
    client.trigger_job(name)
    try:
        sign_in(browser, ui_server.url, ui_server.admin_secret)
        on_a_phone(browser)
        browser.get(f"{ui_server.url}/ui/")
        find(browser, "#executing tr[data-run-id] button.kill")
        assert_fits_the_screen(browser)
    finally:
        client.kill_job(name)
    wait(browser, lambda b: not present(b, "#executing tr[data-run-id]"),
         "the killed run to leave #executing")


def test_the_jobs_list_filters_by_prefix(
    ui_server: UiServer, browser: Any, client: SchedulerClient
) -> None:
    client.add_jobs([{"name": f"ui-filter-{c}", "schedule": NEVER_SOON, "command": "true"}
                     for c in "abc"])
    sign_in(browser, ui_server.url, ui_server.admin_secret)
    browser.get(f"{ui_server.url}/ui/jobs?prefix=ui-filter-")
    find(browser, "#job-filters")
    rows = wait(browser, lambda b: b.find_elements("css selector", "#jobs-table tr[data-job]"),
                "the filtered rows")
    assert sorted(r.get_attribute("data-job") for r in rows) == [f"ui-filter-{c}" for c in "abc"]
