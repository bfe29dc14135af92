"""Serving: waitress in a thread, the bind-address rule, connection limits and
timeouts, waitress's own errors in our JSON shape, the response headers, and the
token commands."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from quartzlite.api import create_app
from quartzlite.api.server import (
    FD_RESERVE,
    ApiServer,
    check_bind,
    fit_connection_limit,
    is_loopback,
)
from quartzlite.cli import main
from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig
from quartzlite.errors import QuartzliteError, ValidationError

from .support import Api, job_body

pytestmark = pytest.mark.db


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True),
     ("[::1]", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False),
     ("example.org", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_no_listening_beyond_loopback_while_no_token_exists(client: SchedulerClient) -> None:
    check_bind("127.0.0.1", client)
    with pytest.raises(ValidationError) as caught:
        check_bind("0.0.0.0", client)
    assert caught.value.field == "host"
    assert "quartzlite token create" in caught.value.message

    client.create_token("first", "viewer")
    check_bind("0.0.0.0", client)


def test_the_cli_refuses_a_public_address_without_a_token_exit_2(db_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quartzlite", "--database-url", db_url, "api",
         "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )

    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "refusing to listen on 0.0.0.0" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_waitress_server_in_a_thread_serves_and_stops(client: SchedulerClient) -> None:
    _, secret = client.create_token("live", "admin")
    server = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=2))
    server.start()
    try:
        assert server.port > 0
        assert server.running
        assert _get(f"{server.url}/healthz") == (200, {"status": "ok"})
        status, body = _get(f"{server.url}/api/v1/jobs", secret)
        assert status == 200
        assert body == {"items": [], "next_cursor": None}
        status, body = _get(f"{server.url}/api/v1/jobs")
        assert status == 401
        assert body["error"]["code"] == "unauthorized"
    finally:
        server.stop(grace_s=2)
    assert not server.running
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{server.url}/healthz", timeout=5)


def test_a_taken_port_is_a_clear_error(client: SchedulerClient) -> None:
    first = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=1))
    try:
        with pytest.raises(QuartzliteError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=first.port, threads=1))
    finally:
        first.stop(grace_s=1)


@pytest.mark.parametrize(("trusted", "secure"), [("", False), ("127.0.0.1", True)])
def test_the_dashboard_cookie_is_secure_behind_a_trusted_tls_proxy(
    client: SchedulerClient, trusted: str, secure: bool
) -> None:
    """X-Forwarded-Proto: https counts only from the trusted proxy's address: then the
    dashboard's cookies are Secure; from anyone else the header is dropped."""
    server = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=2,
                                                     trusted_proxy=trusted))
    server.start()
    try:
        request = urllib.request.Request(
            f"{server.url}/ui/login", headers={"X-Forwarded-Proto": "https"})
        with urllib.request.urlopen(request, timeout=10) as response:
            cookie = response.headers["Set-Cookie"]
        assert cookie.startswith("quartzlite_ui_login=")
        assert "HttpOnly" in cookie
        assert ("Secure" in cookie) is secure, cookie
    finally:
        server.stop(grace_s=2)


def test_api_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUARTZLITE_API_HOST", "0.0.0.0")
    monkeypatch.setenv("QUARTZLITE_API_PORT", "9090")
    monkeypatch.setenv("QUARTZLITE_API_CONNECTION_LIMIT", "500")
    monkeypatch.setenv("QUARTZLITE_API_CHANNEL_TIMEOUT_S", "12")
    monkeypatch.setenv("QUARTZLITE_API_MAX_HEADER_BYTES", "8192")

    config = ApiConfig.from_env(threads=3)

    assert (config.host, config.port, config.threads) == ("0.0.0.0", 9090, 3)
    assert (config.connection_limit, config.channel_timeout_s, config.max_header_bytes) == (
        500, 12, 8192)
    assert config.cleanup_interval_s == 3
    assert ApiConfig.from_env(port=7000).port == 7000
    monkeypatch.setenv("QUARTZLITE_API_PORT", "lots")
    with pytest.raises(ValidationError):
        ApiConfig.from_env()
    with pytest.raises(ValidationError):
        ApiConfig(port=70000)


