"""Every change made with the library and the CLI is in the audit trail (issue 16): who
(the actor, ``user@host`` by default), which way (``source``), what it was given (bounded,
secrets masked) and what it did; refusals too, with their error code."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from quartzlite.cli import main
from quartzlite.client import AUDIT_NAMES, SchedulerClient, default_actor
from quartzlite.enums import AuditSource
from quartzlite.errors import Conflict, NotFound, TransientStoreError, ValidationError
from quartzlite.models import AuditEntry
from quartzlite.storage.auth import AuditStore

pytestmark = pytest.mark.db

NEVER_SOON = "0 0 1 1 *"


def job(name: str, **fields: object) -> dict[str, object]:
    return {"name": name, "schedule": NEVER_SOON, "command": "echo hi", **fields}


def entries(client: SchedulerClient, **filters: object) -> list[AuditEntry]:
    """Oldest first."""
    return client.list_audit(limit=1000, **filters).items[::-1]  # type: ignore[arg-type]


@pytest.fixture
def library(db_url: str) -> Iterator[SchedulerClient]:
    c = SchedulerClient(db_url, actor="billing-service")
    yield c
    assert c.db.checked_out() == 0
    c.close()


# -- the library ----------------------------------------------------------------------------


def test_library_writes_are_recorded_with_the_actor_and_source_library(
    library: SchedulerClient,
) -> None:
    library.add_job(job("nightly", description="first"))
    library.put_job(job("nightly", description="first"))  # unchanged: recorded all the same
    library.update_job("nightly", {"description": "second"})
    library.pause_job("nightly")
    library.resume_job("nightly")
    library.trigger_job("nightly")
    library.add_jobs([job(f"bulk-{i}") for i in range(3)])
    library.add_calendar({"name": "holidays", "rules": {"dates": ["2030-12-25"]}})
    library.put_calendar({"name": "holidays", "rules": {"dates": ["2030-12-26"]}})
    library.delete_calendar("holidays")
    library.delete_job("nightly")
    pruned = library.prune_history("30d")

    found = entries(library)

    assert [(e.action, e.job_name) for e in found] == [
        ("job.add", "nightly"), ("job.put", "nightly"), ("job.update", "nightly"),
        ("job.pause", "nightly"), ("job.resume", "nightly"), ("job.trigger", "nightly"),
        ("jobs.add", None), ("calendar.add", None), ("calendar.put", None),
        ("calendar.delete", None), ("job.delete", "nightly"), ("history.prune", None),
    ]
    assert {(e.token_name, e.source, e.client_address) for e in found} == {
        ("billing-service", AuditSource.LIBRARY, None),
    }
    details = {e.action: e.details for e in found}
    assert details["job.add"] == {"body": job("nightly", description="first")}
    assert details["job.put"]["changed"] is False
    assert details["job.update"] == {"body": {"description": "second"}}
    assert details["job.pause"] == {}
    assert details["jobs.add"] == {"count": 3, "names": ["bulk-0", "bulk-1", "bulk-2"]}
    assert details["calendar.put"]["name"] == "holidays"
    assert details["calendar.put"]["changed"] is True
    assert details["calendar.delete"] == {"name": "holidays"}
    assert details["history.prune"] == {
        "older_than": "30d", "runs": 0, "jobs": pruned.jobs, "events": 0, "deliveries": 0,
        "before": pruned.before.isoformat(),
    }


def test_a_bulk_write_lists_a_bounded_number_of_names(library: SchedulerClient) -> None:
    library.add_jobs([job(f"many-{i:03d}") for i in range(AUDIT_NAMES + 7)])

    (entry,) = entries(library)

    assert entry.details["count"] == AUDIT_NAMES + 7
    assert len(entry.details["names"]) == AUDIT_NAMES
    assert entry.details["names_more"] == 7


def test_refused_writes_are_recorded_with_their_error_code(library: SchedulerClient) -> None:
    library.add_job(job("taken"))
    with pytest.raises(Conflict):
        library.add_job(job("taken"))
    with pytest.raises(ValidationError, match="schedule"):
        library.add_job(job("bad", schedule="every tuesday"))
    with pytest.raises(NotFound):
        library.pause_job("missing")
    with pytest.raises(ValidationError):
        library.delete_job("no such/name")
    with pytest.raises(Conflict):
        library.kill_job("taken")  # not running
    with pytest.raises(ValidationError, match="jobs\\[1\\]"):
        library.add_jobs([job("ok-1"), job("ok-2", max_attempts=0)])
    with pytest.raises(ValidationError, match="older_than"):
        library.prune_history("1s")

    found = entries(library)

    assert [(e.action, e.job_name, e.details.get("error")) for e in found] == [
        ("job.add", "taken", None),
        ("job.add", "taken", "conflict"),
        ("job.add", "bad", "validation_error"),
        ("job.pause", "missing", "not_found"),
        ("job.delete", "no such/name", "validation_error"),
        ("job.kill", "taken", "conflict"),
        ("jobs.add", None, "validation_error"),
        ("history.prune", None, "validation_error"),
    ]
    assert found[2].details["body"]["schedule"] == "every tuesday"
    assert found[6].details["names"] == ["ok-1", "ok-2"]
    assert library.list_jobs().items[0].name == "taken"  # nothing else was written


def test_token_writes_are_recorded_without_their_secret(library: SchedulerClient) -> None:
    _, secret = library.create_token("grafana", "viewer")
    assert library.ensure_token("first-admin") is None  # a token exists: nothing created
    with pytest.raises(Conflict):
        library.create_token("grafana", "admin")
    library.revoke_token("grafana")
    with pytest.raises(NotFound):
        library.revoke_token(secret)  # the secret given instead of the name

    found = entries(library)

    assert [(e.action, e.details) for e in found] == [
        ("token.create", {"name": "grafana", "role": "viewer"}),
        ("token.ensure", {"name": "first-admin", "role": "admin", "created": False}),
        ("token.create", {"name": "grafana", "role": "admin", "error": "conflict"}),
        ("token.revoke", {"name": "grafana"}),
        ("token.revoke", {"name": "***", "error": "not_found"}),
    ]
    assert secret not in repr(found)


def test_secrets_given_to_a_write_are_masked(library: SchedulerClient) -> None:
    library.add_job(job("dump", command="mysqldump -u app -pS3cretPw db | gzip > /tmp/x.gz"))
    library.add_job({"name": "call", "schedule": NEVER_SOON, "callable": "os.path:join",
                     "kwargs": {"password": "hunter2", "url": "https://u:pw123@example.com/x"}})
    library.trigger_job("call", {"api_key": "k-12345", "day": "monday"})

    text = repr(entries(library))

    for secret in ("S3cretPw", "hunter2", "pw123", "k-12345"):
        assert secret not in text
    assert "monday" in text


def test_a_huge_input_is_kept_bounded(library: SchedulerClient) -> None:
    with pytest.raises(ValidationError):
        library.add_job(job("huge", description="x" * 200_000))

    (entry,) = entries(library)

    assert entry.details["error"] == "validation_error"
    assert len(json.dumps(entry.details)) <= 4096
    assert entry.details["body_bytes"] > 2048


def test_the_default_actor_is_user_at_host(db_url: str) -> None:
    with SchedulerClient(db_url) as client:
        client.add_job(job("mine"))
        (entry,) = entries(client)

    assert entry.token_name == default_actor()
    assert "@" in entry.token_name
    assert entry.source is AuditSource.LIBRARY


@pytest.mark.parametrize("actor", ["", "   ", "x" * 65, "bad\nactor", "tab\tbed", 42])
def test_an_actor_must_be_1_to_64_printable_characters(db_url: str, actor: object) -> None:
    with pytest.raises(ValidationError, match="^actor: ") as raised:
        SchedulerClient(db_url, actor=actor)  # type: ignore[arg-type]
    assert raised.value.field == "actor"


def test_an_unknown_source_is_refused(db_url: str, library: SchedulerClient) -> None:
    with pytest.raises(ValidationError, match="^source: "):
        SchedulerClient(db_url, source="mail")
    with pytest.raises(ValidationError, match="^source: "):
        library.list_audit(source="mail")


def test_the_source_filter(library: SchedulerClient) -> None:
    library.add_job(job("lib"))
    library.auditing(actor="ops", source="cli").add_job(job("by-cli"))
    library.record_audit(token_name="ops-admin", action="jobs.create", job_name="api",
                         source="api")

    assert [e.job_name for e in entries(library, source="cli")] == ["by-cli"]
    assert [e.job_name for e in entries(library, source=AuditSource.LIBRARY)] == ["lib"]
    assert [e.job_name for e in entries(library, source="api")] == ["api"]
    assert len(entries(library)) == 3


def test_a_client_that_does_not_audit_records_nothing(library: SchedulerClient) -> None:
    quiet = library.auditing(source="api", audit=False)
    quiet.add_job(job("quiet"))
    with pytest.raises(Conflict):
        quiet.add_job(job("quiet"))

    assert entries(library) == []
    assert quiet.db is library.db


def test_a_failed_audit_entry_is_logged_and_the_change_stands(
    library: SchedulerClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise TransientStoreError("database unavailable (record_audit: error 2013)")

    monkeypatch.setattr(AuditStore, "record", broken)
    with caplog.at_level(logging.ERROR, logger="quartzlite.client"):
        created = library.add_job(job("stands"))

    assert library.get_job("stands").id == created.id
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "audit_failed"]
    assert "job.add" in record.getMessage()
    assert "billing-service" in record.getMessage()


# -- the CLI --------------------------------------------------------------------------------


def cli(url: str, *args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(main, ["--database-url", url, *args], input=input,
                                catch_exceptions=False)
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def test_cli_writes_are_recorded_as_user_at_host_with_source_cli(
    db_url: str, client: SchedulerClient, tmp_path: Path,
) -> None:
    cli(db_url, "job", "add", "nightly", "--schedule", NEVER_SOON, "--command",
        "curl -u admin:hunter2 https://example.com")
    cli(db_url, "job", "put", "nightly", "--schedule", NEVER_SOON, "--command", "true")
    cli(db_url, "job", "update", "nightly", "--description", "changed")
    for verb in ("pause", "resume", "trigger", "kill", "delete"):
        cli(db_url, "job", verb, "nightly")
    file = tmp_path / "jobs.json"
    file.write_text(json.dumps([job("imported-1"), job("imported-2")]))
    cli(db_url, "job", "import", str(file))
    cli(db_url, "job", "add", "imported-1", "--schedule", NEVER_SOON, "--command", "true")  # 409
    cli(db_url, "calendar", "add", "holidays", "--date", "2030-12-25")
    cli(db_url, "calendar", "put", "holidays", "--date", "2030-12-26")
    cli(db_url, "calendar", "delete", "holidays")
    secret = cli(db_url, "token", "create", "--name", "grafana", "--role", "viewer").strip()
    cli(db_url, "token", "ensure-admin")
    cli(db_url, "token", "revoke", "grafana")
    cli(db_url, "history", "prune", "--older-than", "30d")
    cli(db_url, "job", "list")  # reads are not recorded
    cli(db_url, "audit", "list")

    found = entries(client)

    assert [(e.action, e.job_name, e.details.get("error")) for e in found] == [
        ("job.add", "nightly", None), ("job.put", "nightly", None),
        ("job.update", "nightly", None), ("job.pause", "nightly", None),
        ("job.resume", "nightly", None), ("job.trigger", "nightly", None),
        ("job.kill", "nightly", "conflict"), ("job.delete", "nightly", None),
        ("jobs.add", None, None), ("job.add", "imported-1", "conflict"),
        ("calendar.add", None, None), ("calendar.put", None, None),
        ("calendar.delete", None, None), ("token.create", None, None),
        ("token.ensure", None, None), ("token.revoke", None, None),
        ("history.prune", None, None),
    ]
    assert {(e.token_name, e.source) for e in found} == {(default_actor(), AuditSource.CLI)}
    assert found[0].details["body"]["command"] == "curl -u admin:*** https://example.com"
    assert found[2].details == {"body": {"description": "changed"}}
    assert secret.startswith("qlt_")
    assert secret not in repr(found)


def test_cli_audit_list_shows_the_source_and_filters_by_it(
    db_url: str, client: SchedulerClient,
) -> None:
    cli(db_url, "job", "add", "by-cli", "--schedule", NEVER_SOON, "--command", "true")
    client.add_job(job("by-library"))

    table = cli(db_url, "audit", "list").splitlines()
    only_cli = cli(db_url, "audit", "list", "--source", "cli").splitlines()
    as_json = json.loads(cli(db_url, "audit", "list", "--source", "library", "--json"))

    assert table[0].split() == ["ID", "WHEN", "SOURCE", "WHO", "ACTION", "JOB", "OUTCOME"]
    assert [line.split()[3:6] for line in table[1:]] == [
        ["library", default_actor(), "job.add"], ["cli", default_actor(), "job.add"],
    ]
    assert len(only_cli) == 2
    assert only_cli[1].split()[3:7] == ["cli", default_actor(), "job.add", "by-cli"]
    assert [(e["source"], e["job"]) for e in as_json["items"]] == [("library", "by-library")]
    result = CliRunner().invoke(main, ["--database-url", db_url, "audit", "list", "--source", "x"])
    assert result.exit_code == 2
