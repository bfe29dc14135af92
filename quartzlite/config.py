"""Settings users tune. Each has its unit and default in its docstring.

Every setting can come from the environment as ``QUARTZLITE_<NAME>`` (upper case);
the CLI options mirror these names.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from quartzlite.errors import ValidationError

DEFAULT_DATABASE_URL = "mysql+pymysql://root@127.0.0.1:3306/quartzlite"
#: MySQL's port, for a host given without one.
DEFAULT_PORT = 3306


@dataclass(frozen=True, slots=True)
class DatabaseHost:
    """One server of the database URL's host list."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def database_hosts(url: str) -> tuple[str, tuple[DatabaseHost, ...]]:
    """The servers a database URL names. A URL may list several members of one cluster
    (Galera), comma-separated: ``mysql+pymysql://user@db1:3306,db2,db3:3307/quartzlite``
    (port 3306 when left out). Returns the URL with only the first host, and every host
    in the order given: the order in which a node tries them."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    hosts = []
    for item in (part.strip() for part in hostlist.split(",")):
        if not item:
            raise ValidationError("database_url", "has an empty entry in its host list")
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = item.partition(":")
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise ValidationError("database_url", f"has a bad port in {item!r}") from None
        if not host or not 0 < port < 65536:
            raise ValidationError("database_url", f"has a bad host or port in {item!r}")
        hosts.append(DatabaseHost(host, port))
    first = hostlist.split(",")[0].strip()
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{first}")), tuple(hosts)
#: Longest run history a retention or a prune may ask for (100 years).
MAX_RETENTION_S = 36500 * 86400.0


def database_url_from_env() -> str:
    """``QUARTZLITE_DATABASE_URL``, else the local server's ``quartzlite`` database."""
    return os.environ.get("QUARTZLITE_DATABASE_URL") or DEFAULT_DATABASE_URL