def test_api_config_defaults_survive_many_idle_connections() -> None:
    """Far above waitress's 100 connections and 120 s + 30 s idle lifetime."""
    config = ApiConfig()
    assert config.connection_limit == 1000
    assert config.channel_timeout_s == 30
    assert config.cleanup_interval_s == 5
    assert config.max_header_bytes == 32 * 1024
    assert ApiConfig(channel_timeout_s=1).cleanup_interval_s == 1
    assert ApiConfig(channel_timeout_s=3600).cleanup_interval_s == 5


@pytest.mark.parametrize(
    ("setting", "value", "field"),
    [("connection_limit", 0, "api_connection_limit"),
     ("connection_limit", 100_001, "api_connection_limit"),
     ("channel_timeout_s", 0, "api_channel_timeout_s"),
     ("max_header_bytes", 1000, "api_max_header_bytes")],
)
def test_api_config_refuses_limits_out_of_range(setting: str, value: int, field: str) -> None:
    settings: dict[str, Any] = {setting: value}
    with pytest.raises(ValidationError) as caught:
        ApiConfig(**settings)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("args", "field"),
    [(["api", "--port", "0", "--connection-limit", "0"], "api_connection_limit"),
     (["api", "--api-channel-timeout-s", "0"], "api_channel_timeout_s"),
     (["serve", "--api-connection-limit", "100001"], "api_connection_limit"),
     (["serve", "--api-channel-timeout-s", "0"], "api_channel_timeout_s"),
     (["serve", "--api-max-header-bytes", "10"], "api_max_header_bytes")],
)
def test_the_api_and_serve_options_feed_api_config(args: list[str], field: str) -> None:
    """Checked before any database is used: a wrong limit is a usage error (exit 2)."""
    result = CliRunner().invoke(main, ["--database-url", "mysql+pymysql://nobody@127.0.0.1:1/x",
                                       *args])
    assert result.exit_code == 2, result.output
    assert field in result.stderr


# -- connection limits and timeouts --------------------------------------------------------


@pytest.fixture
def fake_nofile(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """RLIMIT_NOFILE as the test sets it (``limits[0]``); setrlimit calls are recorded
    in ``limits`` after it, and fail when the new soft limit passes the hard one."""
    limits: list[tuple[int, int]] = [(20000, 20000)]

    def getrlimit(which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return limits[-1]

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        if value[1] != resource.RLIM_INFINITY and value[0] > value[1]:
            raise ValueError("not allowed to raise maximum limit")
        limits.append(value)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return limits


def test_the_connection_limit_fits_the_file_descriptor_limit(
    fake_nofile: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quartzlite.api")
    assert fit_connection_limit(1000) == 1000
    assert fake_nofile == [(20000, 20000)]

    # The usual soft 1024 under a high hard limit: raised just enough.
    fake_nofile[:] = [(1024, 524288)]
    assert fit_connection_limit(1000) == 1000
    assert fake_nofile[-1] == (1000 + FD_RESERVE, 524288)
    assert "file descriptor limit raised from 1024 to 1256" in caplog.text

    fake_nofile[:] = [(1024, resource.RLIM_INFINITY)]
    assert fit_connection_limit(2000) == 2000
    assert fake_nofile[-1] == (2000 + FD_RESERVE, resource.RLIM_INFINITY)

    # No room: raised to the hard limit, the rest lowers the connection limit.
    caplog.clear()
    fake_nofile[:] = [(512, 1100)]
    assert fit_connection_limit(1000) == 1100 - FD_RESERVE
    assert fake_nofile[-1] == (1100, 1100)
    assert "API connection limit lowered from 1000 to 844" in caplog.text

    # A tiny limit still leaves half of it to connections.
    fake_nofile[:] = [(256, 256)]
    assert fit_connection_limit(1000) == 128
    assert fake_nofile == [(256, 256)]


def test_the_server_uses_the_fitted_connection_limit(
    client: SchedulerClient, fake_nofile: list[tuple[int, int]]
) -> None:
    fake_nofile[:] = [(600, 600)]
    server = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=1))
    try:
        assert server.connection_limit == 600 - FD_RESERVE
        assert server._server.adj.connection_limit == 600 - FD_RESERVE
    finally:
        server.stop(grace_s=1)


@contextlib.contextmanager
def _live(client: SchedulerClient, **settings: int) -> Iterator[ApiServer]:
    server = ApiServer(create_app(client), ApiConfig(host="127.0.0.1", port=0, threads=2, **settings))
    server.start()
    try:
        yield server
    finally:
        server.stop(grace_s=2)


@contextlib.contextmanager
def _stalled(address: tuple[str, int], silent: int, half: int) -> Iterator[list[socket.socket]]:
    """``silent`` connections that send nothing and ``half`` that send half a request
    line, the way a stalled or hostile client holds them."""
    socks: list[socket.socket] = []
    try:
        for i in range(silent + half):
            sock = socket.create_connection(address, timeout=10)
            if i >= silent:
                sock.sendall(b"GET /heal")
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _healthz_within(url: str, seconds: float) -> float:
    """Seconds until /healthz answered 200 (retried until the deadline)."""
    started = time.monotonic()
    deadline = started + seconds
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"/healthz did not answer within {seconds}s"
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=min(remaining, 2)) as response:
                assert response.status == 200
                return time.monotonic() - started
        except (TimeoutError, urllib.error.URLError, ConnectionError):
            continue


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed it (EOF or reset); False while it stays open, silent."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def test_healthz_answers_while_200_stalled_connections_are_held(client: SchedulerClient) -> None:
    """Issue: 110 half-open connections held waitress at its limit of 100 and /healthz
    timed out until they did."""
    with _live(client) as server, _stalled(("127.0.0.1", server.port), 150, 50) as socks:
        _healthz_within(server.url, 10)
        assert not any(_closed_by_server(sock) for sock in socks)


