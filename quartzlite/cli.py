"""The ``quartzlite`` command: a thin click layer over the client, the node and the API.

Exit codes: 0 ok; 2 usage or validation error; 1 any other failure. Errors are one
line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, NoReturn

import click

from quartzlite import codec
from quartzlite.client import SchedulerClient, preview_schedule
from quartzlite.config import ApiConfig, NodeConfig, database_url_from_env, with_password
from quartzlite.enums import SUBSCRIBABLE_EVENTS, AuditSource, DeliveryStatus, RunStatus
from quartzlite.errors import QuartzliteError, ValidationError
from quartzlite.models import Calendar, Job, Run, Webhook
from quartzlite.redact import SafeFormatter, escape_controls
from quartzlite.validation import parse_params

log = logging.getLogger("quartzlite.cli")


class UserError(click.ClickException):
    """A failure the user can act on: one line, exit code 1."""

    exit_code = 1


class InvalidInput(UserError):
    """Bad input (a ValidationError): one line, exit code 2 like click's usage errors."""

    exit_code = 2


class Group(click.Group):
    """Maps quartzlite's exceptions to one-line messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationError as error:
            raise InvalidInput(error.message) from None
        except QuartzliteError as error:
            raise UserError(error.message) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as error:
            log.debug("unexpected error", exc_info=True)
            raise UserError(f"unexpected error: {type(error).__name__}: {error}") from None


def _client(ctx: click.Context, *, one_shot: bool = True) -> SchedulerClient:
    """The command's client. ``one_shot`` (not for servers): retry noise is hidden."""
    root = ctx.find_root()
    obj = root.obj
    if obj.get("client") is None:
        default_level = root.get_parameter_source("log_level") is click.core.ParameterSource.DEFAULT
        if one_shot and default_level:
            # A one-shot command: its retries while the database is away are not news;
            # the error that ends them is (one line). --log-level INFO shows them.
            storage_log = logging.getLogger("quartzlite.storage")
            root.call_on_close(lambda level=storage_log.level: storage_log.setLevel(level))
            storage_log.setLevel(logging.WARNING)
        # Every change a command makes is audited as user@host, source cli.
        obj["client"] = SchedulerClient(obj["database_url"], source=AuditSource.CLI)
        ctx.find_root().call_on_close(obj["client"].close)
    client: SchedulerClient = obj["client"]
    return client


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str("" if v is None else v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    envvar="QUARTZLITE_DATABASE_URL",
    default=None,
    metavar="URL",
    help="mysql+pymysql://user:password@host:port/database "
    "(env QUARTZLITE_DATABASE_URL; default: the local server, database quartzlite).",
)
@click.option(
    "--database-password-file",
    default=None,
    metavar="FILE",
    help="Read the database password from FILE (env QUARTZLITE_DATABASE_PASSWORD_FILE, or "
    "the password itself in QUARTZLITE_DATABASE_PASSWORD): a password in --database-url "
    "is visible to every local user in `ps`.",
)
@click.option(
    "--log-level",
    envvar="QUARTZLITE_LOG_LEVEL",
    default="INFO",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    show_default=True,
)
@click.version_option(package_name="quartzlite")
@click.pass_context
def main(
    ctx: click.Context, /, database_url: str | None, database_password_file: str | None,
    log_level: str,
) -> None:
    """quartzlite: a clustered, Quartz-style job scheduler on MySQL."""
    handler = logging.StreamHandler(sys.stderr)
    # Control characters in a message (a request's path, a job's name) are escaped.
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    ctx.ensure_object(dict)
    ctx.obj["database_url"] = with_password(
        database_url or database_url_from_env(), database_password_file
    )


# -- db ------------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Create and upgrade the schema (alembic)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@click.pass_context
def db_upgrade(ctx: click.Context, /, revision: str) -> None:
    """Create the database if needed and upgrade the schema."""
    from quartzlite.storage import migrate

    url = ctx.find_root().obj["database_url"]
    migrate.upgrade(url, revision)
    click.echo(f"schema at {revision if revision != 'head' else migrate.head_revision()}")


@db.command("downgrade")
@click.argument("revision")
@click.pass_context
def db_downgrade(ctx: click.Context, /, revision: str) -> None:
    """Downgrade the schema to REVISION (``base`` drops every table)."""
    from quartzlite.storage import migrate

    migrate.downgrade(ctx.find_root().obj["database_url"], revision)
    click.echo(f"schema at {revision}")


@db.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Show the schema revision of the database and the package's head."""
    from quartzlite.storage import migrate

    current = migrate.current_revision(_client(ctx).db)
    head = migrate.head_revision()
    state = "at head" if current == head else "NOT at head: run `quartzlite db upgrade`"
    click.echo(f"{current or 'none'} ({state}; head is {head})")


# -- jobs ----------------------------------------------------------------------------