def with_password(url: str, password_file: str | None = None) -> str:
    """``url`` with the database password read from ``password_file`` (else from the
    file named by ``QUARTZLITE_DATABASE_PASSWORD_FILE``, else from
    ``QUARTZLITE_DATABASE_PASSWORD``): a password on the command line is visible in
    ``ps`` to every local user. A URL that holds a password already is kept as it is
    when none of these is set, and refused when one is (two passwords: which one?)."""
    field_name = "database_password_file"
    password_file = password_file or os.environ.get("QUARTZLITE_DATABASE_PASSWORD_FILE") or None
    if password_file is not None:
        try:
            password = Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise ValidationError(field_name, f"cannot read {password_file}: {reason}") from None
        if not password:
            raise ValidationError(field_name, f"{password_file} is empty")
    else:
        field_name = "QUARTZLITE_DATABASE_PASSWORD"
        password = os.environ.get("QUARTZLITE_DATABASE_PASSWORD") or ""
        if not password:
            return url
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or not userinfo:
        raise ValidationError("database_url", "names no user to give the password to (user@host)")
    if ":" in userinfo:
        raise ValidationError(field_name, "the database URL has a password as well: give one of them")
    netloc = f"{userinfo}:{quote(password, safe='')}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """How one node behaves. Durations are seconds (``_s``)."""

    database_url: str = field(default_factory=database_url_from_env)
    #: Seconds between heartbeats of this node's session. Default 1.0.
    heartbeat_interval_s: float = 1.0
    #: Seconds without a successful heartbeat (monotonic clock) after which the node
    #: fences itself: stops firing, kills its running jobs, drops its state. Default 5.0.
    #: Must be at most ``session_timeout_s - 2 * heartbeat_interval_s``.
    fence_after_s: float = 5.0
    #: Seconds since a session's last heartbeat (database clock) after which peers
    #: expire it and take its work over. Default 7.0.
    session_timeout_s: float = 7.0
    #: Seconds between the node's one watch query (job changes, due jobs, peers'
    #: deadlines). New or triggered jobs are noticed within about this long. Default 2.0.
    #: At most half of ``session_timeout_s``.
    poll_interval_s: float = 2.0
    #: How far ahead (seconds) the scanner prepares due jobs. Work prepared by a node
    #: that dies is stranded until its session expires, so the window stays short:
    #: just long enough that a job is prepared before it is due. Default 2.0.
    look_ahead_s: float = 2.0
    #: How far ahead of its instant (seconds) a prepared job is fired: its run row is
    #: committed early, so the fire transaction (and any wait for the job lock behind
    #: peers) is off the run's start. At the instant one lock-free start check confirms
    #: the database clock has reached it and the job was not paused, deleted or killed
    #: meanwhile (such runs never start), and the run is handed to a worker thread.
    #: Capped at ``look_ahead_s``; 0 fires at the instant. Default 0.5.
    fire_ahead_s: float = 0.5
    #: Seconds between compensation passes when the watch sees nothing amiss (jobs the
    #: DB says we own but memory does not know). Default 30.0.
    compensate_interval_s: float = 30.0
    #: Most runs this node executes at once: shell processes and Python worker threads
    #: together. A run's end frees its place at once (its result is recorded in a
    #: batch, after). Due runs beyond it wait on this node, highest priority first,
    #: while peers take the rest. Default 16.
    capacity: int = 16
    #: Most runs this node holds ahead of their start: prepared or fired, not yet
    #: handed to a worker. Preparing and firing go ahead in batches up to this, so a
    #: burst due at one instant starts at once; it is all handed back on stop and
    #: fence, and peers take it over if the node dies. While due runs wait for a free
    #: place, the node prepares nothing more. Default 5000.
    prefetch: int = 5000
    #: Most shell runs whose bash is started ahead of their instant: fired runs get
    #: theirs at once, and it waits at its gate (running nothing) until the run starts,
    #: so bash's start-up (~1 ms of CPU each) is off the run's start. Each is a bash
    #: process (its memory mostly shared) holding two of the node's file descriptors
    #: (bounded by the node's limit too); 0 starts every bash at its run's start.
    #: Default 256.
    warm_shells: int = 256
    #: Tags of this node; a job with tags runs only on nodes having all of them.
    tags: tuple[str, ...] = ()
    #: Seconds running jobs get to finish after SIGTERM before they are killed. Default 30.
    shutdown_grace_s: float = 30.0
    #: Seconds between SIGTERM and SIGKILL when a run times out or is killed. Default 5.
    kill_grace_s: float = 5.0
    #: innodb_lock_wait_timeout (whole seconds) set on the node's connections. Default 3.
    lock_wait_timeout_s: int = 3
    #: Most runs completed in one result transaction. Default 200.
    result_batch: int = 200
    #: Most bytes of output kept per run (the tail). Default 65536.
    output_limit_bytes: int = 65536
    #: Seconds between two writes of running shell runs' output so far to their run
    #: rows (the same tail as the final output, at most ``output_limit_bytes``): the API
    #: and the dashboard show it while the run runs, and a run abandoned by a node that
    #: died keeps what was written. One UPDATE per interval for all runs that printed
    #: something since the last (none when none did). 0 disables it (output appears
    #: when the run ends). Default 1.0.
    live_output_interval_s: float = 1.0
    #: Seconds of run history kept: a minute after start and then every hour the node
    #: deletes finished runs planned longer ago than this, deleted jobs with no runs
    #: left, and webhook events with their deliveries older than this (``quartzlite
    #: history prune`` does the same on demand). 0 keeps everything.
    #: Default 2592000 (30 days).
    history_retention_s: float = 30 * 86400.0
    #: Seconds of API audit trail kept: pruned with the run history (a minute after
    #: start, then hourly). 0 keeps everything. Default 7776000 (90 days).
    audit_retention_s: float = 90 * 86400.0
    #: Seconds a webhook delivery attempt may take (connect, send, each read of the
    #: answer); past it the attempt failed and is retried. Default 10.
    webhook_timeout_s: float = 10.0
    #: Attempts of one webhook delivery before it is given up (status failed); retries
    #: wait 1 s, 2 s, 4 s ... up to 10 minutes in between. Default 12 (about an hour).
    webhook_max_attempts: int = 12
    #: Webhook deliveries this node attempts at once (each a thread): a slow or dead
    #: receiver holds one place, never the scheduler. 0 stops this node delivering
    #: (others still do). Default 4.
    webhook_concurrency: int = 4
    #: When fenced, wait for the database and join again under a new session
    #: instead of exiting non-zero. Default False.
    rejoin: bool = False
    #: Directory of the node's outcome journal (outcomes the database has not recorded
    #: yet: see :mod:`quartzlite.node.journal`). Nodes on one machine for one database
    #: share it. Default '' = ``$XDG_STATE_HOME/quartzlite`` (else
    #: ``~/.local/state/quartzlite``), in a subdirectory per database.
    state_dir: str = ""
    #: Seconds added to this host's clock, for testing clock skew. Default 0.
    clock_skew_s: float = 0.0
    #: Host name recorded in the session row. Default: this host's name.
    host: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        positive = (
            "heartbeat_interval_s",
            "fence_after_s",
            "session_timeout_s",
            "poll_interval_s",
            "compensate_interval_s",
            "kill_grace_s",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValidationError(name, "must be greater than 0")
        if self.look_ahead_s < 0:
            raise ValidationError("look_ahead_s", "must not be negative")
        for name in ("history_retention_s", "audit_retention_s"):
            retention = getattr(self, name)
            if retention != 0 and not 60 <= retention <= MAX_RETENTION_S:
                raise ValidationError(
                    name, "must be 0 (keep all) or between 60 and 3153600000 (100 years)"
                )
        if not 0 <= self.fire_ahead_s <= 60:
            raise ValidationError("fire_ahead_s", "must be between 0 and 60")
        if self.shutdown_grace_s < 0:
            raise ValidationError("shutdown_grace_s", "must not be negative")
        if not 1 <= self.capacity <= 10_000:
            raise ValidationError("capacity", "must be between 1 and 10000")
        if not 1 <= self.prefetch <= 100_000:
            raise ValidationError("prefetch", "must be between 1 and 100000")
        if not 0 <= self.warm_shells <= 10_000:
            raise ValidationError("warm_shells", "must be between 0 and 10000")
        if not 1 <= self.lock_wait_timeout_s <= 60:
            raise ValidationError("lock_wait_timeout_s", "must be between 1 and 60")
        if not 1 <= self.result_batch <= 10_000:
            raise ValidationError("result_batch", "must be between 1 and 10000")
        if not 0.1 <= self.webhook_timeout_s <= 300:
            raise ValidationError("webhook_timeout_s", "must be between 0.1 and 300")
        if not 1 <= self.webhook_max_attempts <= 100:
            raise ValidationError("webhook_max_attempts", "must be between 1 and 100")
        if not 0 <= self.webhook_concurrency <= 64:
            raise ValidationError("webhook_concurrency", "must be between 0 and 64")
        if not 1024 <= self.output_limit_bytes <= 16 * 1024 * 1024:
            raise ValidationError("output_limit_bytes", "must be between 1024 and 16777216")
        if self.live_output_interval_s != 0 and not 0.1 <= self.live_output_interval_s <= 3600:
            raise ValidationError("live_output_interval_s",
                                  "must be 0 (off) or between 0.1 and 3600")
        if self.poll_interval_s * 2 > self.session_timeout_s:
            raise ValidationError("poll_interval_s", "must be at most half of session_timeout_s")
        if self.heartbeat_interval_s * 2 > self.fence_after_s:
            raise ValidationError(
                "fence_after_s", "must be at least twice heartbeat_interval_s"
            )
        # A node must have killed its children before any peer may expire it: leave two
        # heartbeats of margin for the kill and for the time the last heartbeat spent
        # on the wire after the database stamped it.
        if self.fence_after_s + 2 * self.heartbeat_interval_s > self.session_timeout_s:
            raise ValidationError(
                "session_timeout_s",
                "must be at least fence_after_s + 2 * heartbeat_interval_s "
                f"({self.fence_after_s + 2 * self.heartbeat_interval_s:g}s), so that a node "
                "fences itself before its peers expire it",
            )

    @property
    def effective_fire_ahead_s(self) -> float:
        """``fire_ahead_s``, at most ``look_ahead_s`` (nothing is fired unprepared)."""
        return min(self.fire_ahead_s, self.look_ahead_s)

    @property
    def journal_dir(self) -> Path:
        """Where this node's outcome journal lives (see ``state_dir``)."""
        if self.state_dir:
            return Path(self.state_dir)
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        url = urlsplit(self.database_url)
        # One journal per database, whichever order a node lists a cluster's members in.
        hosts = sorted(f"{h.host}:{h.port}" for h in database_hosts(self.database_url)[1])
        where = f"{','.join(hosts)}{url.path}"
        return Path(base, "quartzlite", hashlib.sha256(where.encode()).hexdigest()[:16])

    @classmethod
    def from_env(cls, **overrides: Any) -> NodeConfig:
        """Defaults, then ``QUARTZLITE_*`` variables, then ``overrides`` (None = unset)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = os.environ.get(f"QUARTZLITE_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _coerce(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _coerce(name: str, type_: Any, raw: str) -> Any:
    kind = str(type_)
    try:
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
        if kind == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind.startswith("tuple"):
            return tuple(t.strip() for t in raw.split(",") if t.strip())
    except ValueError:
        raise ValidationError(
            f"QUARTZLITE_{name.upper()}", f"cannot read {raw!r} as {kind}"
        ) from None
    return raw


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiConfig:
    """How the HTTP API listens (``quartzlite api`` and ``quartzlite serve``).

    Environment: ``QUARTZLITE_API_<NAME>`` (upper case), e.g. ``QUARTZLITE_API_PORT``,
    ``QUARTZLITE_API_CONNECTION_LIMIT``.
    """

    #: Address to listen on. Default 127.0.0.1. Any address other than a loopback one
    #: is refused while no API token exists (``quartzlite token create``).
    host: str = "127.0.0.1"
    #: TCP port. Default 8080 (0 = any free port).
    port: int = 8080
    #: Worker threads of the WSGI server (waitress). Default 8.
    threads: int = 8
    #: Most connections open at once, idle ones included; past it new connections wait
    #: in the kernel's backlog. Idle and half-open connections cost a file descriptor
    #: and no thread, so the limit is high: waitress's own 100 let 110 stalled clients
    #: lock /healthz out. Lowered when the process's file descriptor limit
    #: (RLIMIT_NOFILE) cannot make room for it. Default 1000.
    connection_limit: int = 1000
    #: Whole seconds a connection may stay silent (no request in progress) before the
    #: server closes it: idle keep-alive connections and requests that never finish
    #: arriving. Enforced within ``cleanup_interval_s`` after. Default 30.
    channel_timeout_s: int = 30
    #: Largest request head (request line and headers, bytes); larger gets 431. Our
    #: requests carry a token and a few headers; the bound keeps a thousand
    #: connections' buffers small. Default 32768.
    max_header_bytes: int = 32 * 1024
    #: Address of a reverse proxy that terminates TLS in front of the API (e.g.
    #: ``127.0.0.1``): its ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed, so
    #: requests count as https (the dashboard's cookie gets ``Secure``) and the client's
    #: address is the proxy's client. Default '' (none: those headers are dropped).
    trusted_proxy: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValidationError("api_host", "must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValidationError("api_port", "must be between 0 and 65535")
        if not 1 <= self.threads <= 256:
            raise ValidationError("api_threads", "must be between 1 and 256")
        if not 1 <= self.connection_limit <= 100_000:
            raise ValidationError("api_connection_limit", "must be between 1 and 100000")
        if not 1 <= self.channel_timeout_s <= 3600:
            raise ValidationError("api_channel_timeout_s", "must be between 1 and 3600")
        if not 4096 <= self.max_header_bytes <= 1024 * 1024:
            raise ValidationError("api_max_header_bytes", "must be between 4096 and 1048576")

    @property
    def cleanup_interval_s(self) -> int:
        """How often silent connections are looked for (whole seconds, as waitress
        takes it): a quarter of ``channel_timeout_s``, 1 to 5, so that one is closed
        soon after its timeout (waitress's own 30 s doubled a 30 s timeout)."""
        return max(1, min(5, self.channel_timeout_s // 4))

    @classmethod
    def from_env(cls, **overrides: Any) -> ApiConfig:
        """Defaults, then ``QUARTZLITE_API_*`` variables, then ``overrides`` (None = unset)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = os.environ.get(f"QUARTZLITE_API_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _coerce(f"api_{f.name}", f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
