"""The ``quartzlite`` command against the real database: click's CliRunner for the
commands, and the real executable in a subprocess for exit codes and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, pool, text, update
from sqlalchemy.engine import make_url

from quartzlite.cli import main
from quartzlite.storage import migrate
from quartzlite.storage.tables import jobs
from tests.integration.dbtools import add_run, connect, job_count, job_rows

pytestmark = pytest.mark.db

#: Nothing listens on port 1: connecting is refused at once.
UNREACHABLE_URL = "mysql+pymysql://root@127.0.0.1:1/quartzlite"
EXE = Path(sys.executable).with_name("quartzlite")


def cli(url: str, *args: str, input: str | None = None) -> Result:
    """Run ``quartzlite --database-url URL ARGS...`` in-process."""
    runner = CliRunner()
    return runner.invoke(main, ["--database-url", url, *args], input=input,
                         catch_exceptions=False)


def ok(url: str, *args: str, input: str | None = None) -> str:
    result = cli(url, *args, input=input)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def show(url: str, name: str) -> dict[str, str]:
    """``job show NAME`` as {key: value}."""
    found = {}
    for line in ok(url, "job", "show", name).splitlines():
        key, _, value = line.partition(": ")
        found[key.strip()] = value.strip()
    return found


def fails(url: str, *args: str, code: int) -> str:
    """Run a command that must fail with exit ``code`` and one ``Error:`` line; return it."""
    result = cli(url, *args)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    return one_error_line(result.stderr)


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0]


def add(url: str, name: str = "nightly", *extra: str) -> str:
    return ok(url, "job", "add", name, "--schedule", "@every 1h", "--command", "echo hi", *extra)


@pytest.fixture
def fresh_url(server_url: str) -> Iterator[str]:
    """The URL of a database that does not exist yet (dropped at teardown)."""
    base = make_url(server_url).set(drivername="mysql+pymysql", database="")
    name = f"ql_cli_{uuid.uuid4().hex[:12]}"
    yield base.set(database=name).render_as_string(hide_password=False)
    engine = create_engine(base, poolclass=pool.NullPool)
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    engine.dispose()


# -- db ----------------------------------------------------------------------------------


def test_db_current_at_head(db_url: str) -> None:
    head = migrate.head_revision()

    assert ok(db_url, "db", "current").strip() == f"{head} (at head; head is {head})"


def test_db_upgrade_current_and_downgrade(fresh_url: str) -> None:
    head = migrate.head_revision()

    assert ok(fresh_url, "db", "upgrade").strip() == f"schema at {head}"
    assert "(at head;" in ok(fresh_url, "db", "current")
    assert ok(fresh_url, "db", "upgrade").strip() == f"schema at {head}"  # again: no-op

    assert ok(fresh_url, "db", "downgrade", "base").strip() == "schema at base"
    current = ok(fresh_url, "db", "current").strip()
    assert current.startswith("none (NOT at head: run `quartzlite db upgrade`")


def test_db_upgrade_to_an_unknown_revision_exits_1(db_url: str) -> None:
    line = fails(db_url, "db", "upgrade", "--revision", "nope", code=1)

    assert line.startswith("Error: cannot upgrade to nope: "), line


# -- job add -----------------------------------------------------------------------------


def test_job_add_prints_a_line(db_url: str) -> None:
    out = add(db_url)

    assert out.startswith("added: nightly (state idle, next fire 20")
    assert out.rstrip().endswith("Z)")
    assert job_count(db_url) == 1


def test_job_add_json(db_url: str) -> None:
    out = ok(db_url, "job", "add", "export", "--schedule", "0 0 2 * * ?", "--timezone",
             "Europe/Berlin", "--callable", "pkg.tasks:export", "--kwargs", '{"n": 2}',
             "--timeout", "90", "--max-attempts", "3", "--tag", "gpu", "--tag", "eu",
             "--priority", "5", "--description", "nightly export", "--paused", "--json")

    data = json.loads(out)
    assert data["name"] == "export"
    assert (data["schedule"], data["timezone"]) == ("0 0 2 * * ?", "Europe/Berlin")
    assert (data["command"], data["callable"], data["kwargs"]) == (None, "pkg.tasks:export",
                                                                   {"n": 2})
    assert (data["timeout_s"], data["max_attempts"], data["priority"]) == (90.0, 3, 5)
    assert data["tags"] == ["eu", "gpu"]
    assert (data["paused"], data["state"], data["deleted"]) == (True, "idle", False)
    fire = datetime.fromisoformat(data["next_fire_at"])
    assert fire.utcoffset() is not None
    assert fire.astimezone(UTC).hour in (0, 1)


def test_job_add_with_an_invalid_schedule_exits_2(db_url: str) -> None:
    line = fails(db_url, "job", "add", "x", "--schedule", "0 0 0 30 2 ?", "--command", "true",
                 code=2)

    assert line.startswith("Error: schedule: ")
    assert "never fires" in line
    assert job_count(db_url) == 0
    line = fails(db_url, "job", "add", "x", "--schedule", "@every 3000000d", "--command", "true",
                 code=2)
    assert line.startswith("Error: schedule: the @every interval must be at most 36500d")
    assert job_count(db_url) == 0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--schedule", "@every 1h", "--command", "true", "--timeout", "0"],
         "Error: timeout_s: must be greater than 0"),
        (["--schedule", "@every 1h"], "Error: command: give one of command"),
        (["--command", "true"], "Error: schedule: is required"),
        (["--schedule", "@every 1h", "--command", "true", "--max-attempts", "0"],
         "Error: max_attempts: must be between 1 and 100"),
        (["--schedule", "@every 1h", "--callable", "pkg:fn", "--kwargs", "{bad"],
         "Error: kwargs: is not valid JSON"),
        (["--schedule", "@every 1h", "--command", "true", "--timezone", "Nowhere/Land"],
         "Error: timezone: unknown timezone"),
        (["--schedule", "@every 1h", "--command", "true", "--tag", "Not A Tag"],
         "Error: tags: tag 'Not A Tag'"),
    ],
)
def test_job_add_validation_errors_exit_2(db_url: str, args: list[str], expected: str) -> None:
    line = fails(db_url, "job", "add", "x", *args, code=2)

    assert line.startswith(expected), line
    assert job_count(db_url) == 0


def test_job_add_with_a_bad_name_exits_2(db_url: str) -> None:
    line = fails(db_url, "job", "add", "bad name", "--schedule", "@every 1h", "--command", "x",
                 code=2)

    assert line.startswith("Error: name: may contain only")


def test_job_add_of_an_existing_name_exits_1(db_url: str) -> None:
    add(db_url)

    line = fails(db_url, "job", "add", "nightly", "--schedule", "@every 2h", "--command", "x",
                 code=1)

    assert line == "Error: a job named 'nightly' exists"


def test_a_click_usage_error_exits_2(db_url: str) -> None:
    result = cli(db_url, "job", "add", "x", "--priority", "high")

    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert "'high' is not a valid integer" in result.stderr


# -- job put / update ------------------------------------------------------------------


def test_job_put_is_idempotent(db_url: str) -> None:
    args = ["job", "put", "nightly", "--schedule", "@every 1h", "--command", "echo hi"]

    assert ok(db_url, *args).startswith("changed: nightly")
    before = job_rows(db_url)
    assert ok(db_url, *args).startswith("unchanged: nightly")
    assert job_rows(db_url) == before
    assert ok(db_url, *args[:-1], "echo changed").startswith("changed: nightly")


def test_job_update_changes_some_fields(db_url: str) -> None:
    add(db_url, "nightly", "--description", "keep me", "--priority", "4")

    out = ok(db_url, "job", "update", "nightly", "--timeout", "30", "--json")

    data = json.loads(out)
    assert (data["timeout_s"], data["description"], data["priority"]) == (30.0, "keep me", 4)
    line = fails(db_url, "job", "update", "nightly", code=2)
    assert line == "Error: options: give at least one field to change"


def test_job_overrun_policy_option_on_add_and_update_shown_by_job_show(db_url: str) -> None:
    add(db_url, "skips")
    add(db_url, "catches-up", "--overrun-policy", "catch_up")

    def shown(name: str) -> str:
        lines = ok(db_url, "job", "show", name).splitlines()
        return next(line.partition(": ")[2] for line in lines if line.strip().startswith("overrun_policy:"))

    assert (shown("skips"), shown("catches-up")) == ("skip", "catch_up")
    assert json.loads(ok(db_url, "job", "show", "catches-up", "--json"))["overrun_policy"] == "catch_up"
    data = json.loads(ok(db_url, "job", "update", "catches-up", "--overrun-policy", "skip", "--json"))
    assert data["overrun_policy"] == "skip"
    assert shown("catches-up") == "skip"
    result = cli(db_url, "job", "add", "x", "--schedule", "@every 1h", "--command", "true",
                 "--overrun-policy", "fire_once")
    assert result.exit_code == 2
    assert "--overrun-policy" in result.stderr
    assert "'skip'" in result.stderr
    assert "'catch_up'" in result.stderr


def test_job_bounds_options_on_add_put_and_update_and_a_finished_job_shown(db_url: str) -> None:
    """--start-at, --end-at, --max-runs and --jitter on add, put and update; job show
    and job list show them, and ``finished`` for a job that ran its max_runs."""
    data = json.loads(ok(db_url, "job", "add", "bounded", "--schedule", "@every 1h",
                         "--command", "true", "--start-at", "2030-01-01T09:00:00+02:00",
                         "--end-at", "2030-03-01T00:00:00Z", "--max-runs", "2",
                         "--jitter", "30", "--json"))
    assert (data["start_at"], data["end_at"]) == ("2030-01-01T07:00:00+00:00",
                                                  "2030-03-01T00:00:00+00:00")
    assert (data["max_runs"], data["jitter_s"], data["runs_done"], data["finished"]) == (
        2, 30.0, 0, False)
    put = json.loads(ok(db_url, "job", "put", "put-bounded", "--schedule", "@every 1h",
                        "--command", "true", "--max-runs", "7", "--json"))
    assert (put["max_runs"], put["start_at"], put["jitter_s"]) == (7, None, 0.0)

    def shown(name: str) -> dict[str, str]:
        return {key.strip(): value.strip() for key, _, value in
                (line.partition(": ") for line in ok(db_url, "job", "show", name).splitlines())}

    fields = shown("bounded")
    assert (fields["start_at"], fields["end_at"]) == ("2030-01-01T07:00:00+00:00",
                                                      "2030-03-01T00:00:00+00:00")
    assert (fields["max_runs"], fields["jitter_s"], fields["state"], fields["finished"]) == (
        "2", "30.0", "idle", "False")
    assert len(fields["upcoming"].split(", ")) == 2, "two runs in all"

    # Ran its two runs: finished, in show, show --json and list.
    ok(db_url, "job", "update", "bounded", "--max-runs", "1")
    with connect(db_url) as conn:
        conn.execute(update(jobs).where(jobs.c.name == "bounded").values(
            runs_done=1, next_fire_at=None, next_slot_at=None))
    fields = shown("bounded")
    assert (fields["state"], fields["finished"], fields["runs_done"], fields["upcoming"]) == (
        "finished", "True", "1", "-")
    data = json.loads(ok(db_url, "job", "show", "bounded", "--json"))
    assert (data["state"], data["finished"], data["upcoming"]) == ("idle", True, [])
    table = ok(db_url, "job", "list").splitlines()
    states = {line.split()[0]: line.split()[4] for line in table[1:]}
    assert states == {"bounded": "finished", "put-bounded": "idle"}
    assert "state finished" in ok(db_url, "job", "resume", "bounded")
    assert "state finished" in ok(db_url, "job", "update", "bounded", "--description", "done")
    again = json.loads(ok(db_url, "job", "update", "bounded", "--max-runs", "3", "--json"))
    assert (again["finished"], again["runs_done"]) == (False, 1)

    for args, field in [(("--start-at", "soon"), "start_at"), (("--max-runs", "0"), "max_runs"),
                        (("--jitter", "4000"), "jitter_s"),
                        (("--end-at", "2001-01-01T00:00:00Z"), "end_at")]:
        line = fails(db_url, "job", "add", "x", "--schedule", "@every 1h", "--command", "true",
                     *args, code=2)
        assert line.startswith(f"Error: {field}: "), line
    result = cli(db_url, "job", "add", "x", "--schedule", "@every 1h", "--command", "true",
                 "--max-runs", "two")
    assert result.exit_code == 2
    assert "--max-runs" in result.stderr


# -- job list / show -------------------------------------------------------------------


def test_job_list_table_and_json(db_url: str) -> None:
    add(db_url, "alpha", "--tag", "gpu")
    add(db_url, "beta", "--paused")
    add(db_url, "gamma")

    table = ok(db_url, "job", "list").splitlines()

    assert table[0].split() == ["NAME", "SCHEDULE", "TZ", "STATE", "PAUSED", "NEXT", "FIRE",
                                "OWNER"]
    assert [line.split()[0] for line in table[1:]] == ["alpha", "beta", "gamma"]
    assert table[2].split()[1:6] == ["@every", "1h", "UTC", "idle", "yes"]

    data = json.loads(ok(db_url, "job", "list", "--json"))
    assert [j["name"] for j in data["jobs"]] == ["alpha", "beta", "gamma"]
    assert data["next_cursor"] is None

    def names(*args: str) -> list[str]:
        return [j["name"] for j in json.loads(ok(db_url, "job", "list", "--json", *args))["jobs"]]

    assert names("--paused") == ["beta"]
    assert names("--active") == ["alpha", "gamma"]
    assert names("--tag", "gpu") == ["alpha"]
    assert names("--prefix", "g") == ["gamma"]
    assert names("--state", "idle") == ["alpha", "beta", "gamma"]


def test_job_list_pages(db_url: str) -> None:
    for name in ("a1", "a2", "a3"):
        add(db_url, name)

    first = ok(db_url, "job", "list", "--limit", "2").splitlines()

    assert [line.split()[0] for line in first[1:3]] == ["a1", "a2"]
    assert first[-1].startswith("(more: --cursor ")
    cursor = first[-1].removeprefix("(more: --cursor ").removesuffix(")")
    rest = json.loads(ok(db_url, "job", "list", "--json", "--limit", "2", "--cursor", cursor))
    assert [j["name"] for j in rest["jobs"]] == ["a3"]
    assert rest["next_cursor"] is None


def test_job_list_when_empty_prints_the_header(db_url: str) -> None:
    assert ok(db_url, "job", "list").split() == ["NAME", "SCHEDULE", "TZ", "STATE", "PAUSED",
                                                 "NEXT", "FIRE", "OWNER"]


def test_job_show_text_and_json(db_url: str) -> None:
    ok(db_url, "job", "add", "nightly", "--schedule", "0 30 2 * * ?", "--command", "echo hi",
       "--tag", "gpu", "--tag", "eu")
    ok(db_url, "job", "add", "py", "--schedule", "@every 1h", "--callable", "pkg.mod:fn",
       "--kwargs", '{"n": 1}')

    text_out = ok(db_url, "job", "show", "nightly")
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(": ") for line in text_out.splitlines())
    }
    assert fields["name"] == "nightly"
    assert fields["schedule"] == "0 30 2 * * ?"
    assert fields["state"] == "idle"
    assert fields["tags"] == "eu,gpu"
    assert fields["callable"] == "-"
    assert fields["kwargs"] == "{}"
    assert fields["last run"] == "-"
    assert len(fields["upcoming"].split(", ")) == 5

    python = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(": ") for line in
                              ok(db_url, "job", "show", "py").splitlines())
    }
    assert python["callable"] == "pkg.mod:fn"
    assert python["kwargs"] == '{"n": 1}'
    assert python["tags"] == "-"

    data = json.loads(ok(db_url, "job", "show", "nightly", "--json"))
    assert data["name"] == "nightly"
    assert data["last_run"] is None
    upcoming = [datetime.fromisoformat(t) for t in data["upcoming"]]
    assert len(upcoming) == 5
    assert all((t.astimezone(UTC).hour, t.minute) == (2, 30) for t in upcoming)
    assert upcoming == sorted(upcoming)


def test_job_show_of_a_missing_job_exits_1(db_url: str) -> None:
    assert fails(db_url, "job", "show", "ghost", code=1) == "Error: no job named 'ghost'"


# -- control ---------------------------------------------------------------------------


def test_pause_resume_trigger_kill_delete(db_url: str) -> None:
    add(db_url)

    assert ok(db_url, "job", "pause", "nightly").startswith(
        "paused: nightly (state idle, paused, next fire ")
    assert json.loads(ok(db_url, "job", "show", "nightly", "--json"))["paused"] is True
    assert fails(db_url, "job", "trigger", "nightly", code=1) == (
        "Error: job 'nightly' is paused: resume it first")

    resumed = json.loads(ok(db_url, "job", "resume", "nightly", "--json"))
    assert resumed["paused"] is False

    assert ok(db_url, "job", "trigger", "nightly").startswith("triggered: nightly (state idle")
    assert fails(db_url, "job", "kill", "nightly", code=1) == "Error: job 'nightly' is not running"

    assert ok(db_url, "job", "delete", "nightly").startswith("deleted (history kept): nightly")
    assert fails(db_url, "job", "show", "nightly", code=1) == "Error: no job named 'nightly'"
    assert fails(db_url, "job", "delete", "nightly", code=1) == "Error: no job named 'nightly'"
    assert [r["deleted"] for r in job_rows(db_url)] == [1]


# -- history ---------------------------------------------------------------------------


def test_job_history_table_and_json(db_url: str) -> None:
    job_id = json.loads(ok(db_url, "job", "add", "nightly", "--schedule", "@every 1h",
                           "--command", "echo hi", "--json"))["id"]
    first = add_run(db_url, job_id=job_id, job_name="nightly",
                    planned_at=datetime(2026, 1, 1, 3, tzinfo=UTC), output="hello\n")
    second = add_run(db_url, job_id=job_id, job_name="nightly",
                     planned_at=datetime(2026, 1, 2, 3, tzinfo=UTC), status="failed")

    table = ok(db_url, "job", "history", "nightly").splitlines()

    assert table[0].split() == ["ID", "JOB", "PLANNED", "STARTED", "ENDED", "TRY", "STATUS",
                                "EXIT", "NODE"]
    rows = [line.split() for line in table[1:]]
    assert [int(r[0]) for r in rows] == [second, first]  # newest first
    assert rows[1][1:3] == ["nightly", "2026-01-01"]
    assert rows[1][-4:] == ["1", "succeeded", "0", "node-a"]
    assert rows[0][-3:] == ["failed", "-", "node-a"]

    data = json.loads(ok(db_url, "job", "history", "nightly", "--json"))
    assert [r["id"] for r in data["runs"]] == [second, first]
    assert data["runs"][1]["output"] == "hello\n"
    assert data["runs"][1]["planned_at"] == "2026-01-01T03:00:00+00:00"
    assert data["next_cursor"] is None

    only_failed = json.loads(ok(db_url, "job", "history", "nightly", "--status", "failed",
                                "--json"))
    assert [r["id"] for r in only_failed["runs"]] == [second]

    paged = ok(db_url, "job", "history", "nightly", "--limit", "1").splitlines()
    assert paged[-1].startswith("(more: --cursor ")

    with_output = ok(db_url, "job", "history", "nightly", "--output")
    assert f"--- run #{first} output ---\nhello" in with_output

    shown = json.loads(ok(db_url, "job", "show", "nightly", "--json"))
    assert shown["last_run"]["id"] == second
    assert "output" not in shown["last_run"]


def test_job_history_with_a_bad_status_exits_2(db_url: str) -> None:
    line = fails(db_url, "job", "history", "nightly", "--status", "exploded", code=2)

    assert line.startswith("Error: status: must be one of")


# -- import ----------------------------------------------------------------------------


def test_job_import_from_a_json_file(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([
        {"name": "one", "schedule": "@every 1h", "command": "echo 1"},
        {"name": "two", "schedule": "0 0 3 * * ?", "timezone": "Europe/Berlin",
         "callable": "pkg.mod:fn", "kwargs": {"a": 1}},
        {"name": "three", "schedule": "*/5 * * * *", "command": "echo 3", "tags": ["eu"]},
    ]))

    assert ok(db_url, "job", "import", str(path)).strip() == "added 3 jobs"
    listed = json.loads(ok(db_url, "job", "list", "--json"))["jobs"]
    assert [j["name"] for j in listed] == ["one", "three", "two"]
    assert listed[2]["kwargs"] == {"a": 1}


def test_job_import_from_stdin(db_url: str) -> None:
    data = json.dumps([{"name": "piped", "schedule": "@every 1h", "command": "true"}])

    assert ok(db_url, "job", "import", "-", input=data).strip() == "added 1 jobs"


def test_job_import_is_all_or_nothing(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([
        {"name": "one", "schedule": "@every 1h", "command": "echo 1"},
        {"name": "two", "schedule": "@every 1h", "command": "echo 2", "timeout_s": -1},
    ]))

    line = fails(db_url, "job", "import", str(path), code=2)

    assert line.startswith("Error: jobs[1].timeout_s: must be greater than 0")
    assert job_count(db_url) == 0


def test_job_import_conflict_writes_nothing(db_url: str, tmp_path: Path) -> None:
    add(db_url, "two")
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([
        {"name": "one", "schedule": "@every 1h", "command": "echo 1"},
        {"name": "two", "schedule": "@every 1h", "command": "echo 2"},
    ]))

    line = fails(db_url, "job", "import", str(path), code=1)

    assert "'two'" in line
    assert [r["name"] for r in job_rows(db_url)] == ["two"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "Error: file: is not valid JSON"),
        ('{"name": "x"}', "Error: file: must hold a JSON list of job objects"),
        ('["x"]', "Error: jobs[0].body: must be an object, not a string"),
    ],
)
def test_job_import_of_a_bad_file_exits_2(
    db_url: str, tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(content)

    assert fails(db_url, "job", "import", str(path), code=2).startswith(expected)


# -- schedule preview ------------------------------------------------------------------

BERLIN = ["schedule", "preview", "0 30 2 * * ?", "--timezone", "Europe/Berlin",
          "--from", "2026-10-24T00:00:00Z", "--count", "3"]
BERLIN_TIMES = [
    "2026-10-24T02:30:00+02:00",
    "2026-10-25T02:30:00+02:00",  # the repeated hour of the DST change: fires once
    "2026-10-26T02:30:00+01:00",
]


def test_schedule_preview_text(db_url: str) -> None:
    assert ok(db_url, *BERLIN).splitlines() == BERLIN_TIMES


def test_schedule_preview_json(db_url: str) -> None:
    times = json.loads(ok(db_url, *BERLIN, "--json"))

    assert times == BERLIN_TIMES
    assert [t for t in times if t.startswith("2026-10-25")] == ["2026-10-25T02:30:00+02:00"]


def test_schedule_preview_reads_a_naive_start_as_utc(db_url: str) -> None:
    out = ok(db_url, "schedule", "preview", "@every 90m", "--from", "2026-01-01T00:00:00",
             "-n", "2", "--json")

    assert json.loads(out) == ["2026-01-01T01:30:00+00:00", "2026-01-01T03:00:00+00:00"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["0 0 0 30 2 ?"], "Error: schedule: "),
        (["@every 1h", "--timezone", "Mars/Base"], "Error: timezone: unknown timezone"),
        (["@every 1h", "--from", "yesterday"], "Error: from: is not an ISO-8601 instant"),
        (["@every 1h", "--count", "0"], "Error: count: must be between 1 and 1000"),
    ],
)
def test_schedule_preview_errors_exit_2(db_url: str, args: list[str], expected: str) -> None:
    assert fails(db_url, "schedule", "preview", *args, code=2).startswith(expected)


# -- cluster ---------------------------------------------------------------------------


def test_cluster_without_nodes(db_url: str) -> None:
    assert ok(db_url, "cluster").split() == [
        "SESSION", "HOST", "PID", "STARTED", "HEARTBEAT", "AGE", "OFFSET", "MS", "CAPACITY",
        "TAGS", "DATABASE", "RUNNING",
    ]
    assert json.loads(ok(db_url, "cluster", "--json")) == []


# -- an unreachable database -----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["job", "list"], ["db", "current"], ["db", "upgrade"], ["cluster"], ["job", "show", "x"]],
)
def test_an_unreachable_database_is_one_line_and_exit_1(args: list[str]) -> None:
    line = fails(UNREACHABLE_URL, *args, code=1)

    assert "2003" in line or "reach" in line, line


# -- the real executable ---------------------------------------------------------------


def run_exe(tmp_path: Path, *args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the installed ``quartzlite`` script (or ``python -m quartzlite``) in a clean cwd."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUARTZLITE_")}
    command = [sys.executable, "-m", "quartzlite"] if module or not EXE.exists() else [str(EXE)]
    return subprocess.run(
        [*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )


@pytest.mark.parametrize("module", [False, True], ids=["script", "python-m"])
def test_process_unreachable_database_exits_1_with_one_line(
    tmp_path: Path, module: bool
) -> None:
    done = run_exe(tmp_path, "--database-url", UNREACHABLE_URL, "job", "list", module=module)

    assert done.returncode == 1, done
    assert done.stdout == ""
    assert "2003" in one_error_line(done.stderr)


def test_process_unreachable_database_on_a_write_exits_1_with_one_line(tmp_path: Path) -> None:
    """A write retries (quietly) until its deadline, then says so in one line."""
    done = run_exe(tmp_path, "--database-url", UNREACHABLE_URL, "job", "pause", "nightly")

    assert done.returncode == 1, done
    assert one_error_line(done.stderr).startswith("Error: database unavailable")


def test_process_validation_error_exits_2(tmp_path: Path, db_url: str) -> None:
    done = run_exe(tmp_path, "--database-url", db_url, "job", "add", "x", "--schedule",
                   "0 0 0 30 2 ?", "--command", "true")

    assert done.returncode == 2, done
    assert one_error_line(done.stderr).startswith("Error: schedule: ")
    assert job_count(db_url) == 0


def test_process_conflict_exits_1(tmp_path: Path, db_url: str) -> None:
    add(db_url, "taken")

    done = run_exe(tmp_path, "--database-url", db_url, "job", "kill", "taken", module=True)

    assert done.returncode == 1, done
    assert one_error_line(done.stderr) == "Error: job 'taken' is not running"


def test_process_success_exits_0(tmp_path: Path, db_url: str) -> None:
    added = run_exe(tmp_path, "--database-url", db_url, "job", "add", "p", "--schedule",
                    "@every 5m", "--command", "true", "--json")
    listed = run_exe(tmp_path, "--database-url", db_url, "job", "list", "--json")

    assert (added.returncode, listed.returncode) == (0, 0), (added, listed)
    assert json.loads(added.stdout)["name"] == "p"
    assert [j["name"] for j in json.loads(listed.stdout)["jobs"]] == ["p"]
    assert "Traceback" not in added.stderr + listed.stderr


def test_process_version(tmp_path: Path) -> None:
    done = run_exe(tmp_path, "--version")

    assert done.returncode == 0
    assert "0.1.0" in done.stdout


# -- the database password outside the command line ----------------------------------------


@pytest.fixture
def password_user(db_url: str) -> Iterator[tuple[str, str]]:
    """(URL without a password, the password) of a user with rights on the test database."""
    base = make_url(db_url)
    user, secret = f"ql_pw_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:12]}"
    engine = create_engine(base, poolclass=pool.NullPool)
    hosts = ("%", "localhost", "127.0.0.1")
    with engine.begin() as conn:
        for host in hosts:
            conn.execute(text(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY '{secret}'"))
            conn.execute(text(f"GRANT ALL ON `{base.database}`.* TO '{user}'@'{host}'"))
    try:
        yield base.set(username=user, password=None).render_as_string(hide_password=False), secret
    finally:
        with engine.begin() as conn:
            for host in hosts:
                conn.execute(text(f"DROP USER IF EXISTS '{user}'@'{host}'"))
        engine.dispose()


def test_the_database_password_comes_from_a_file_or_the_environment(
    password_user: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, secret = password_user
    monkeypatch.delenv("QUARTZLITE_DATABASE_PASSWORD", raising=False)
    monkeypatch.delenv("QUARTZLITE_DATABASE_PASSWORD_FILE", raising=False)
    secret_file = tmp_path / "db-password"
    secret_file.write_text(secret + "\n")

    assert "Access denied" in fails(url, "job", "list", code=1)
    assert ok(url, "--database-password-file", str(secret_file), "job", "list").startswith("NAME ")
    monkeypatch.setenv("QUARTZLITE_DATABASE_PASSWORD_FILE", str(secret_file))
    assert ok(url, "job", "list").startswith("NAME ")
    monkeypatch.delenv("QUARTZLITE_DATABASE_PASSWORD_FILE")
    monkeypatch.setenv("QUARTZLITE_DATABASE_PASSWORD", secret)
    assert ok(url, "job", "list").startswith("NAME ")

    with_both = make_url(url).set(password=secret).render_as_string(hide_password=False)
    assert "database_password_file" in fails(
        with_both, "--database-password-file", str(secret_file), "job", "list", code=2)
    assert "cannot read" in fails(
        url, "--database-password-file", str(tmp_path / "missing"), "job", "list", code=2)


def test_calendar_commands_and_jobs_naming_calendars(db_url: str) -> None:
    added = ok(db_url, "calendar", "add", "holidays", "--timezone", "Europe/Paris",
               "--date", "2030-12-25", "--yearly", "01-01", "--range", "2030-08-01..2030-08-15",
               "--window", "* * 0-7 ? * *", "--description", "closed")
    assert "added: calendar holidays (Europe/Paris, 1 date(s), 1 yearly, 1 range(s), 1 window(s))" in added
    shown = json.loads(ok(db_url, "calendar", "show", "holidays", "--json"))
    assert shown["rules"] == {"dates": ["2030-12-25"], "yearly": ["01-01"],
                              "ranges": [{"from": "2030-08-01", "to": "2030-08-15"}],
                              "windows": ["* * 0-7 ? * *"]}
    assert "2030-08-01..2030-08-15" in ok(db_url, "calendar", "show", "holidays")
    assert "unchanged" in ok(db_url, "calendar", "put", "holidays", "--timezone", "Europe/Paris",
                             "--date", "2030-12-25", "--yearly", "01-01", "--range",
                             "2030-08-01..2030-08-15", "--window", "* * 0-7 ? * *",
                             "--description", "closed")
    assert "changed" in ok(db_url, "calendar", "put", "holidays", "--timezone", "Europe/Paris",
                           "--date", "2030-12-25")
    assert "holidays" in ok(db_url, "calendar", "list")
    assert [c["name"] for c in json.loads(ok(db_url, "calendar", "list", "--json"))] == ["holidays"]

    error = fails(db_url, "calendar", "add", "bad", "--date", "2030-12-25", "--date", "2030-13-01",
                  code=2)
    assert "rules.dates[1]" in error
    error = fails(db_url, "calendar", "add", "bad", "--range", "2030-01-01", code=2)
    assert "rules.ranges[0]" in error
    assert "unknown calendar 'nope'" in fails(db_url, "job", "add", "j", "--schedule", "@daily",
                                              "--command", "true", "--calendar", "nope", code=2)

    job = json.loads(ok(db_url, "job", "add", "j", "--schedule", "0 12 * * *", "--command", "true",
                        "--calendar", "holidays", "--json"))
    assert job["calendars"] == ["holidays"]
    assert "job(s) j" in fails(db_url, "calendar", "delete", "holidays", code=1)
    times = json.loads(ok(db_url, "schedule", "preview", "0 12 * * *", "--from",
                          "2030-12-24T00:00:00Z", "-n", "2", "--calendar", "holidays", "--json"))
    assert times == ["2030-12-24T12:00:00+00:00", "2030-12-26T12:00:00+00:00"]
    updated = json.loads(ok(db_url, "job", "update", "j", "--calendar", "", "--json"))
    assert updated["calendars"] == []
    assert "deleted: calendar holidays" in ok(db_url, "calendar", "delete", "holidays")
