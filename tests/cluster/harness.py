"""Real node processes for cluster tests: start them through the CLI, signal them,
read their logs, and wait on conditions in the database with deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

#: Fast settings that keep the fencing rule (fence_after + 2 beats <= timeout).
FAST = {
    "heartbeat-interval-s": "0.5",
    "fence-after-s": "2.5",
    "session-timeout-s": "4",
    "poll-interval-s": "0.5",
    "look-ahead-s": "1",
    "compensate-interval-s": "2",
    "kill-grace-s": "1",
    "shutdown-grace-s": "10",
}


def wait_until(
    predicate: Callable[[], T], *, timeout: float, interval: float = 0.1, message: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(interval)


class NodeProcess:
    """One ``quartzlite node`` process with its log in a file."""

    def __init__(self, database_url: str, name: str, options: dict[str, str] | None = None,
                 flags: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = Path(tempfile.mkstemp(prefix=f"ql-{name}-", suffix=".log")[1])
        settings = {**FAST, **(options or {})}
        args = [sys.executable, "-m", "quartzlite", "--database-url", database_url, "node"]
        for key, value in settings.items():
            args += [f"--{key}", value]
        args += list(flags)
        self._log = self.log_path.open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """Tear down: the node and anything left in its process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


@contextmanager
def nodes(database_url: str) -> Iterator[Callable[..., NodeProcess]]:
    started: list[NodeProcess] = []

    def start(name: str, **kwargs: Any) -> NodeProcess:
        node = NodeProcess(database_url, name, **kwargs)
        started.append(node)
        return node

    try:
        yield start
    finally:
        for node in started:
            node.stop()


class Db:
    """Direct reads of the test database."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(url, isolation_level="READ COMMITTED", pool_pre_ping=True)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params))

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def session_ids(self) -> list[str]:
        return [r[0] for r in self.rows("SELECT id FROM ql_sessions")]

    def live_sessions(self) -> int:
        return int(self.scalar("SELECT COUNT(*) FROM ql_sessions") or 0)

    def close(self) -> None:
        self.engine.dispose()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")
