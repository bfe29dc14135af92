"""A private MariaDB server for tests that crash or restart the database: its own
datadir, port and socket under a temporary directory, so a test may kill -9 it without
touching the shared server. It needs the ``mariadbd`` and ``mariadb-install-db`` binaries
of a local MariaDB (``make db`` installs them when missing)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pymysql

MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateMariaDB:
    """``start()``, ``kill9()``, ``stop()``, ``restart()``; ``url(database)``.

    Runs as the current user when that is not root, else as ``mysql``. Its data survive
    kill -9 and restarts (InnoDB crash recovery), like a real server's; ``close()``
    kills it and removes everything."""

    def __init__(self, *, innodb_buffer_pool: str = "64M") -> None:
        if not (os.path.exists(MARIADBD) and os.path.exists(INSTALL_DB)):
            raise RuntimeError(
                f"a private MariaDB needs {MARIADBD} and {INSTALL_DB} (run `make db`)"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="ql-mariadb-"))
        self.datadir = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.log_path = self.dir / "mysqld.log"
        self.port = free_port()
        self.user = "mysql" if os.geteuid() == 0 else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer_pool = innodb_buffer_pool
        if self.user:
            shutil.chown(self.dir, self.user, self.user)
        self._install()

    def _install(self) -> None:
        args = [INSTALL_DB, f"--datadir={self.datadir}", "--auth-root-authentication-method=normal",
                "--skip-test-db", "--skip-name-resolve"]
        if self.user:
            args.append(f"--user={self.user}")
        done = subprocess.run(args, capture_output=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {done.stdout!r} {done.stderr!r}")

    def url(self, database: str = "") -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 120.0) -> None:
        """Start the server and wait until it answers."""
        if self.running():
            return
        args = [
            MARIADBD, "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.socket}",
            f"--pid-file={self.dir / 'mysqld.pid'}", f"--log-error={self.log_path}",
            f"--innodb-buffer-pool-size={self._buffer_pool}", "--innodb-log-file-size=48M",
            "--skip-name-resolve", "--max-connections=500",
            "--innodb-flush-log-at-trx-commit=1",
        ]
        if self.user:
            args.append(f"--user={self.user}")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root",
                                connect_timeout=1).close()
                return
            except pymysql.err.OperationalError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mariadbd exited: {self.log()[-2000:]}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mariadbd did not answer: {self.log()[-2000:]}") from None
                time.sleep(0.1)

    def kill9(self) -> None:
        """Crash it: SIGKILL, no shutdown, connections cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), waiting for it to end."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.kill9()

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivateMariaDB:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def private_database(name: str = "quartzlite") -> Iterator[tuple[PrivateMariaDB, str]]:
    """A started private server with database ``name`` upgraded to head: (server, url)."""
    from quartzlite.storage import migrate

    with PrivateMariaDB() as server:
        conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root")
        try:
            conn.cursor().execute(f"CREATE DATABASE `{name}`")
        finally:
            conn.close()
        url = server.url(name)
        migrate.upgrade(url)
        yield server, url
