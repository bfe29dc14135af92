"""Connections, error classification and the one retry loop.

Every transaction quartzlite runs goes through :meth:`Database.transaction`, which
rolls back the *whole* transaction on a lock-wait timeout (MySQL only rolls back the
statement), and retries lock-wait timeouts, deadlocks and lost connections with
capped exponential backoff. A lost connection during COMMIT leaves the outcome
unknown; the callables passed in are written to be idempotent (check-then-write,
fenced by state and fire id), so running them again is safe, and they can see that a
retry follows an unknown outcome through ``Tx.after_unknown``.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import pymysql
import pymysql.connections
from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import Connection, make_url

from quartzlite.config import DatabaseHost, database_hosts
from quartzlite.errors import StoreError, TransientStoreError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Lock wait timeout: the server rolled back only the statement; we roll back all.
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
#: Galera: the member is not in the primary component, or not ready for clients
#: ("WSREP has not yet prepared node for application use").
ER_UNKNOWN_COM_ERROR = 1047
#: KILL of a thread that is gone already.
ER_NO_SUCH_THREAD = 1094
#: Errors that may succeed when the transaction is run again.
RETRYABLE_CODES = frozenset(
    {
        ER_LOCK_WAIT_TIMEOUT,
        ER_LOCK_DEADLOCK,
        1040,  # too many connections
        ER_UNKNOWN_COM_ERROR,  # Galera: this member left the primary component
        1053,  # server shutdown in progress
        1927,  # MariaDB: connection killed
        2003,  # can't connect
        2006,  # server has gone away
        2013,  # lost connection during query
        2014,  # commands out of sync (broken connection state)
        2055,  # lost connection (SSL/system error)
        1317,  # query interrupted
        4031,  # MySQL 8: disconnected by the server because of inactivity
    }
)
#: Errors after which the connection is dead: a COMMIT that hit one of these has
#: an unknown outcome.
CONNECTION_CODES = frozenset(
    {ER_UNKNOWN_COM_ERROR, 1053, 1927, 2003, 2006, 2013, 2014, 2055, 4031}
)


#: MariaDB's "Got error during COMMIT"-family code; from a Galera member that has just
#: left the primary component its text names that, and it means what 1047 means.
ER_ERROR_DURING_COMMIT = 1180


def error_code(error: BaseException) -> int | None:
    """The MySQL error number behind a SQLAlchemy or PyMySQL exception, if any. A
    Galera member cut off from the primary component fails the statements in flight
    with 1180 ("... Not connected to Primary Component"), then every later one with
    1047: both are given as 1047 (retried elsewhere; unknown outcome at COMMIT)."""
    orig = error.orig if isinstance(error, exc.DBAPIError) else error
    if isinstance(orig, pymysql.err.MySQLError) and orig.args and isinstance(orig.args[0], int):
        if orig.args[0] == ER_ERROR_DURING_COMMIT and "Primary Component" in str(orig.args[-1]):
            return ER_UNKNOWN_COM_ERROR
        return orig.args[0]
    if isinstance(orig, (ConnectionError, TimeoutError, OSError)):
        return 2013
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return 2006
    return None


class _Connection(pymysql.connections.Connection):
    """PyMySQL's connection, whose TLS context for a URL that sets no TLS options (its
    PREFERRED mode: TLS if the server offers it, nothing verified) is built once per
    process instead of once per connection. Building it loads the system's CA store:
    ~10-60 ms of CPU for every new connection (a node reconnecting after an outage paid
    it for each), and a thread still inside that load when the process exited crashed it
    (SIGSEGV in OpenSSL's exit-time cleanup, seen in the fault suite). A URL that sets
    TLS options (ssl_ca, ssl_verify_cert, ...) gets PyMySQL's own context, as before."""

    _preferred: ClassVar[ssl.SSLContext | None] = None
    _preferred_lock: ClassVar[threading.Lock] = threading.Lock()

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if sslp:
            return super()._create_ssl_ctx(sslp)  # type: ignore[misc]
        with _Connection._preferred_lock:
            if _Connection._preferred is None:
                _Connection._preferred = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            return _Connection._preferred


#: Galera member states in which a member serves clients with every commit applied.
READY_STATES = frozenset({"Synced"})
#: A causal read on Galera: a statement waits until the member has applied every
#: commit the cluster had made when it began (READ and SELECT ... FOR UPDATE).
GALERA_SYNC_WAIT = 1


def check_member(conn: pymysql.connections.Connection) -> tuple[str | None, bool]:
    """(None when the server may serve quartzlite, else why not; whether it is a Galera
    member). A Galera member must be ready, Synced and in the primary component; its
    sessions then read causally (``wsrep_sync_wait``), so that every read that decides
    anything sees every commit made on any member before it."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
        row = cur.fetchone()
        if row is None or str(row[1]).upper() != "ON":
            return None, False  # not a Galera member
        cur.execute(
            "SHOW GLOBAL STATUS WHERE Variable_name IN "
            "('wsrep_ready', 'wsrep_local_state_comment', 'wsrep_cluster_status')"
        )
        status = {str(k): str(v) for k, v in cur.fetchall()}
        if status.get("wsrep_ready", "").upper() != "ON":
            return "its wsrep_ready is not ON", True
        if status.get("wsrep_cluster_status") != "Primary":
            return f"it is outside the primary component ({status.get('wsrep_cluster_status')})", True
        if status.get("wsrep_local_state_comment") not in READY_STATES:
            return f"it is {status.get('wsrep_local_state_comment')}, not Synced", True
        cur.execute(f"SET SESSION wsrep_sync_wait = {GALERA_SYNC_WAIT}")
    return None, True


@dataclass(slots=True)
class Tx:
    """What a transaction callable gets: the connection, and whether an earlier
    attempt of this same transaction may have committed."""

    conn: Connection
    after_unknown: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How :meth:`Database.transaction` retries. ``deadline_s`` None = until it works
    or ``should_stop`` says so."""

    deadline_s: float | None = 10.0
    first_backoff_s: float = 0.05
    max_backoff_s: float = 1.0


class Database:
    """An engine plus the retry loop; the only way quartzlite code reaches MySQL."""

    def __init__(
        self,
        url: str,
        *,
        lock_wait_timeout_s: int = 3,
        io_timeout_s: float = 10.0,
        pool_size: int = 5,
        idle_timeout_s: int | None = None,
        on_error: Callable[[int | None], None] | None = None,
    ) -> None:
        self.url = url
        self.on_error = on_error
        single, self.hosts = database_hosts(url)
        #: The host list's member the newest connection went to (``quartzlite cluster``).
        self.member: DatabaseHost | None = None
        #: Whether that member is a Galera member: its row locks hold on that member only,
        #: so lock takers also write the lock row (certification then orders them).
        self.galera = False
        parsed = make_url(single)
        if not parsed.drivername.startswith("mysql"):
            raise StoreError(f"database URL must be a mysql+pymysql:// URL, got {parsed.drivername}")
        connect_args: dict[str, Any] = {
            "charset": "utf8mb4",
            "connect_timeout": max(1, int(io_timeout_s)),
            "read_timeout": max(1, int(io_timeout_s)),
            "write_timeout": max(1, int(io_timeout_s)),
            # ``wait_timeout``: the server closes a connection silent for that long,
            # rolling back its transaction. A node frozen (or cut off) inside a locked
            # transaction thus releases its locks instead of holding them for hours.
            "init_command": (
                "SET time_zone='+00:00', "
                f"innodb_lock_wait_timeout={int(lock_wait_timeout_s)}"
                + (f", wait_timeout={int(idle_timeout_s)}" if idle_timeout_s else "")
            ),
        }
        self._connect_args = connect_args
        # Two pools: transactions (READ COMMITTED; every use ends in an explicit COMMIT
        # or ROLLBACK, so the pool need not reset connections on return), and
        # autocommit reads and the heartbeat (no BEGIN/COMMIT/ROLLBACK at all). Every
        # statement quartzlite sends is one it means to send.
        common: dict[str, Any] = {
            "pool_pre_ping": True,  # COM_PING, not a statement
            "pool_size": pool_size,
            "max_overflow": pool_size,
            "pool_recycle": 3600,
            # Reuse the most recent connection: the others may idle out (wait_timeout)
            # and are reconnected only when load needs them again.
            "pool_use_lifo": True,
            "pool_reset_on_return": None,
            "connect_args": connect_args,
        }
        target = parsed.set(drivername="mysql+pymysql")
        self.engine: Engine = create_engine(target, isolation_level="READ COMMITTED", **common)
        self.auto: Engine = create_engine(target, isolation_level="AUTOCOMMIT", **common)
        # SQLAlchemy ends every use of a connection with the driver's rollback(), and
        # PyMySQL sends a real ROLLBACK even in autocommit mode: a wasted statement per
        # read. Autocommit connections never hold a transaction, so there is nothing to
        # roll back (this engine's dialect instance only).
        setattr(self.auto.dialect, "do_rollback", _no_rollback)  # noqa: B010
        #: Every driver connection these pools opened, with when (monotonic): to end
        #: them on the server.
        self._raw: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        for engine in (self.engine, self.auto):
            event.listen(engine, "do_connect", self._connect)
            event.listen(engine, "connect", self._opened)
            event.listen(engine, "handle_error", _member_lost)

    def _connect(self, dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        """A connection to the first server of the host list that answers and may serve
        (:func:`check_member`); a Galera member that left the primary component or is not
        Synced is passed over. None of them: error 2003, retried like any outage."""
        reasons = []
        for host in self.hosts:
            params = {**cparams, "host": host.host, "port": host.port}
            try:
                conn = _Connection(*cargs, **params)
            except pymysql.err.MySQLError as error:
                if len(self.hosts) == 1:
                    raise
                reasons.append(f"{host}: {error.args[-1] if error.args else error}")
                continue
            try:
                why, galera = check_member(conn)
            except pymysql.err.MySQLError as error:
                why, galera = f"its state could not be read ({error.args[-1] if error.args else error})", False
            if why is None:
                self.galera = galera
                if self.member != host:
                    if self.member is not None:
                        log.warning("database connections now go to %s", host,
                                    extra={"action": "db_member", "member": str(host)})
                    self.member = host
                return conn
            conn.close()
            reasons.append(f"{host}: {why}")
        raise pymysql.err.OperationalError(2003, "no database server may serve: " + "; ".join(reasons))

    def members(self) -> Iterator[tuple[DatabaseHost, pymysql.connections.Connection | None]]:
        """A short-lived driver connection to each server of the host list in turn (None
        for one that does not answer), closed when the caller moves on."""
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
        for host in self.hosts:
            params = {**cparams, **self._connect_args, "host": host.host, "port": host.port,
                      "connect_timeout": 2, "read_timeout": 2}
            try:
                conn = _Connection(*cargs, **params)
            except pymysql.err.MySQLError:
                yield host, None
                continue
            try:
                yield host, conn
            finally:
                conn.close()

    def _opened(self, dbapi_connection: Any, record: Any) -> None:
        self._raw[dbapi_connection] = time.monotonic()

    def server_threads(self) -> list[tuple[int, float, str]]:
        """(server thread id, monotonic instant it was opened, the server's host:port) of
        this database's connections still open on our side (idle or in use: a statement
        may be stuck on a dead link)."""
        found = []
        for raw, opened in list(self._raw.items()):
            if getattr(raw, "open", False):
                try:
                    found.append((int(raw.thread_id()), opened, server_of(raw)))
                except (TypeError, ValueError, IndexError):
                    pass
        return found

    def end_threads(self, threads: Iterable[tuple[int, float, str]]) -> int:
        """``KILL CONNECTION`` each of these server threads (from :meth:`server_threads`
        of another Database: our own, and any account may end its own threads) from a
        connection of this one; those gone already are skipped. Returns how many were
        ended. Their open transactions roll back and their locks go at once, instead of
        when the server times them out.

        Only connections to the server this one reaches, opened while it was up: a thread id from
        before a restart may belong to someone else's connection by now (ids start over),
        and this must never end a peer's or an operator's session."""
        ended = 0
        with self.connect() as conn:
            here = server_of(conn.connection.dbapi_connection)
            uptime = float(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Uptime'").one()[1])
            # The server started no later than this (Uptime counts whole seconds, and we
            # read it a round trip ago); a margin for the clocks' steps.
            up_since = time.monotonic() - uptime + 1.5
            for thread_id, opened, server in threads:
                # Thread ids are per server: one of another member of the host list is
                # some other connection here.
                if opened < up_since or server != here:
                    continue
                try:
                    conn.exec_driver_sql(f"KILL CONNECTION {int(thread_id)}")
                    ended += 1
                except exc.DBAPIError as error:
                    if error_code(error) != ER_NO_SUCH_THREAD:
                        raise self._map(error) from error
        return ended

    def dispose(self) -> None:
        self.engine.dispose()
        self.auto.dispose()

    def checked_out(self) -> int:
        """Connections currently lent out by both pools (0 when nobody holds one)."""
        return sum(e.pool.checkedout() for e in (self.engine, self.auto))  # type: ignore[attr-defined]

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """An autocommit connection for reads, errors mapped (no retry)."""
        try:
            with self.auto.connect() as conn:
                yield conn
        except exc.DBAPIError as error:
            raise self._map(error) from error

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A connection whose reads all see one moment: a read-only REPEATABLE READ
        transaction with a consistent snapshot, rolled back at the end. The pools read
        at READ COMMITTED or in autocommit, where two reads may straddle a commit (a job
        read as executing beside its last run read as already ended)."""
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                try:
                    yield conn
                finally:
                    conn.rollback()
        except exc.DBAPIError as error:
            raise self._map(error) from error

    def read(
        self, fn: Callable[[Connection], T], *, retry: RetryPolicy | None = None,
        stop: threading.Event | None = None, name: str = "read",
    ) -> T:
        """Run ``fn`` on an autocommit connection (reads, single-statement writes)
        with the retry loop of :meth:`transaction`."""
        return self._run(lambda tx: fn(tx.conn), self.auto, False, retry, stop, name)

    def transaction(
        self,
        fn: Callable[[Tx], T],
        *,
        retry: RetryPolicy | None = None,
        stop: threading.Event | None = None,
        name: str = "tx",
    ) -> T:
        """Run ``fn`` in one transaction and commit; retry transient failures.

        Raises :class:`TransientStoreError` when the deadline passes (or ``stop``
        is set) while the database keeps failing.
        """
        return self._run(fn, self.engine, True, retry, stop, name)

    def _run(
        self,
        fn: Callable[[Tx], T],
        engine: Engine,
        commit: bool,
        retry: RetryPolicy | None,
        stop: threading.Event | None,
        name: str,
    ) -> T:
        policy = retry or RetryPolicy()
        started = time.monotonic()
        backoff = policy.first_backoff_s
        after_unknown = False
        attempt = 0
        while True:
            attempt += 1
            committing = False
            if stop is not None and stop.is_set() and attempt > 1:
                raise TransientStoreError(f"{name} stopped after {attempt - 1} attempt(s)")
            try:
                with engine.connect() as conn:
                    try:
                        result = fn(Tx(conn=conn, after_unknown=after_unknown))
                        if commit:
                            if stop is not None and stop.is_set():
                                # Told to stop (a fence) while it ran: never commit.
                                raise TransientStoreError(f"{name} stopped before its commit")
                            committing = True
                            conn.commit()
                        return result
                    except BaseException:
                        if commit and not committing:
                            _quiet_rollback(conn)
                        raise
            except exc.DBAPIError as error:
                code = error_code(error)
                if self.on_error is not None:
                    self.on_error(code)
                if code not in RETRYABLE_CODES:
                    raise self._map(error) from error
                if committing and code in CONNECTION_CODES:
                    after_unknown = True
                elapsed = time.monotonic() - started
                out_of_time = policy.deadline_s is not None and elapsed >= policy.deadline_s
                if out_of_time or (stop is not None and stop.is_set()):
                    raise TransientStoreError(
                        f"database unavailable ({name}: error {code}, {attempt} attempts)",
                        details={"mysql_error": code},
                    ) from error
                log.info(
                    "retrying %s after MySQL error %s (attempt %d)",
                    name,
                    code,
                    attempt,
                    extra={"action": "db_retry", "mysql_error": code},
                )
                sleep = min(backoff, policy.max_backoff_s) * (0.5 + random.random() / 2)  # noqa: S311
                if policy.deadline_s is not None:
                    sleep = min(sleep, max(0.0, policy.deadline_s - elapsed))
                # An Event's wait, never time.sleep: the same pause either way, and it
                # also works under libfaketime, whose clock_nanosleep fails (EINVAL)
                # when only the wall clock is faked.
                (stop or threading.Event()).wait(sleep)
                backoff *= 2

    def _map(self, error: exc.DBAPIError) -> StoreError:
        code = error_code(error)
        if code in RETRYABLE_CODES:
            return TransientStoreError(
                f"database unavailable (MySQL error {code})", details={"mysql_error": code}
            )
        text = str(error.orig) if error.orig is not None else str(error)
        return StoreError(f"database error: {text}", details={"mysql_error": code})


def server_of(raw: Any) -> str:
    """host:port of a driver connection (PyMySQL keeps what it connected to)."""
    return f"{getattr(raw, 'host', '?')}:{getattr(raw, 'port', '?')}"


def _member_lost(context: Any) -> None:
    """A Galera member that left the primary component answers every statement with
    1047: treat it as a lost connection, so the pool's connections to it are dropped
    and the next one goes to a member that may serve."""
    if error_code(context.original_exception) == ER_UNKNOWN_COM_ERROR:
        context.is_disconnect = True


def _no_rollback(dbapi_connection: Any) -> None:
    """Nothing to roll back on an autocommit connection."""


def _quiet_rollback(conn: Connection) -> None:
    try:
        conn.rollback()
    except exc.DBAPIError:
        conn.invalidate()