def _spec_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The job-definition options shared by ``job add``, ``job put`` and ``job update``."""
    opts = [
        click.option("--schedule", "-s", required=False,
                     help="cron, Quartz cron, @every 90s, @at ISO, @manual (runs when triggered)"),
        click.option("--timezone", "-z", help="IANA timezone of the schedule (default UTC)"),
        click.option("--start-at", metavar="INSTANT",
                     help="no slot before this ISO-8601 instant (with an offset or Z)"),
        click.option("--end-at", metavar="INSTANT",
                     help="no slot after this ISO-8601 instant; then the job is finished"),
        click.option("--max-runs", type=int, help="run at most this many slots, then finish"),
        click.option("--jitter", "jitter_s", type=float,
                     help="plan each slot up to this many seconds late (stable per slot)"),
        click.option("--command", "-c", help="shell command, run with bash -c"),
        click.option("--callable", "callable_", metavar="MODULE:FUNC", help="Python callable"),
        click.option("--kwargs", metavar="JSON", help="JSON object of keyword arguments"),
        click.option("--timeout", "timeout_s", type=float, help="seconds before the run is killed"),
        click.option("--max-attempts", type=int, help="attempts per slot, retries included"),
        click.option("--retry-backoff", "retry_backoff_s", type=float, help="first retry delay, s"),
        click.option("--retry-max-backoff", "retry_max_backoff_s", type=float, help="cap, s"),
        click.option("--misfire-policy", type=click.Choice(["fire_once", "skip"])),
        click.option("--misfire-grace", "misfire_grace_s", type=float, help="lateness allowed, s"),
        click.option("--overrun-policy", type=click.Choice(["skip", "catch_up"]),
                     help="slots that came due while the job ran: skip (default for new jobs) "
                          "or catch up (misfire policy)"),
        click.option("--recovery-policy", type=click.Choice(["rerun", "skip"])),
        click.option("--priority", type=int),
        click.option("--tag", "tags", multiple=True, help="node tag required (repeatable)"),
        click.option("--calendar", "calendars", multiple=True, metavar="NAME",
                     help="exclusion calendar whose excluded times the job skips (repeatable; "
                          "on update, the whole list; --calendar '' for none)"),
        click.option("--upstream", "upstream", multiple=True, metavar="JOB",
                     help="a job whose runs trigger this one (repeatable; needs --schedule "
                          "@manual; on update, the whole list; --upstream '' for none)"),
        click.option("--upstream-on", type=click.Choice(["success", "failure", "completion"]),
                     help="how an upstream slot must end to trigger this job (default success)"),
        click.option("--max-concurrency", type=int, metavar="N",
                     help="up to N runs of the job at once across the cluster, each slot still "
                          "once (1..100; default 1)"),
        click.option("--broadcast/--no-broadcast", default=None,
                     help="every live node matching the job's tags runs each slot (needs "
                          "--max-concurrency 1)"),
        click.option("--description"),
        click.option("--paused/--active", default=None, help="create paused / resume"),
        click.option("--json", "as_json", is_flag=True, help="print JSON"),
    ]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


def _spec_data(name: str | None, options: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {} if name is None else {"name": name}
    for key, value in options.items():
        if key == "as_json" or value is None or (
            key in ("tags", "calendars", "upstream") and not value
        ):
            continue
        if key == "callable_":
            key = "callable"
        if key == "kwargs":
            try:
                value = json.loads(value)
            except ValueError as error:
                raise ValidationError("kwargs", f"is not valid JSON: {error}") from None
        if key == "tags":
            value = list(value)
        if key in ("calendars", "upstream"):  # --calendar '' alone: no calendar
            value = [v for v in value if v]
        data[key] = value
    return data


#: Fields ``job show`` prints only when they are not their default.
_SHOWN_WHEN_SET = {"max_concurrency": 1, "broadcast": False}


def _state(job: Job) -> str:
    """The state shown: the job's state, or ``finished`` (idle with no next fire)."""
    return "finished" if job.finished else job.state.value


def _print_job(job: Job, as_json: bool, message: str) -> None:
    if as_json:
        _echo_json(codec.job_to_dict(job))
    else:
        click.echo(f"{message}: {job.name} (state {_state(job)}, "
                   f"{'paused, ' if job.spec.paused else ''}next fire {_when(job.next_fire_at)})")


@main.group()
def job() -> None:
    """Add, change, inspect and control jobs."""


