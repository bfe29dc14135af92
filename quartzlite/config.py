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
from urllib.parse import urlsplit

from quartzlite.errors import ValidationError

DEFAULT_DATABASE_URL = "mysql+pymysql://root@127.0.0.1:3306/quartzlite"
#: Longest run history a retention or a prune may ask for (100 years).
MAX_RETENTION_S = 36500 * 86400.0


def database_url_from_env() -> str:
    """``QUARTZLITE_DATABASE_URL``, else the local server's ``quartzlite`` database."""
    return os.environ.get("QUARTZLITE_DATABASE_URL") or DEFAULT_DATABASE_URL


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
    #: Seconds of run history kept: a minute after start and then every hour the node
    #: deletes finished runs planned longer ago than this, and deleted jobs with no runs
    #: left (``quartzlite history prune`` does the same on demand). 0 keeps everything.
    #: Default 2592000 (30 days).
    history_retention_s: float = 30 * 86400.0
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
        if self.history_retention_s != 0 and not 60 <= self.history_retention_s <= MAX_RETENTION_S:
            raise ValidationError(
                "history_retention_s", "must be 0 (keep all) or between 60 and 3153600000 (100 years)"
            )
        if not 0 <= self.fire_ahead_s <= 60:
            raise ValidationError("fire_ahead_s", "must be between 0 and 60")
        if self.shutdown_grace_s < 0:
            raise ValidationError("shutdown_grace_s", "must not be negative")
        if not 1 <= self.capacity <= 10_000:
            raise ValidationError("capacity", "must be between 1 and 10000")
        if not 1 <= self.prefetch <= 100_000:
            raise ValidationError("prefetch", "must be between 1 and 100000")
        if not 1 <= self.lock_wait_timeout_s <= 60:
            raise ValidationError("lock_wait_timeout_s", "must be between 1 and 60")
        if not 1 <= self.result_batch <= 10_000:
            raise ValidationError("result_batch", "must be between 1 and 10000")
        if not 1024 <= self.output_limit_bytes <= 16 * 1024 * 1024:
            raise ValidationError("output_limit_bytes", "must be between 1024 and 16777216")
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
        where = f"{url.hostname or ''}:{url.port or 3306}{url.path}"
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

    Environment: ``QUARTZLITE_API_HOST``, ``QUARTZLITE_API_PORT``, ``QUARTZLITE_API_THREADS``.
    """

    #: Address to listen on. Default 127.0.0.1. Any address other than a loopback one
    #: is refused while no API token exists (``quartzlite token create``).
    host: str = "127.0.0.1"
    #: TCP port. Default 8080 (0 = any free port).
    port: int = 8080
    #: Worker threads of the WSGI server (waitress). Default 8.
    threads: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValidationError("api_host", "must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValidationError("api_port", "must be between 0 and 65535")
        if not 1 <= self.threads <= 256:
            raise ValidationError("api_threads", "must be between 1 and 256")

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
