"""Serving: waitress in a thread, the bind-address rule, and the token commands."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

from quartzlite.api import create_app
from quartzlite.api.server import ApiServer, check_bind, is_loopback
from quartzlite.cli import main
from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig
from quartzlite.errors import QuartzliteError, ValidationError

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


def test_api_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUARTZLITE_API_HOST", "0.0.0.0")
    monkeypatch.setenv("QUARTZLITE_API_PORT", "9090")

    config = ApiConfig.from_env(threads=3)

    assert (config.host, config.port, config.threads) == ("0.0.0.0", 9090, 3)
    assert ApiConfig.from_env(port=7000).port == 7000
    monkeypatch.setenv("QUARTZLITE_API_PORT", "lots")
    with pytest.raises(ValidationError):
        ApiConfig.from_env()
    with pytest.raises(ValidationError):
        ApiConfig(port=70000)


def test_token_commands(db_url: str, client: SchedulerClient) -> None:
    runner = CliRunner()

    def cli(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, ["--database-url", db_url, *args])
        return result.exit_code, result.stdout, result.stderr

    code, out, err = cli("token", "ensure-admin", "--name", "make-run")
    assert code == 0
    assert "qlt_" in out
    assert "shown only this once" in out
    code, out, _ = cli("token", "ensure-admin", "--name", "make-run")
    assert code == 0
    assert "exists already" in out
    assert "qlt_" not in out

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
