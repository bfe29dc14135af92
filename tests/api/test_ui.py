"""The dashboard's server side on the real database, through Flask's test client: sign-in
and its session (cookie flags, idle and absolute expiry, sign-out, revocation), CSRF,
roles, the Content-Security-Policy, every page with data in it, the job form's inline
validation, and the audit trail of its writes. The browser tests (tests/ui) drive the
same pages in Chromium with a running node."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import text, update
from werkzeug.test import TestResponse

from quartzlite.api.ui import CONTENT_SECURITY_POLICY
from quartzlite.api.ui.forms import FIELD_NAMES
from quartzlite.client import SchedulerClient
from quartzlite.errors import NotFound
from quartzlite.storage.tables import ui_sessions

from .support import Rows, job_body

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
FORM_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class Browser:
    """A test client that signs in through the form, like a browser."""

    def __init__(self, app: Flask) -> None:
        self.http: FlaskClient = app.test_client()
        self.csrf = ""

    def sign_in(self, secret: str, next_url: str | None = None) -> TestResponse:
        form = self.http.get("/ui/login")
        data = {"token": secret, "csrf_token": FORM_CSRF.search(form.text).group(1)}  # type: ignore[union-attr]
        if next_url is not None:
            data["next"] = next_url
        response = self.http.post("/ui/login", data=data)
        if response.status_code == 303:
            page = self.http.get("/ui/")
            found = CSRF_META.search(page.text)
            self.csrf = found.group(1) if found else ""
        return response

    def get(self, path: str, **kwargs: object) -> TestResponse:
        return self.http.get(path, **kwargs)  # type: ignore[arg-type]

    def post(self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True,
             **kwargs: object) -> TestResponse:
        body = dict(data or {})
        if csrf:
            body["csrf_token"] = self.csrf
        return self.http.post(path, data=body, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def admin(app: Flask, admin_secret: str) -> Browser:
    b = Browser(app)
    assert b.sign_in(admin_secret).status_code == 303
    return b


@pytest.fixture
def viewer_ui(app: Flask, viewer_secret: str) -> Browser:
    b = Browser(app)
    assert b.sign_in(viewer_secret).status_code == 303
    return b


def test_sign_in_sets_a_strict_httponly_cookie_and_refuses_bad_tokens(
    app: Flask, admin_secret: str
) -> None:
    b = Browser(app)
    assert b.get("/ui/login").mimetype == "text/html"
    assert b.get("/ui/").status_code == 303  # not signed in: to the sign-in page
    assert b.get("/ui/").headers["Location"] == "/ui/login?next=/ui/"
    refused = b.sign_in("qlt_" + "x" * 43)
    assert refused.status_code == 401
    assert 'id="login-error"' in refused.text
    assert "Unknown or revoked" in refused.text
    empty = b.sign_in("")
    assert empty.status_code == 401
    assert "Enter an API token" in empty.text
    ok = b.sign_in(admin_secret, next_url="/ui/jobs")
    assert ok.status_code == 303
    assert ok.headers["Location"] == "/ui/jobs"
    cookie = next(v for k, v in ok.headers.items() if k == "Set-Cookie" and v.startswith("quartzlite_ui="))
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain http here; https sets it
    assert admin_secret not in ok.get_data(as_text=True)
    secure = Browser(app)
    form = secure.http.get("/ui/login", base_url="https://localhost")
    signed = secure.http.post(
        "/ui/login", base_url="https://localhost",
        data={"token": admin_secret, "csrf_token": FORM_CSRF.search(form.text).group(1)},  # type: ignore[union-attr]
    )
    assert "Secure" in signed.headers["Set-Cookie"]


def test_the_sign_in_form_refuses_a_post_without_its_own_cookie_and_open_redirects(
    app: Flask, admin_secret: str
) -> None:
    forged = app.test_client().post("/ui/login", data={"token": admin_secret, "csrf_token": "x" * 43})
    assert forged.status_code == 403
    assert "quartzlite_ui=" not in forged.headers.get("Set-Cookie", "")
    b = Browser(app)
    for target in ("https://evil.example/", "//evil.example/ui", "/api/v1/jobs", "/ui\\..\\x"):
        response = b.sign_in(admin_secret, next_url=target)
        assert response.headers["Location"] == "/ui/", target


def test_sessions_end_by_idle_and_absolute_expiry_sign_out_and_revocation(
    app: Flask, client: SchedulerClient, admin_secret: str, db_url: str
) -> None:
    rows = Rows(db_url)
    try:
        b = Browser(app)
        b.sign_in(admin_secret)
        assert b.get("/ui/jobs").status_code == 200
        # Idle: not seen for longer than the idle timeout.
        with rows.engine.begin() as conn:
            conn.execute(update(ui_sessions).values(seen_at=datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)))
        assert b.get("/ui/jobs").status_code == 303
        # Absolute: signed in longer ago than the absolute timeout, seen just now.
        b.sign_in(admin_secret)
        assert b.get("/ui/jobs").status_code == 200
        with rows.engine.begin() as conn:
            conn.execute(update(ui_sessions).values(created_at=datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=13)))
        assert b.get("/ui/jobs").status_code == 303
        # Sign-out ends it on the server: the old cookie does not come back.
        b.sign_in(admin_secret)
        cookie = b.http.get_cookie("quartzlite_ui", path="/ui")
        assert cookie is not None
        old = cookie.value
        assert b.post("/ui/logout").headers["Location"] == "/ui/login"
        replay = app.test_client()
        replay.set_cookie("quartzlite_ui", old, path="/ui")
        assert replay.get("/ui/").status_code == 303
        # Revoking the token ends its sessions.
        b.sign_in(admin_secret)
        assert b.get("/ui/").status_code == 200
        client.revoke_token("ops-admin")
        assert b.get("/ui/").status_code == 303
        htmx = b.get("/ui/?fragment=live", headers={"HX-Request": "true"})
        assert htmx.status_code == 401
        assert htmx.headers["HX-Redirect"] == "/ui/login"
    finally:
        rows.close()


def test_every_post_needs_the_session_csrf_token_and_this_origin(
    admin: Browser, client: SchedulerClient
) -> None:
    client.add_job(job_body("guarded"))
    assert admin.post("/ui/job/guarded/pause", csrf=False).status_code == 403
    assert admin.post("/ui/job/guarded/pause", {"csrf_token": "y" * 43}, csrf=False).status_code == 403
    cross = admin.post("/ui/job/guarded/pause", headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert "CSRF" in cross.text
    assert not client.get_job("guarded").spec.paused
    # Behind a TLS proxy the browser's Origin says https while the request arrives as http.
    proxied = admin.http.post("/ui/job/guarded/resume", headers={
        "X-CSRF-Token": admin.csrf, "Origin": "https://localhost"})
    assert proxied.status_code == 303  # past the CSRF check (resuming an active job is a no-op)
    header = admin.http.post("/ui/job/guarded/pause", headers={"X-CSRF-Token": admin.csrf})
    assert header.status_code == 303
    assert client.get_job("guarded").spec.paused


def test_viewers_see_every_page_but_no_write_control_and_their_writes_are_refused(
    viewer_ui: Browser, client: SchedulerClient, rows: Rows
) -> None:
    client.add_job(job_body("looked-at"))
    rows.add_run("looked-at", rows.job_id("looked-at"), datetime(2026, 1, 1, tzinfo=UTC), status="running")
    for path in ("/ui/", "/ui/jobs", "/ui/job/looked-at", "/ui/runs"):
        page = viewer_ui.get(path)
        assert page.status_code == 200, path
        for control in ('id="trigger"', 'id="pause"', 'id="resume"', 'id="kill"', 'id="delete"',
                        'id="edit"', 'id="new-job"', 'class="kill', 'id="nav-audit"',
                        'id="params"'):
            assert control not in page.text, (path, control)
    for path in ("/ui/jobs/new", "/ui/job/looked-at/edit", "/ui/job/looked-at/delete", "/ui/audit"):
        assert viewer_ui.get(path).status_code == 403, path
    refused = viewer_ui.post("/ui/job/looked-at/pause")
    assert refused.status_code == 403
    assert "may only read" in refused.text
    assert viewer_ui.post("/ui/jobs/new", {"name": "x", "schedule": "@every 1s", "command": "true"}).status_code == 403
    assert not client.get_job("looked-at").spec.paused
    with pytest.raises(NotFound):
        client.get_job("x")


def test_pages_carry_the_csp_and_render_every_status_escaped(
    admin: Browser, client: SchedulerClient, rows: Rows
) -> None:
    client.add_job(job_body("shown", description="<script>alert(1)</script>", tags=["t1"]))
    job_id = rows.job_id("shown")
    rows.add_session("sess-1", host="box-1")
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i, status in enumerate(("succeeded", "failed", "timed_out", "abandoned", "missed", "killed", "running")):
        rows.add_run("shown", job_id, base + timedelta(minutes=i), status=status,
                     output="<img src=x onerror=alert(2)>" if status == "failed" else "")
    pages = ["/ui/", "/ui/jobs", "/ui/job/shown", "/ui/runs", "/ui/audit", "/ui/jobs/new",
             "/ui/job/shown/edit", "/ui/job/shown/delete", "/ui/jobs?last_status=failed"]
    run_ids = [r.id for r in client.list_runs(job="shown").items]
    pages += [f"/ui/runs/{i}" for i in run_ids]
    for path in pages:
        page = admin.get(path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
        assert page.headers["X-Frame-Options"] == "DENY"
        assert "<script>alert" not in page.text, path
        assert "<img src=x" not in page.text, path
        assert re.search(r"<script(?![^>]*\bsrc=)", page.text) is None, f"inline script on {path}"
        assert " style=" not in page.text, f"inline style on {path}"
    job_page = admin.get("/ui/job/shown").text
    assert job_page.count("data-run-id=") == 7
    assert 'data-status="running"' in job_page
    assert 'id="kill"' not in job_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in job_page
    overview = admin.get("/ui/").text
    assert "box-1:4242" in overview
    assert 'class="chart"' in overview
    assert overview.count('data-status="') == 3  # failed, timed_out, abandoned
    assert admin.get("/ui/?fragment=nope", headers={"HX-Request": "true"}).status_code == 404
    static = admin.get("/ui/static/htmx.min.js")
    assert static.status_code == 200
    assert "max-age" in static.headers["Cache-Control"]


def test_the_job_form_shows_each_rejection_next_to_its_field_and_writes_nothing(
    admin: Browser, client: SchedulerClient
) -> None:
    good = {"name": "formed", "schedule": "*/5 * * * *", "command": "echo hi"}
    page = admin.get("/ui/jobs/new").text
    for name in FIELD_NAMES:
        assert f'id="{name}"' in page, name
        assert f'<label for="{name}"' in page, name
        assert f'id="error-{name}"' in page, name
    cases = {
        "schedule": {"schedule": "61 * * * *"},
        "timezone": {"timezone": "Mars/Olympus"},
        "max_attempts": {"max_attempts": "two"},
        "timeout_s": {"timeout_s": "-1"},
        "kwargs": {"callable": "a.b:c", "command": "", "kwargs": "{not json"},
        "end_at": {"start_at": "2027-01-02T00:00:00Z", "end_at": "2027-01-01T00:00:00Z"},
        "name": {"name": "bad name!"},
        "calendars": {"calendars": "no-such-calendar"},
    }
    for field, change in cases.items():
        response = admin.post("/ui/jobs/new", {**good, **change})
        assert response.status_code == 400, (field, response.status_code)
        message = re.search(rf'id="error-{field}"[^>]*>([^<]+)<', response.text)
        assert message is not None, (field, response.text[:300])
        assert message.group(1).strip(), field
        assert re.search(rf'id="{field}"[^>]*aria-invalid="true"', response.text) or field == "name", field
        # what was typed stays in the form
        assert "echo hi" in response.text or field == "kwargs"
        assert client.list_jobs().items == [], field
    created = admin.post("/ui/jobs/new", good)
    assert created.status_code == 303
    assert created.headers["Location"] == "/ui/job/formed?done=created"
    again = admin.post("/ui/jobs/new", good)
    assert again.status_code == 409
    assert "exists" in again.text
    edited = admin.post("/ui/job/formed/edit", {**good, "schedule": "@every 1h", "tags": "a, b"})
    assert edited.status_code == 303
    job = client.get_job("formed")
    assert (job.spec.schedule, job.spec.tags) == ("@every 1h", ("a", "b"))
    client.delete_job("formed")
    gone = admin.post("/ui/job/formed/edit", good)
    assert gone.status_code == 404  # an edit never creates


def test_preview_shows_instants_in_the_zone_and_the_dst_night(admin: Browser) -> None:
    page = admin.get("/ui/preview?schedule=0+30+2+*+*+%3F&timezone=Europe/Berlin&preview_from=2027-03-27")
    assert page.status_code == 200
    # 2027-03-28 is the spring-forward night in Berlin: 02:30 does not exist that day.
    assert "2027-03-27 02:30:00 +0100 (CET)" in page.text
    assert "= 2027-03-27 01:30:00 UTC" in page.text  # the UTC column is UTC
    assert "2027-03-28" in page.text
    assert "2027-03-29 02:30:00 +0200 (CEST)" in page.text
    bad = admin.get("/ui/preview?schedule=61+*+*+*+*")
    assert 'id="preview-error"' in bad.text
    assert "schedule" in bad.text


def test_actions_flash_their_outcome_and_conflicts_answer_409(
    admin: Browser, client: SchedulerClient
) -> None:
    client.add_job(job_body("acted"))
    paused = admin.post("/ui/job/acted/pause")
    assert paused.headers["Location"] == "/ui/job/acted?done=paused"
    assert 'id="flash"' in admin.get(paused.headers["Location"]).text
    kill = admin.post("/ui/job/acted/kill")
    assert kill.status_code == 409
    assert 'class="flash error"' in kill.text
    assert admin.post("/ui/job/acted/explode").status_code == 404
    back = admin.post("/ui/job/acted/resume", {"next": "https://evil.example/"})
    assert back.headers["Location"] == "/ui/job/acted?done=resumed"
    deleted = admin.post("/ui/job/acted/delete")
    assert deleted.headers["Location"] == "/ui/jobs?done=deleted"
    assert admin.get("/ui/job/acted").status_code == 404


def test_trigger_with_parameters_records_them_and_bad_ones_are_shown_next_to_the_field(
    admin: Browser, client: SchedulerClient, rows: Rows
) -> None:
    client.add_job(job_body("with-params"))
    page = admin.get("/ui/job/with-params").text
    assert 'id="trigger-form"' in page
    assert 'id="params" name="params" form="trigger-form"' in page

    def requested() -> list[object]:
        with rows.engine.connect() as conn:
            return [json.loads(r[0]) if r[0] else None
                    for r in conn.execute(text("SELECT params FROM ql_requests"))]

    bad = admin.post("/ui/job/with-params/trigger", {"params": "month=2026-01\nbad-name=1"})
    assert bad.status_code == 400
    error = re.search(r'<small id="error-params" class="error" role="alert">([^<]*)</small>',
                      bad.text)
    assert error is not None, bad.text
    assert error.group(1).startswith("params: parameter name &#39;bad-name&#39; must be")
    assert 'aria-invalid="true"' in bad.text
    assert ">month=2026-01\nbad-name=1</textarea>" in bad.text  # kept, to be corrected
    for lines, field in (("who", "params"), ("a=1\na=2", "params.a"), ("x=\0", "params.x")):
        refused = admin.post("/ui/job/with-params/trigger", {"params": lines})
        assert refused.status_code == 400, lines
        assert f'role="alert">{field}: ' in refused.text, lines
    assert requested() == []

    done = admin.post("/ui/job/with-params/trigger",
                      {"params": "month=2026-01\r\n\n  \nnote=a=b \n"})
    assert done.headers["Location"] == "/ui/job/with-params?done=triggered"
    assert requested() == [{"month": "2026-01", "note": "a=b "}]
    (entry, *_) = client.list_audit(job="with-params", limit=1).items
    assert (entry.action, entry.source.value) == ("ui.job_action", "ui")


def test_dashboard_writes_are_in_the_audit_trail_without_secrets(
    app: Flask, admin: Browser, client: SchedulerClient, admin_secret: str
) -> None:
    admin.post("/ui/jobs/new", {"name": "audited", "schedule": "@every 1h", "command": "true"})
    admin.post("/ui/job/audited/trigger")
    entries = client.list_audit(limit=20).items
    actions = [(e.action, e.job_name) for e in entries]
    assert ("ui.job_new", "audited") in actions
    assert ("ui.job_action", "audited") in actions
    assert ("ui.login", None) in actions
    assert {e.source.value for e in entries if e.action.startswith("ui.")} == {"ui"}
    # Recorded once, by the app, not also by the client it serves.
    assert [e.action for e in entries if e.job_name == "audited"] == ["ui.job_action", "ui.job_new"]
    text = repr([e.details for e in entries])
    assert admin.csrf not in text
    assert admin_secret not in text


def test_the_audit_page_shows_and_filters_the_source(admin: Browser, client: SchedulerClient) -> None:
    client.auditing(actor="billing-service").add_job(job_body("from-library"))
    admin.post("/ui/job/from-library/pause")

    every = admin.get("/ui/audit").text
    library = admin.get("/ui/audit?source=library").text

    assert '<td class="audit-source">library</td>' in every
    assert '<td class="audit-source">ui</td>' in every
    assert "billing-service" in every
    assert library.count('class="audit-source"') == 1
    assert '<option selected>library</option>' in library
    assert admin.get("/ui/audit?source=mail").status_code == 400


def test_jobs_list_filters_and_pages_through_many_jobs(admin: Browser, client: SchedulerClient) -> None:
    client.add_jobs([job_body(f"many-{i:03d}") for i in range(120)] + [job_body("other", tags=["x"])])
    first = admin.get("/ui/jobs?prefix=many-")
    assert first.text.count("data-job=") == 50
    next_link = re.search(r'id="next-page" href="([^"]+)"', first.text)
    assert next_link is not None
    assert "prefix=many-" in next_link.group(1)
    second = admin.get(next_link.group(1).replace("&amp;", "&"))
    assert 'data-job="many-050"' in second.text
    assert 'id="first-page"' in second.text
    tagged = admin.get("/ui/jobs?tag=x")
    assert tagged.text.count("data-job=") == 1
    never = admin.get("/ui/jobs?last_status=never&prefix=other")
    assert never.text.count("data-job=") == 1
    bad = admin.get("/ui/jobs?last_status=sleeping")
    assert bad.status_code == 400
    assert "last_status" in bad.text


def test_the_job_page_shows_concurrency_broadcast_and_linked_dependencies(
    admin: Browser, client: SchedulerClient
) -> None:
    client.add_job(job_body("up", max_concurrency=3))
    client.add_job(job_body("down", schedule="@manual", upstream=["up"], broadcast=True,
                            upstream_on="completion"))
    client.add_job(job_body("lone"))

    up, down, lone = (admin.get(f"/ui/job/{n}").text for n in ("up", "down", "lone"))

    assert re.search(r'id="job-max-concurrency">3 runs at once<', up)
    assert 'id="job-broadcast"' not in up
    assert 'id="job-broadcast">yes' in down
    assert 'id="job-max-concurrency"' not in down
    downstream = re.search(r'id="job-downstream">(.*?)</dd>', up)
    assert downstream is not None
    assert '<a href="/ui/job/down">down</a>' in downstream.group(1)
    upstream = re.search(r'id="job-upstream">(.*?)</dd>', down)
    assert upstream is not None
    assert '<a href="/ui/job/up">up</a>' in upstream.group(1)
    assert "completion" in upstream.group(1)
    for absent in ("job-max-concurrency", "job-broadcast", "job-upstream", "job-downstream"):
        assert f'id="{absent}"' not in lone, absent


def test_the_run_page_shows_a_broadcast_runs_shard(
    admin: Browser, client: SchedulerClient, rows: Rows
) -> None:
    client.add_job(job_body("fanned", broadcast=True))
    job_id = rows.job_id("fanned")
    planned = datetime(2026, 1, 1, tzinfo=UTC)
    sharded = rows.add_run("fanned", job_id, planned, shard=1, shard_total=3)
    plain = rows.add_run("fanned", job_id, planned - timedelta(hours=1))

    page = admin.get(f"/ui/runs/{sharded}").text
    shard = re.search(r'id="run-shard">([^<]+)<', page)
    assert shard is not None
    assert shard.group(1).strip() == "1/3"
    assert 'id="run-shard"' not in admin.get(f"/ui/runs/{plain}").text


def test_the_job_form_sets_and_keeps_max_concurrency_and_broadcast(
    admin: Browser, client: SchedulerClient
) -> None:
    good = {"name": "lanes", "schedule": "*/5 * * * *", "command": "echo hi"}
    refused = admin.post("/ui/jobs/new", {**good, "max_concurrency": "2", "broadcast": "on"})
    assert refused.status_code == 400
    message = re.search(r'id="error-max_concurrency"[^>]*>([^<]+)<', refused.text)
    assert message is not None
    assert "broadcast job runs once per node per slot" in message.group(1)
    assert client.list_jobs().items == []
    assert admin.post("/ui/jobs/new", {**good, "max_concurrency": "zero"}).status_code == 400

    created = admin.post("/ui/jobs/new", {**good, "max_concurrency": "3"})
    assert created.status_code == 303
    assert client.get_job("lanes").spec.max_concurrency == 3
    form = admin.get("/ui/job/lanes/edit").text
    assert re.search(r'id="max_concurrency" name="max_concurrency" value="3"', form)
    # Saving the edit form again keeps the value (the form has it); unticked: no broadcast.
    assert admin.post("/ui/job/lanes/edit", {**good, "max_concurrency": "3",
                                             "description": "x"}).status_code == 303
    spec = client.get_job("lanes").spec
    assert (spec.max_concurrency, spec.broadcast, spec.description) == (3, False, "x")
    assert admin.post("/ui/job/lanes/edit", {**good, "broadcast": "on"}).status_code == 303
    spec = client.get_job("lanes").spec
    assert (spec.max_concurrency, spec.broadcast) == (1, True)
    assert re.search(r'id="broadcast" name="broadcast" type="checkbox" checked',
                     admin.get("/ui/job/lanes/edit").text)


def test_the_job_form_shows_a_concurrency_change_refused_in_flight_next_to_its_field(
    admin: Browser, client: SchedulerClient, rows: Rows
) -> None:
    good = {"name": "busy", "schedule": "*/5 * * * *", "command": "echo hi"}
    client.add_job(good)
    rows.set_job("busy", state="executing", fire_id="f1")

    refused = admin.post("/ui/job/busy/edit", {**good, "max_concurrency": "3"})

    assert refused.status_code == 409
    message = re.search(r'id="error-max_concurrency"[^>]*>([^<]+)<', refused.text)
    assert message is not None, refused.text[:500]
    assert "run in flight" in message.group(1)
    assert client.get_job("busy").spec.max_concurrency == 1