def test_silent_connections_are_closed_after_channel_timeout(client: SchedulerClient) -> None:
    with _live(client, channel_timeout_s=1) as server:
        opened = time.monotonic()
        with _stalled(("127.0.0.1", server.port), 20, 10) as socks:
            keep_alive = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            keep_alive.request("GET", "/healthz")
            assert keep_alive.getresponse().read() == b'{"status":"ok"}\n'
            assert keep_alive.sock is not None
            socks.append(keep_alive.sock)

            deadline = opened + 20
            open_ = list(socks)
            while open_ and time.monotonic() < deadline:
                open_ = [sock for sock in open_ if not _closed_by_server(sock)]
                time.sleep(0.05)
            assert not open_, f"{len(open_)} of {len(socks)} still open after 20s"
            assert time.monotonic() - opened >= 1  # not before their timeout
        assert _healthz_within(server.url, 10) >= 0


# -- waitress's own errors, and the headers of every response --------------------------------


def _raw(address: tuple[str, int], payload: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``payload`` as is; (status, headers, body) of the answer, read to the close.
    A reset after the answer is expected when the server did not read all of the
    request (a 431): closing with unread input resets the connection."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(payload)
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        (b"\x16\x03\x01 garbage\r\n\r\n", 400, "bad_request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
         431, "request_header_fields_too_large"),
        (b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"zz\r\n{}\r\n0\r\n\r\n", 400, "bad_request"),
        (b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
         b"0\r\n\r\n", 501, "not_implemented"),
        (b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n",
         413, "payload_too_large"),
    ],
    ids=["garbage-request-line", "100KB-header", "bad-chunk-size", "unknown-transfer-coding",
         "20MB-body"],
)
def test_waitress_own_errors_are_json_in_the_api_shape(
    client: SchedulerClient, payload: bytes, status: int, code: str
) -> None:
    with _live(client) as server:
        got, headers, body = _raw(("127.0.0.1", server.port), payload)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-store"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code
    assert error["message"]
    assert error["details"] == {}