@job.command("add")
@click.argument("name")
@_spec_options()
@click.pass_context
def job_add(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Create job NAME (fails when the name exists)."""
    created = _client(ctx).add_job(_spec_data(name, options))
    _print_job(created, options["as_json"], "added")


@job.command("put")
@click.argument("name")
@_spec_options()
@click.pass_context
def job_put(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Create or replace job NAME; publishing the same definition again changes nothing."""
    stored, changed = _client(ctx).put_job(_spec_data(name, options))
    _print_job(stored, options["as_json"], "changed" if changed else "unchanged")


@job.command("update")
@click.argument("name")
@_spec_options()
@click.pass_context
def job_update(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Change some fields of job NAME."""
    changes = _spec_data(None, options)
    if not changes:
        raise ValidationError("options", "give at least one field to change")
    _print_job(_client(ctx).update_job(name, changes), options["as_json"], "updated")


@job.command("import")
@click.argument("file", type=click.File("r"))
@click.pass_context
def job_import(ctx: click.Context, /, file: Any) -> None:
    """Create many jobs at once from a JSON list of job objects (FILE, or - for stdin)."""
    try:
        items = json.load(file)
    except ValueError as error:
        raise ValidationError("file", f"is not valid JSON: {error}") from None
    if not isinstance(items, list):
        raise ValidationError("file", "must hold a JSON list of job objects")
    count = _client(ctx).add_jobs(items)
    click.echo(f"added {count} jobs")


@job.command("list")
@click.option("--state", type=click.Choice(["idle", "prepared", "executing"]))
@click.option("--paused/--active", default=None)
@click.option("--tag")
@click.option("--prefix", "name_prefix")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--cursor")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def job_list(ctx: click.Context, /, as_json: bool, **filters: Any) -> None:
    """List jobs, by name."""
    page = _client(ctx).list_jobs(**filters)
    if as_json:
        _echo_json(
            {"jobs": [codec.job_to_dict(j) for j in page.items], "next_cursor": page.next_cursor}
        )
        return
    click.echo(
        _table(
            ["name", "schedule", "tz", "state", "paused", "next fire", "owner"],
            [
                [j.name, j.spec.schedule, j.spec.timezone, _state(j),
                 "yes" if j.spec.paused else "no", _when(j.next_fire_at), j.owner_session or "-"]
                for j in page.items
            ],
        )
    )
    if page.next_cursor:
        click.echo(f"(more: --cursor {page.next_cursor})")


@job.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def job_show(ctx: click.Context, /, name: str, as_json: bool) -> None:
    """Show a job's definition, state, next fire times and last run."""
    view = _client(ctx).describe_job(name)
    data = codec.job_to_dict(view.job)
    data["upcoming"] = [codec.iso(t) for t in view.upcoming]
    data["last_run"] = None if view.last_run is None else codec.run_to_dict(view.last_run, output=False)
    data["downstream"] = list(view.downstream)
    if as_json:
        _echo_json(data)
        return
    for key, value in data.items():
        if key in ("upcoming", "last_run", "downstream"):
            continue
        if key in _SHOWN_WHEN_SET and value == _SHOWN_WHEN_SET[key]:
            continue
        if key == "state":
            value = _state(view.job)
        if isinstance(value, list):  # tags: a,b (not a Python repr)
            value = ",".join(map(str, value)) or None
        elif isinstance(value, dict):  # kwargs: as JSON
            value = json.dumps(value)
        click.echo(f"{key:>20}: {'-' if value is None else value}")
    click.echo(f"{'downstream':>20}: " + (",".join(view.downstream) or "-"))
    click.echo(f"{'upcoming':>20}: " + (", ".join(_when(t) for t in view.upcoming) or "-"))
    run = view.last_run
    click.echo(f"{'last run':>20}: " + ("-" if run is None else
               f"#{run.id} {run.status.value} planned {_when(run.planned_at)}"))


def _control(verb: str, method: str, message: str) -> None:
    @job.command(verb)
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_context
    def command(ctx: click.Context, /, name: str, as_json: bool) -> None:
        _print_job(getattr(_client(ctx), method)(name), as_json, message)

    command.__doc__ = f"{verb.capitalize()} job NAME."


_control("pause", "pause_job", "paused")
_control("resume", "resume_job", "resumed")
_control("delete", "delete_job", "deleted (history kept)")
_control("kill", "kill_job", "kill requested")


@job.command("trigger")
@click.argument("name")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="a parameter of this run (repeatable): a callable gets it as a keyword "
                   "argument (a string, over the job's kwargs), a shell command as "
                   "$QUARTZLITE_PARAM_<NAME> (upper-cased)")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def job_trigger(ctx: click.Context, /, name: str, params: tuple[str, ...], as_json: bool) -> None:
    """Trigger job NAME: run it now (a fresh slot), with the --param values if given."""
    values = parse_params(params, "param")
    _print_job(_client(ctx).trigger_job(name, values or None), as_json, "triggered")


def _params_text(params: dict[str, Any] | None, limit: int = 60) -> str:
    """A run's parameters for a table cell: compact JSON, cut at ``limit`` characters."""
    if not params:
        return "-"
    text = json.dumps(params, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _upstream_text(run: Run) -> str:
    """The upstream run that triggered a run's slot, for a table cell: ``#id``."""
    return "-" if run.upstream_run_id is None else f"#{run.upstream_run_id}"


def _shard_text(run: Run) -> str:
    """A broadcast run's shard, for a table cell: ``index/total``."""
    return "-" if run.shard is None else f"{run.shard.index}/{run.shard.total}"


def _print_runs(runs: Sequence[Run], next_cursor: str | None, as_json: bool) -> None:
    if as_json:
        _echo_json({"runs": [codec.run_to_dict(r) for r in runs], "next_cursor": next_cursor})
        return
    # A params column only when a run on the page was triggered with parameters, an
    # upstream column (the run whose end triggered the slot) when one was by a dependency,
    # a shard column when one is a broadcast run.
    with_params = any(r.params for r in runs)
    with_upstream = any(r.upstream_run_id is not None for r in runs)
    with_shard = any(r.shard is not None for r in runs)
    click.echo(
        _table(
            ["id", "job", "planned", "started", "ended", "try", "status", "exit", "node",
             *(["shard"] if with_shard else []), *(["upstream"] if with_upstream else []),
             *(["params"] if with_params else [])],
            [
                [r.id, r.job_name, _when(r.planned_at), _when(r.started_at), _when(r.ended_at),
                 r.attempt, r.status.value, "-" if r.exit_code is None else r.exit_code,
                 r.node or "-",
                 *([_shard_text(r)] if with_shard else []),
                 *([_upstream_text(r)] if with_upstream else []),
                 *([_params_text(r.params)] if with_params else [])]
                for r in runs
            ],
        )
    )
    if next_cursor:
        click.echo(f"(more: --cursor {next_cursor})")


@job.command("history")
@click.argument("name")
@click.option("--status")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--cursor")
@click.option("--output", "show_output", is_flag=True, help="print each run's output tail")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def job_history(
    ctx: click.Context, /, name: str, status: str | None, limit: int, cursor: str | None,
    show_output: bool, as_json: bool,
) -> None:
    """Show the runs of job NAME, newest first."""
    page = _client(ctx).list_runs(job=name, status=status, limit=limit, cursor=cursor)
    _print_runs(page.items, page.next_cursor, as_json)
    if show_output and not as_json:
        for run in page.items:
            running = " (so far: still running)" if run.status is RunStatus.RUNNING else ""
            click.echo(
                (f"--- run #{run.id} params: {json.dumps(run.params, ensure_ascii=False)}\n"
                 if run.params else "")
                + f"--- run #{run.id} output{running} ---\n{run.output}"
                + (f"\n--- error: {run.error}" if run.error else ""))


# -- schedules -----------------------------------------------------------------------


def _parse_instant(field: str, text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(field, f"is not an ISO-8601 instant: {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@main.group()
def schedule() -> None:
    """Work with schedule expressions."""


@schedule.command("preview")
@click.argument("expression")
@click.option("--timezone", "-z", default="UTC", show_default=True)
@click.option("--from", "start", help="ISO-8601 instant to start from (default now)")
@click.option("--count", "-n", type=int, default=10, show_default=True)
@click.option("--calendar", "calendars", multiple=True, metavar="NAME",
              help="leave out the slots this stored calendar excludes (repeatable; reads the "
                   "database)")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedule_preview(
    ctx: click.Context, /, expression: str, timezone: str, start: str | None, count: int,
    calendars: tuple[str, ...], as_json: bool,
) -> None:
    """Print the next fire instants of EXPRESSION."""
    begin = _parse_instant("from", start) if start else datetime.now(UTC)
    if calendars:
        times = _client(ctx).preview(expression, timezone, start=begin, count=count,
                                     calendars=list(calendars))
    else:  # no database needed
        times = preview_schedule(expression, timezone, start=begin, count=count)
    if as_json:
        _echo_json([t.isoformat() for t in times])
    else:
        for t in times:
            click.echo(t.isoformat())


# -- calendars -----------------------------------------------------------------------


def _calendar_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The calendar-definition options shared by ``calendar add`` and ``calendar put``."""
    opts = [
        click.option("--timezone", "-z", default="UTC", show_default=True,
                     help="IANA timezone the rules are read in"),
        click.option("--description", default="", help="what the calendar is for"),
        click.option("--date", "dates", multiple=True, metavar="YYYY-MM-DD",
                     help="exclude this whole local day (repeatable)"),
        click.option("--yearly", multiple=True, metavar="MM-DD",
                     help="exclude this whole local day every year (repeatable; 02-29 too)"),
        click.option("--range", "ranges", multiple=True, metavar="FROM..TO",
                     help="exclude the whole local days FROM to TO, inclusive (repeatable)"),
        click.option("--window", "windows", multiple=True, metavar="EXPR",
                     help="exclude the instants whose wall time matches this cron or Quartz "
                          "expression, e.g. '* * 0-7 ? * *' (repeatable)"),
        click.option("--json", "as_json", is_flag=True, help="print JSON"),
    ]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


def _calendar_data(name: str, options: dict[str, Any]) -> dict[str, Any]:
    ranges = []
    for i, text in enumerate(options["ranges"]):
        low, sep, high = text.partition("..")
        if not sep:
            raise ValidationError(f"rules.ranges[{i}]", f"must be FROM..TO (YYYY-MM-DD..YYYY-MM-DD), got {text!r}")
        ranges.append({"from": low.strip(), "to": high.strip()})
    rules = {
        "dates": list(options["dates"]), "yearly": list(options["yearly"]), "ranges": ranges,
        "windows": list(options["windows"]),
    }
    return {
        "name": name, "timezone": options["timezone"], "description": options["description"],
        "rules": {k: v for k, v in rules.items() if v},
    }


def _print_calendar(calendar: Calendar, as_json: bool, message: str) -> None:
    if as_json:
        _echo_json(codec.calendar_to_dict(calendar))
    else:
        click.echo(f"{message}: calendar {calendar.name} ({calendar.timezone}, {_rules_text(calendar)})")


def _rules_text(calendar: Calendar) -> str:
    rules = calendar.rules
    parts = [f"{len(rules.dates)} date(s)", f"{len(rules.yearly)} yearly",
             f"{len(rules.ranges)} range(s)", f"{len(rules.windows)} window(s)"]
    return ", ".join(parts)


@main.group()
def calendar() -> None:
    """Exclusion calendars: the times the jobs that name them skip (--calendar on jobs)."""


@calendar.command("add")
@click.argument("name")
@_calendar_options()
@click.pass_context
def calendar_add(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Create calendar NAME (fails when the name exists)."""
    created = _client(ctx).add_calendar(_calendar_data(name, options))
    _print_calendar(created, options["as_json"], "added")


@calendar.command("put")
@click.argument("name")
@_calendar_options()
@click.pass_context
def calendar_put(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Create or replace calendar NAME (idempotent). Jobs are not planned anew: nodes use
    the new rules from their next plan of each job that names it."""
    stored, changed = _client(ctx).put_calendar(_calendar_data(name, options))
    _print_calendar(stored, options["as_json"], "changed" if changed else "unchanged")


@calendar.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def calendar_show(ctx: click.Context, /, name: str, as_json: bool) -> None:
    """Show calendar NAME and its rules."""
    found = _client(ctx).get_calendar(name)
    if as_json:
        _echo_json(codec.calendar_to_dict(found))
        return
    rules = found.rules
    for key, value in (
        ("name", found.name), ("timezone", found.timezone),
        ("description", found.description or "-"),
        ("dates", ", ".join(rules.dates) or "-"), ("yearly", ", ".join(rules.yearly) or "-"),
        ("ranges", ", ".join(f"{a}..{b}" for a, b in rules.ranges) or "-"),
        ("windows", " | ".join(rules.windows) or "-"),
        ("updated", _when(found.updated_at)),
    ):
        click.echo(f"{key:>12}: {value}")


@calendar.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def calendar_list(ctx: click.Context, /, as_json: bool) -> None:
    """List the calendars, by name."""
    found = _client(ctx).list_calendars()
    if as_json:
        _echo_json([codec.calendar_to_dict(c) for c in found])
        return
    click.echo(_table(["name", "tz", "rules", "description"],
                      [[c.name, c.timezone, _rules_text(c), c.description] for c in found]))


@calendar.command("delete")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def calendar_delete(ctx: click.Context, /, name: str, as_json: bool) -> None:
    """Delete calendar NAME (refused while a job names it)."""
    _print_calendar(_client(ctx).delete_calendar(name), as_json, "deleted")


# -- webhooks ------------------------------------------------------------------------

_EVENT_CHOICE = click.Choice([e.value for e in SUBSCRIBABLE_EVENTS])


def _print_webhook(webhook: Webhook, as_json: bool, message: str,
                   secret: str | None = None) -> None:
    if as_json:
        _echo_json({**codec.webhook_to_dict(webhook), **({"secret": secret} if secret else {})})
        return
    click.echo(f"webhook {webhook.name} {message}")
    if secret:
        click.echo(f"secret: {secret}")
        click.echo("(shown once: it signs every delivery, X-Quartzlite-Signature; keep it "
                   "with the receiver)")


@main.group()
def webhook() -> None:
    """Webhook subscriptions: POST run and node events to a URL, signed, at least once."""


@webhook.command("add")
@click.argument("name")
@click.option("--url", required=True, help="http(s) URL the deliveries are POSTed to")
@click.option("--event", "events", multiple=True, required=True, type=_EVENT_CHOICE,
              help="an event type to deliver (repeatable)")
@click.option("--job-prefix", help="only events of jobs whose name starts with this")
@click.option("--tag", help="only events of jobs having this tag")
@click.option("--disabled", is_flag=True, help="create it disabled")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_add(ctx: click.Context, /, name: str, url: str, events: tuple[str, ...],
                job_prefix: str | None, tag: str | None, disabled: bool, as_json: bool) -> None:
    """Create webhook NAME; prints its signing secret, this once."""
    data: dict[str, Any] = {"name": name, "url": url, "events": list(events),
                            "enabled": not disabled}
    if job_prefix is not None:
        data["job_prefix"] = job_prefix
    if tag is not None:
        data["tag"] = tag
    created, secret = _client(ctx).add_webhook(data)
    _print_webhook(created, as_json, "added", secret)


@webhook.command("update")
@click.argument("name")
@click.option("--url", help="new URL")
@click.option("--event", "events", multiple=True, type=_EVENT_CHOICE,
              help="the event types to deliver from now on (repeatable; replaces the list)")
@click.option("--job-prefix", help="only events of jobs whose name starts with this ('' = any)")
@click.option("--tag", help="only events of jobs having this tag ('' = any)")
@click.option("--enable/--disable", "enabled", default=None,
              help="a disabled webhook gets no events; its pending deliveries wait")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_update(ctx: click.Context, /, name: str, url: str | None, events: tuple[str, ...],
                   job_prefix: str | None, tag: str | None, enabled: bool | None,
                   as_json: bool) -> None:
    """Change webhook NAME."""
    changes: dict[str, Any] = {}
    for key, value in (("url", url), ("job_prefix", job_prefix), ("tag", tag),
                       ("enabled", enabled)):
        if value is not None:
            changes[key] = value
    if events:
        changes["events"] = list(events)
    if not changes:
        raise InvalidInput("give at least one of --url, --event, --job-prefix, --tag, "
                           "--enable, --disable")
    _print_webhook(_client(ctx).update_webhook(name, changes), as_json, "changed")


@webhook.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_list(ctx: click.Context, /, as_json: bool) -> None:
    """List the webhooks, by name (never their secrets)."""
    found = _client(ctx).list_webhooks()
    if as_json:
        _echo_json([codec.webhook_to_dict(w) for w in found])
        return
    click.echo(_table(
        ["name", "enabled", "events", "job prefix", "tag", "url"],
        [[w.name, "yes" if w.enabled else "no", ",".join(e.value for e in w.events),
          w.job_prefix or "-", w.tag or "-", w.url] for w in found],
    ))


@webhook.command("delete")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_delete(ctx: click.Context, /, name: str, as_json: bool) -> None:
    """Delete webhook NAME and its delivery log."""
    _print_webhook(_client(ctx).delete_webhook(name), as_json, "deleted")


@webhook.command("test")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_test(ctx: click.Context, /, name: str, as_json: bool) -> None:
    """Queue a webhook.test event for webhook NAME alone (a node delivers it)."""
    delivery = _client(ctx).test_webhook(name)
    if as_json:
        _echo_json(codec.delivery_to_dict(delivery))
    else:
        click.echo(f"test delivery {delivery.id} queued for webhook {name}")


@webhook.command("deliveries")
@click.argument("name")
@click.option("--status", type=click.Choice([s.value for s in DeliveryStatus]))
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--cursor")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def webhook_deliveries(ctx: click.Context, /, name: str, status: str | None, limit: int,
                       cursor: str | None, as_json: bool) -> None:
    """The delivery log of webhook NAME, newest event first."""
    page = _client(ctx).list_deliveries(name, status=status, limit=limit, cursor=cursor)
    if as_json:
        _echo_json({"deliveries": [codec.delivery_to_dict(d) for d in page.items],
                    "next_cursor": page.next_cursor})
        return
    click.echo(_table(
        ["id", "event", "job", "occurred", "status", "tries", "code", "next attempt",
         "last error"],
        [[d.id, d.event.value, d.job_name or "-", _when(d.occurred_at), d.status.value,
          d.attempts, "-" if d.last_status_code is None else d.last_status_code,
          _when(d.next_attempt_at) if d.status.value in ("pending", "paused") else "-",
          (d.last_error or "-")[:60]] for d in page.items],
    ))
    if page.next_cursor:
        click.echo(f"(more: --cursor {page.next_cursor})")


# -- history -------------------------------------------------------------------------


@main.group()
def history() -> None:
    """Run history kept in the database."""


@history.command("prune")
@click.option("--older-than", required=True, metavar="DURATION",
              help="delete finished runs planned longer ago than this (e.g. 30d, 12h)")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history_prune(ctx: click.Context, /, older_than: str, as_json: bool) -> None:
    """Delete finished runs older than --older-than, deleted jobs with no runs left, and
    webhook events (with their deliveries) older than it. Running runs and live jobs
    are never touched (nodes also prune by themselves: see history_retention_s)."""
    pruned = _client(ctx).prune_history(older_than)
    if as_json:
        _echo_json({"runs": pruned.runs, "jobs": pruned.jobs, "events": pruned.events,
                    "deliveries": pruned.deliveries, "before": pruned.before.isoformat()})
    else:
        click.echo(f"pruned {pruned.runs} run(s), {pruned.jobs} deleted job(s), "
                   f"{pruned.events} webhook event(s) and {pruned.deliveries} delivery(ies) "
                   f"from before {pruned.before.isoformat()}")


# -- audit ---------------------------------------------------------------------------


@main.group()
def audit() -> None:
    """The audit trail: every change, through the API, the dashboard, the CLI (as
    user@host) or the library."""


@audit.command("list")
@click.option("--job", help="entries about this job")
@click.option("--token", help="entries by this API token or CLI/library actor (e.g. ops@host1)")
@click.option("--source", type=click.Choice([s.value for s in AuditSource]),
              help="entries that came this way")
@click.option("--since", metavar="INSTANT", help="recorded at or after this ISO-8601 instant")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--cursor")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_list(
    ctx: click.Context, /, job: str | None, token: str | None, source: str | None,
    since: str | None, limit: int, cursor: str | None, as_json: bool,
) -> None:
    """List the audit trail, newest first."""
    page = _client(ctx).list_audit(
        job=job, token=token, source=source, since=_parse_instant("since", since) if since else None,
        limit=limit, cursor=cursor,
    )
    if as_json:
        _echo_json({"items": [{
            "id": e.id, "at": codec.iso(e.at), "source": e.source.value, "token": e.token_name,
            "action": e.action, "job": e.job_name, "client_address": e.client_address,
            "details": e.details,
        } for e in page.items], "next_cursor": page.next_cursor})
        return
    click.echo(
        _table(
            ["id", "when", "source", "who", "action", "job", "outcome"],
            [
                # A refused write's job name is stored as it was sent: escaped here.
                [e.id, _when(e.at), e.source.value, escape_controls(e.token_name),
                 escape_controls(e.action), escape_controls(e.job_name or "-"),
                 e.details.get("status", e.details.get("error", "ok"))]
                for e in page.items
            ],
        )
    )
    if page.next_cursor:
        click.echo(f"(more: --cursor {page.next_cursor})")


# -- cluster -------------------------------------------------------------------------


@main.command("cluster")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cluster(ctx: click.Context, /, as_json: bool) -> None:
    """Show the nodes: host, pid, last heartbeat, clock offset, the database server each
    talks to, running jobs."""
    client = _client(ctx)
    nodes = client.cluster()
    if as_json:
        _echo_json([codec.session_to_dict(s) for s in nodes])
        return
    now = client.now()
    click.echo(
        _table(
            ["session", "host", "pid", "started", "heartbeat age", "offset ms", "capacity",
             "tags", "database", "running"],
            [
                [s.id, s.host, s.pid, _when(s.started_at),
                 f"{(now - s.heartbeat_at).total_seconds():.1f}s", f"{s.clock_offset_ms:.1f}",
                 s.capacity, ",".join(s.tags) or "-", s.db_member or "-",
                 ",".join(s.running_jobs) or "-"]
                for s in nodes
            ],
        )
    )


# -- node ----------------------------------------------------------------------------


def _node_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One option per NodeConfig setting; each mirrors QUARTZLITE_<NAME>."""
    for f in reversed(fields(NodeConfig)):
        if f.name == "database_url":
            continue
        flag = "--" + f.name.replace("_", "-")
        env = f"QUARTZLITE_{f.name.upper()}"
        kind = str(f.type)
        if kind == "bool":
            fn = click.option(flag, f.name, is_flag=True, default=None, envvar=env)(fn)
        elif kind.startswith("tuple"):
            fn = click.option(
                "--tag" if f.name == "tags" else flag, f.name, multiple=True, envvar=env,
                help="node tag (repeatable; env: comma-separated)",
            )(fn)
        else:
            type_ = {"float": float, "int": int}.get(kind, str)
            fn = click.option(flag, f.name, type=type_, default=None, envvar=env,
                              show_envvar=True)(fn)
    return fn


def node_config(ctx: click.Context, /, options: dict[str, Any]) -> NodeConfig:
    values = {k: v for k, v in options.items() if v is not None and v != ()}
    if "tags" in values:
        tags: list[str] = []
        for item in values["tags"]:
            tags.extend(t.strip() for t in item.split(",") if t.strip())
        values["tags"] = tuple(tags)
    return NodeConfig.from_env(database_url=ctx.find_root().obj["database_url"], **values)


@main.command("node")
@_node_options
@click.pass_context
def node(ctx: click.Context, /, **options: Any) -> None:
    """Run one scheduler node until SIGTERM/SIGINT (a second signal stops at once)."""
    from quartzlite.node.runtime import run_node

    _exit_process(run_node(node_config(ctx, options)))


def _exit_process(code: int) -> NoReturn:
    """End a node's process with ``code`` once the node has stopped, without the
    interpreter's finalization. Everything the node owns is closed by then (journal,
    guard, pools); what may still run are daemon threads stuck in a C call on a dead
    link, and one of those waking up inside a finalizing interpreter (or OpenSSL's
    exit-time cleanup) crashed the process with SIGSEGV now and then: the exit status
    is how supervisors and operators tell a fence (3) from a stop (0)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# -- api, serve, token ---------------------------------------------------------------


def _api_options(*, prefixed: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One --api-NAME option per ApiConfig setting (``api`` also takes --NAME)."""

    def names(name: str) -> tuple[str, ...]:
        return (f"--api-{name}",) if prefixed else (f"--{name}", f"--api-{name}")

    opts = [
        click.option(*names("host"), "api_host", envvar="QUARTZLITE_API_HOST", default=None,
                     show_envvar=True, help="address to listen on [default: 127.0.0.1]; "
                     "non-loopback only once an API token exists"),
        click.option(*names("port"), "api_port", type=int, envvar="QUARTZLITE_API_PORT",
                     default=None, show_envvar=True, help="TCP port [default: 8080]"),
        click.option(*names("threads"), "api_threads", type=int,
                     envvar="QUARTZLITE_API_THREADS", default=None, show_envvar=True,
                     help="WSGI worker threads [default: 8]"),
        click.option(*names("connection-limit"), "api_connection_limit", type=int,
                     envvar="QUARTZLITE_API_CONNECTION_LIMIT", default=None, show_envvar=True,
                     help="most open connections, idle ones included; lowered to what the "
                     "file descriptor limit allows [default: 1000]"),
        click.option(*names("channel-timeout-s"), "api_channel_timeout_s", type=int,
                     envvar="QUARTZLITE_API_CHANNEL_TIMEOUT_S", default=None, show_envvar=True,
                     help="seconds before a silent connection (idle, or a request that "
                     "never finishes arriving) is closed [default: 30]"),
        click.option(*names("max-header-bytes"), "api_max_header_bytes", type=int,
                     envvar="QUARTZLITE_API_MAX_HEADER_BYTES", default=None, show_envvar=True,
                     help="largest request line and headers; larger gets 431 "
                     "[default: 32768]"),
        click.option(*names("trusted-proxy"), "api_trusted_proxy",
                     envvar="QUARTZLITE_API_TRUSTED_PROXY", default=None, show_envvar=True,
                     help="address of a TLS-terminating reverse proxy whose X-Forwarded-Proto "
                     "and X-Forwarded-For are believed (the dashboard's cookie is then "
                     "Secure) [default: none]"),
    ]

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


def _api_config(options: dict[str, Any]) -> ApiConfig:
    """The ApiConfig of the ``api_*`` options, taken out of ``options``."""
    names = [name for name in options if name.startswith("api_")]
    return ApiConfig.from_env(**{name.removeprefix("api_"): options.pop(name) for name in names})


@main.command("api")
@_api_options(prefixed=False)
@click.pass_context
def api(ctx: click.Context, /, **options: Any) -> None:
    """Serve the HTTP API (no node) until SIGTERM/SIGINT."""
    from quartzlite.api import create_app
    from quartzlite.api.server import ApiServer, check_bind

    config = _api_config(options)
    client = _client(ctx, one_shot=False)
    check_bind(config.host, client)
    from quartzlite.node.node import StopRequest

    server = ApiServer(create_app(client), config)
    stop = StopRequest()  # lock-free for the signal handler (see StopRequest)

    def on_signal(signum: int, frame: object) -> None:
        stop.request()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    while stop.level == 0:
        stop.wait(0.5)
        if not server.running:
            raise UserError("the API server stopped unexpectedly (see the log)")
    server.stop()


@main.command("serve")
@_node_options
@_api_options(prefixed=True)
@click.pass_context
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Run a node and the HTTP API in one process until SIGTERM/SIGINT.

    The node runs on the main thread, the API in a thread; /readyz answers 200 once
    the node's session is live, and the API stops when the node stops."""
    from quartzlite.api import create_app, set_node
    from quartzlite.api.server import ApiServer, check_bind
    from quartzlite.node.runtime import run_node

    api_cfg = _api_config(options)
    node_cfg = node_config(ctx, options)
    client = _client(ctx, one_shot=False)
    check_bind(api_cfg.host, client)
    app = create_app(client, expect_node=True)
    server = ApiServer(app, api_cfg)
    server.start()
    try:
        code = run_node(node_cfg, on_started=lambda started: set_node(app, started))
    finally:
        set_node(app, None)
        server.stop()
    _exit_process(code)


@main.group()
def token() -> None:
    """API tokens: shown once when created, stored hashed."""


@token.command("create")
@click.option("--name", required=True, help="a name for the token (who or what uses it)")
@click.option("--role", type=click.Choice(["admin", "viewer"]), required=True,
              help="admin: everything; viewer: read only")
@click.pass_context
def token_create(ctx: click.Context, /, name: str, role: str) -> None:
    """Create a token and print its secret (on stdout, alone) this one time."""
    created, secret = _client(ctx).create_token(name, role)
    click.echo(
        f"created {created.role.value} token {created.name!r}; the secret below is shown "
        "only this once:", err=True,
    )
    click.echo(secret)


@token.command("ensure-admin")
@click.option("--name", default="admin", show_default=True)
@click.pass_context
def token_ensure_admin(ctx: click.Context, /, name: str) -> None:
    """Create an admin token only if no token exists (``make run``'s first start)."""
    result = _client(ctx).ensure_token(name)
    if result is None:
        config = ApiConfig.from_env()
        click.echo("an API token exists already (`quartzlite token list`); none created\n"
                   f"the dashboard: http://{config.host}:{config.port}/ui/")
        return
    created, secret = result
    config = ApiConfig.from_env()
    click.echo(
        f"created admin API token {created.name!r}; it is shown only this once, keep it:\n"
        f"    {secret}\n"
        f"use it as: curl -H 'Authorization: Bearer {secret}' "
        f"http://{config.host}:{config.port}/api/v1/jobs\n"
        f"the dashboard: http://{config.host}:{config.port}/ui/ (sign in with the same token)"
    )


@token.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def token_list(ctx: click.Context, /, as_json: bool) -> None:
    """List the tokens (names and roles; secrets are never shown again)."""
    tokens = _client(ctx).list_tokens()
    if as_json:
        _echo_json([{"name": t.name, "role": t.role.value, "created_at": codec.iso(t.created_at)}
                    for t in tokens])
        return
    click.echo(_table(["name", "role", "created"],
                      [[t.name, t.role.value, _when(t.created_at)] for t in tokens]))


@token.command("revoke")
@click.argument("name")
@click.pass_context
def token_revoke(ctx: click.Context, /, name: str) -> None:
    """Revoke token NAME: requests carrying it are refused from now on."""
    revoked = _client(ctx).revoke_token(name)
    click.echo(f"revoked token {revoked.name!r}")


if __name__ == "__main__":  # pragma: no cover
    main()
