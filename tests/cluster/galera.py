"""A private three-member MariaDB Galera Cluster on loopback, for tests and measurements
that kill, restart or partition members without touching the shared server.

Each member is its own ``mariadbd`` (run as ``mysql`` when root) with its own datadir,
client port, socket, Galera port (``gmcast.listen_addr``), IST port (``ist.recv_addr``)
and SST port (rsync SST: the joiner's rsync daemon). Member 0 bootstraps the cluster
(``--wsrep-new-cluster``); the others join it by a full state transfer (SST). A member
killed with -9 rejoins by IST when the donor's gcache still holds what it missed.

Everything is sized for a small machine (2 cores): 64M buffer pools, one applier thread,
no performance schema, a 64M gcache. ``close()`` kills every member and removes its
directory, whatever state the cluster is in.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from tests.cluster.mariadb import INSTALL_DB, MARIADBD, free_port

GALERA_PROVIDER = "/usr/lib/galera/libgalera_smm.so"
CLUSTER_NAME = "ql_galera"
#: ER_UNKNOWN_COM_ERROR: "WSREP has not yet prepared node for application use", the
#: answer of a member outside the Primary Component.
ER_WSREP_NOT_READY = 1047


def _deadline_loop(predicate: Callable[[], Any], timeout: float, message: str,
                   interval: float = 0.2, failed: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if failed is not None:
            why = failed()
            if why:
                raise RuntimeError(f"{message}: {why}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        # Each free when picked; kept distinct (the OS may hand one out twice).
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class Member:
    index: int
    dir: Path
    port: int
    galera_port: int
    ist_port: int
    sst_port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"m{self.index}"

    @property
    def datadir(self) -> Path:
        return self.dir / "data"

    @property
    def socket(self) -> Path:
        return self.dir / "mysqld.sock"

    @property
    def log_path(self) -> Path:
        return self.dir / "mysqld.log"

    @property
    def cnf(self) -> Path:
        return self.dir / "my.cnf"

    @property
    def galera_address(self) -> str:
        return f"127.0.0.1:{self.galera_port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class GaleraCluster:
    """``GaleraCluster(size=3, provider_options="")``: started by the constructor (or
    ``with``); ``url(i)``, ``kill9(i)``, ``start(i)``, ``isolate(i)``/``heal(i)``,
    ``status(i)``, ``wait_synced()``, ``close()``.

    ``provider_options`` are extra ``wsrep_provider_options`` (``key=value;...``), e.g.
    ``"evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S"``."""

    def __init__(self, size: int = 3, provider_options: str = "", *,
                 innodb_buffer_pool: str = "64M", start_timeout: float = 180.0) -> None:
        if not (os.path.exists(MARIADBD) and os.path.exists(INSTALL_DB)):
            raise RuntimeError(f"a Galera cluster needs {MARIADBD} and {INSTALL_DB}")
        if not os.path.exists(GALERA_PROVIDER):
            raise RuntimeError(f"a Galera cluster needs {GALERA_PROVIDER} (package galera-4)")
        if shutil.which("rsync") is None:
            raise RuntimeError("rsync SST needs the rsync binary (`make test-galera` installs it)")
        self.size = size
        self.provider_options = provider_options.strip().strip(";")
        self.user = "mysql" if os.geteuid() == 0 else None
        self._buffer_pool = innodb_buffer_pool
        self.dir = Path(tempfile.mkdtemp(prefix="ql-galera-"))
        self.members: list[Member] = []
        self._closed = False
        try:
            ports = _free_ports(4 * size)
            for i in range(size):
                member_dir = self.dir / f"m{i}"
                member_dir.mkdir()
                port, galera_port, ist_port, sst_port = ports[4 * i: 4 * i + 4]
                self.members.append(Member(i, member_dir, port, galera_port, ist_port, sst_port))
            for member in self.members:
                self._write_cnf(member)
            self._install()
            self._bootstrap(start_timeout)
        except BaseException:
            self.close()
            raise

    # -- setup -------------------------------------------------------------------------

    def _write_cnf(self, member: Member) -> None:
        gcomm = ",".join(m.galera_address for m in self.members)
        options = [
            f"gmcast.listen_addr=tcp://127.0.0.1:{member.galera_port}",
            f"ist.recv_addr=127.0.0.1:{member.ist_port}",
            "gcache.size=64M",
        ]
        if self.provider_options:
            options.append(self.provider_options)
        lines = [
            "[mysqld]",
            f"datadir={member.datadir}",
            f"port={member.port}",
            "bind-address=127.0.0.1",
            f"socket={member.socket}",
            f"pid-file={member.dir / 'mysqld.pid'}",
            f"log-error={member.log_path}",
            f"innodb_buffer_pool_size={self._buffer_pool}",
            "innodb_log_file_size=48M",
            "innodb_flush_log_at_trx_commit=1",
            "skip-name-resolve",
            "max_connections=500",
            "performance_schema=OFF",
            "binlog_format=ROW",
            "default_storage_engine=InnoDB",
            "innodb_autoinc_lock_mode=2",
            "wsrep_on=ON",
            f"wsrep_provider={GALERA_PROVIDER}",
            f"wsrep_cluster_name={CLUSTER_NAME}",
            f"wsrep_cluster_address=gcomm://{gcomm}",
            f"wsrep_node_address={member.galera_address}",
            f"wsrep_node_incoming_address=127.0.0.1:{member.port}",
            f"wsrep_node_name={member.name}",
            "wsrep_sst_method=rsync",
            f"wsrep_sst_receive_address=127.0.0.1:{member.sst_port}",
            "wsrep_slave_threads=1",
            f'wsrep_provider_options="{";".join(options)}"',
        ]
        if self.user:
            lines.append(f"user={self.user}")
        member.cnf.write_text("\n".join(lines) + "\n")

    def _install(self) -> None:
        """One ``mariadb-install-db`` (member 0's datadir), copied to the others: they are
        replaced by SST anyway, but mariadbd wants system tables to start at all."""
        first = self.members[0]
        if self.user:
            for path in [self.dir, *(m.dir for m in self.members)]:
                shutil.chown(path, self.user, self.user)
        args = [INSTALL_DB, f"--datadir={first.datadir}",
                "--auth-root-authentication-method=normal", "--skip-test-db",
                "--skip-name-resolve"]
        if self.user:
            args.append(f"--user={self.user}")
        done = subprocess.run(args, capture_output=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {done.stdout!r} {done.stderr!r}")
        for member in self.members[1:]:
            shutil.copytree(first.datadir, member.datadir, symlinks=True)
            if self.user:
                for path in [member.datadir, *member.datadir.rglob("*")]:
                    shutil.chown(path, self.user, self.user)

    def _bootstrap(self, timeout: float) -> None:
        self._launch(0, bootstrap=True)
        self._wait_answers(0, timeout)
        self._wait_member(0, timeout, size=1)
        for i in range(1, self.size):
            # One joiner at a time: two SSTs at once from one donor on 2 cores is slow.
            self._launch(i)
            self._wait_answers(i, timeout)
            self._wait_member(i, timeout, size=i + 1)
        self.wait_synced(timeout)

    # -- processes ---------------------------------------------------------------------

    def _launch(self, i: int, *, bootstrap: bool = False, position: str | None = None) -> None:
        member = self.members[i]
        args = [MARIADBD, f"--defaults-file={member.cnf}"]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        if position:
            args.append(f"--wsrep-start-position={position}")
        member.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)

    def _exited(self, i: int) -> str:
        member = self.members[i]
        if member.proc is not None and member.proc.poll() is not None:
            return f"{member.name} exited ({member.proc.returncode}): {member.log()[-3000:]}"
        return ""

    def _wait_answers(self, i: int, timeout: float) -> None:
        def answers() -> bool:
            try:
                self.connect(i, connect_timeout=1).close()
                return True
            except pymysql.err.OperationalError:
                return False

        _deadline_loop(answers, timeout, f"{self.members[i].name} to answer",
                       failed=lambda: self._exited(i))

    def _wait_member(self, i: int, timeout: float, size: int | None = None) -> None:
        """Wait until member ``i`` is Synced, ready and Primary (in a cluster of ``size``
        members when given)."""
        def synced() -> bool:
            try:
                s = self.status(i)
            except pymysql.err.MySQLError:
                return False
            return (s.get("wsrep_local_state_comment") == "Synced"
                    and s.get("wsrep_ready") == "ON"
                    and s.get("wsrep_cluster_status") == "Primary"
                    and (size is None or s.get("wsrep_cluster_size") == str(size)))

        _deadline_loop(synced, timeout, f"{self.members[i].name} to be Synced (size {size})",
                       failed=lambda: self._exited(i))

    # -- clients -----------------------------------------------------------------------

    def url(self, i: int, database: str = "") -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.members[i].port}/{database}"

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in range(self.size)]

    def port(self, i: int) -> int:
        return self.members[i].port

    def connect(self, i: int, database: str | None = None, *, connect_timeout: float = 5,
                read_timeout: float | None = 30, autocommit: bool = True,
                **kwargs: Any) -> pymysql.connections.Connection[Any]:
        """A plain pymysql connection to member ``i`` over TCP."""
        return pymysql.connect(host="127.0.0.1", port=self.members[i].port, user="root",
                               database=database, connect_timeout=connect_timeout,
                               read_timeout=read_timeout, write_timeout=read_timeout,
                               autocommit=autocommit, **kwargs)

    def status(self, i: int) -> dict[str, str]:
        """Member ``i``'s ``SHOW GLOBAL STATUS LIKE 'wsrep%'`` (it answers even outside the
        Primary Component)."""
        conn = self.connect(i, connect_timeout=2, read_timeout=5)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep%'")
                return {str(k): str(v) for k, v in cur.fetchall()}
        finally:
            conn.close()

    def _set_provider_option(self, i: int, option: str) -> None:
        conn = self.connect(i, connect_timeout=2, read_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute("SET GLOBAL wsrep_provider_options = %s", (option,))
        finally:
            conn.close()

    # -- faults ------------------------------------------------------------------------

    def kill9(self, i: int) -> None:
        """Crash member ``i``: SIGKILL, no shutdown, its Galera and client connections cut."""
        member = self.members[i]
        if member.proc is not None and member.proc.poll() is None:
            member.proc.send_signal(signal.SIGKILL)
            member.proc.wait(30)

    def recover_position(self, i: int, timeout: float = 120.0) -> str | None:
        """``mariadbd --wsrep-recover`` on stopped member ``i``: its last committed
        position (``uuid:seqno``) from InnoDB, as the init scripts' galera_recovery does.
        After kill -9 its grastate.dat says ``seqno: -1``; started without the position
        it would ask for a full SST instead of IST."""
        member = self.members[i]
        log = member.dir / "recover.log"
        log.unlink(missing_ok=True)
        subprocess.run([MARIADBD, f"--defaults-file={member.cnf}", "--wsrep-recover",
                        f"--log-error={log}"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, check=False)
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return None
        found = re.findall(r"WSREP: Recovered position: ([0-9a-f-]{36}:-?\d+)", text)
        if not found or found[-1].endswith(":-1"):
            return None
        return str(found[-1])

    def running(self) -> list[int]:
        return [m.index for m in self.members if m.running()]

    def start(self, i: int, timeout: float = 180.0) -> str:
        """(Re)start member ``i`` and wait until it is Synced in a cluster of every running
        member. With another member running it rejoins (IST when the donor's gcache holds
        what it missed, else SST); when the whole cluster is down it bootstraps a new one
        from its own data (``safe_to_bootstrap: 1``, ``--wsrep-new-cluster``): start the
        member with the most recent data first.

        Returns how it got the cluster's state: "IST", "SST", "bootstrap" or "none"."""
        member = self.members[i]
        if member.running():
            return "none"
        others = [j for j in self.running() if j != i]
        bootstrap = not others
        if bootstrap:
            grastate = member.datadir / "grastate.dat"
            if grastate.exists():
                text = re.sub(r"^safe_to_bootstrap:\s*\d+", "safe_to_bootstrap: 1",
                              grastate.read_text(), flags=re.MULTILINE)
                grastate.write_text(text)
        position = self.recover_position(i)
        logged = len(member.log())
        self._launch(i, bootstrap=bootstrap, position=position)
        self._wait_answers(i, timeout)
        self._wait_member(i, timeout, size=len(others) + 1)
        for j in others:
            self._wait_member(j, timeout, size=len(others) + 1)
        if bootstrap:
            return "bootstrap"
        return transfer_kind(member.log()[logged:])

    def isolate(self, i: int, timeout: float = 60.0) -> None:
        """Cut member ``i`` off the others (``gmcast.isolate=1``: it drops its Galera
        connections and refuses new ones) while clients still reach it; wait until it is
        out of the Primary Component (it then answers queries with error 1047)."""
        self._set_provider_option(i, "gmcast.isolate=1")

        def non_primary() -> bool:
            try:
                s = self.status(i)
            except pymysql.err.MySQLError:
                return False
            return s.get("wsrep_cluster_status") != "Primary" and s.get("wsrep_ready") == "OFF"

        _deadline_loop(non_primary, timeout, f"{self.members[i].name} to leave the Primary",
                       failed=lambda: self._exited(i))

    def heal(self, i: int, timeout: float = 120.0) -> None:
        """Undo ``isolate(i)`` and wait until every running member is Synced together."""
        self._set_provider_option(i, "gmcast.isolate=0")
        self.wait_synced(timeout)

    def wait_synced(self, timeout: float = 120.0) -> None:
        """Wait until every running member is Synced, ready and Primary, all in one
        cluster of that many members."""
        running = self.running()
        deadline = time.monotonic() + timeout
        for i in running:
            self._wait_member(i, max(0.1, deadline - time.monotonic()), size=len(running))

    # -- teardown ----------------------------------------------------------------------

    def logs(self) -> str:
        return "\n".join(f"===== {m.name} =====\n{m.log()[-4000:]}" for m in self.members)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for member in self.members:
            try:
                self.kill9(member.index)
            except (OSError, subprocess.TimeoutExpired):
                pass
        # rsync daemons of an SST in flight run in the member's session: end them too.
        for member in self.members:
            if member.proc is not None:
                try:
                    os.killpg(member.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if os.environ.get("QUARTZLITE_GALERA_KEEP"):
            print(f"kept {self.dir}")
            return
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> GaleraCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a last resort: never leave mariadbd processes behind
        if not getattr(self, "_closed", True):
            self.close()


def transfer_kind(log: str) -> str:
    """How a joining member got the cluster's state, from its error log since it started:
    "SST" (a full copy), "IST" (the writesets it missed, from a donor's gcache) or
    "none"."""
    if "rsync SST completed on joiner" in log:
        return "SST"  # possibly followed by an IST of what was committed meanwhile
    if "Receiving IST" in log or "IST received" in log:
        return "IST"
    if "Installed new state from SST" in log:
        return "SST"
    return "none"


def wsrep_error(error: BaseException) -> int | None:
    """The MySQL error code of a pymysql error, else None."""
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def rows(conn: pymysql.connections.Connection[Any], sql: str,
         params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


class WriteProbe:
    """A thread committing small INSERTs on member ``i`` one after another (autocommit
    off, INSERT then COMMIT), with each commit's completion time: the gaps between them
    show how long writes on that member stalled, e.g. while the cluster waits for a
    killed member to be declared gone. Errors are recorded and the probe reconnects."""

    DATABASE = "ql_probe"

    def __init__(self, cluster: GaleraCluster, i: int, *, pause_s: float = 0.01,
                 statement_timeout_s: float = 60.0) -> None:
        import threading

        self.cluster = cluster
        self.member = i
        self.pause_s = pause_s
        self.statement_timeout_s = statement_timeout_s
        self.commits: list[float] = []
        self.errors: list[tuple[float, int | None, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"probe-m{i}", daemon=True)
        conn = cluster.connect(i)
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {self.DATABASE}")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.DATABASE}.writes ("
                            "id BIGINT AUTO_INCREMENT PRIMARY KEY, member INT NOT NULL, "
                            "at DOUBLE NOT NULL)")
        finally:
            conn.close()

    def _run(self) -> None:
        conn: pymysql.connections.Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self.cluster.connect(self.member, self.DATABASE, autocommit=False,
                                                read_timeout=self.statement_timeout_s)
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO writes (member, at) VALUES (%s, %s)",
                                (self.member, time.time()))
                conn.commit()
                self.commits.append(time.monotonic())
            except pymysql.err.MySQLError as error:
                self.errors.append((time.monotonic(), wsrep_error(error), str(error)))
                if conn is not None:
                    try:
                        conn.close()
                    except pymysql.err.Error:
                        pass
                conn = None
            self._stop.wait(self.pause_s)
        if conn is not None:
            try:
                conn.close()
            except pymysql.err.Error:
                pass

    def start(self) -> WriteProbe:
        self._thread.start()
        return self

    def stop(self) -> WriteProbe:
        self._stop.set()
        self._thread.join(self.statement_timeout_s + 10)
        return self

    def commits_after(self, instant: float) -> int:
        return sum(1 for t in self.commits if t > instant)

    def longest_gap(self, after: float | None = None) -> float:
        """The longest time between two consecutive commits (only gaps still open at or
        opened after ``after``, when given)."""
        gaps = [b - a for a, b in zip(self.commits, self.commits[1:], strict=False)
                if after is None or b >= after]
        return max(gaps, default=0.0)