def test_a_failure_outside_flask_is_a_json_500_without_its_traceback(
    client: SchedulerClient,
) -> None:
    """What Flask's handlers cannot catch (here: the WSGI call itself) is waitress's 500."""
    app = create_app(client)

    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("secret detail")

    app.wsgi_app = broken  # type: ignore[method-assign]
    server = ApiServer(app, ApiConfig(host="127.0.0.1", port=0, threads=1))
    server.start()
    try:
        status, headers, body = _raw(("127.0.0.1", server.port),
                                     b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        server.stop(grace_s=2)
    assert status == 500
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-store"
    assert json.loads(body) == {"error": {
        "code": "internal_error", "message": "internal server error (the server log has the details)",
        "details": {}}}


def test_every_app_response_says_nosniff_and_no_store(
    client: SchedulerClient, api: Api, anonymous: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    responses = {
        "healthz": anonymous.get("/healthz"),
        "created": api.post("/api/v1/jobs", json=job_body("nosniff")),
        "list": api.get("/api/v1/jobs"),
        "openapi": anonymous.get("/api/v1/openapi.json"),
        "not found": api.get("/api/v1/jobs/missing"),
        "no route": api.get("/nowhere"),
        "unauthorized": anonymous.get("/api/v1/jobs"),
        "method": api.request("PATCH", "/api/v1/jobs"),
        "too large": api.post("/api/v1/jobs", data=b"x" * (2 * 1024 * 1024),
                              headers={"Content-Type": "application/json"}),
    }

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(SchedulerClient, "list_jobs", broken)  # the app serves its own client
    responses["internal"] = api.get("/api/v1/jobs")

    statuses = {name: r.status_code for name, r in responses.items()}
    assert statuses == {"healthz": 200, "created": 201, "list": 200, "openapi": 200,
                        "not found": 404, "no route": 404, "unauthorized": 401,
                        "method": 405, "too large": 413, "internal": 500}
    for name, response in responses.items():
        assert response.headers.get("X-Content-Type-Options") == "nosniff", name
        assert response.headers.get("Cache-Control") == "no-store", name


def test_a_live_server_sends_the_headers_on_200_404_and_401(client: SchedulerClient) -> None:
    with _live(client) as server:
        for path, status in (("/healthz", 200), ("/nowhere", 404), ("/api/v1/jobs", 401)):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            connection.close()
            assert response.status == status, path
            assert response.getheader("X-Content-Type-Options") == "nosniff", path
            assert response.getheader("Cache-Control") == "no-store", path


def test_token_commands(db_url: str, client: SchedulerClient) -> None:
    runner = CliRunner()

    def cli(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, ["--database-url", db_url, *args])
        return result.exit_code, result.stdout, result.stderr

    code, out, err = cli("token", "ensure-admin", "--name", "make-run")
    assert code == 0
    assert "qlt_" in out
    assert "shown only this once" in out
    assert "/ui/" in out  # make run prints the dashboard's address beside the token
    code, out, _ = cli("token", "ensure-admin", "--name", "make-run")
    assert code == 0
    assert "exists already" in out
    assert "qlt_" not in out
    assert "/ui/" in out

    code, out, err = cli("token", "create", "--name", "ci", "--role", "viewer")
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("qlt_")
    assert "\n" not in secret
    assert "shown" in err
    assert client.authenticate(secret).role.value == "viewer"

    code, _, err = cli("token", "create", "--name", "ci", "--role", "admin")
    assert code == 1
    assert "exists" in err
    code, _, err = cli("token", "create", "--name", "bad name", "--role", "admin")
    assert code == 2
    assert "name" in err
    code, _, err = cli("token", "create", "--name", "x", "--role", "root")
    assert code == 2

    code, out, _ = cli("token", "list", "--json")
    assert code == 0
    assert [(t["name"], t["role"]) for t in json.loads(out)] == [("ci", "viewer"), ("make-run", "admin")]
    code, out, _ = cli("token", "list")
    assert "make-run" in out
    assert "qlt_" not in out

    code, out, _ = cli("token", "revoke", "ci")
    assert code == 0
    assert "revoked" in out
    code, _, err = cli("token", "revoke", "ci")
    assert code == 1
    assert "no token named" in err
    assert [t.name for t in client.list_tokens()] == ["make-run"]
