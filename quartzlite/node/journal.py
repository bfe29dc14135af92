"""The outcome journal: a small local file where a node writes each run's outcome the
moment it is known, before the results transaction records it in the database.

Outcomes are facts. A node that fences (it lost the database) or is killed before its
results transaction commits would otherwise lose them, and a peer would later find
those runs still ``running``, mark them ``abandoned`` and run their slots again,
although they had finished. With the journal, the next node to start on this machine
for the same database (the same node restarted by its supervisor, a ``--rejoin``, or
any other) records them first, before it registers its session; so does a fenced node
while it waits for the database. Recording an outcome is idempotent and safe from any
process: the run row changes only while it is still ``running`` and the job only while
it is still executing that fire (see ``NodeStore.complete``).

One file per session, ``<session id>.jsonl`` in ``state_dir``, held under an exclusive
``flock`` while its node lives: a file nobody holds belongs to a node that is gone.
Lines are ``{"outcome": {...}}`` (one per run, one ``write`` each, so a crash tears at
most the last line) and ``{"recorded": [run ids]}``. When everything written is also
recorded the file is emptied, and it is deleted when its node stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from quartzlite.enums import RunStatus
from quartzlite.models import Finished, Outcome

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class JournaledOutcome:
    """An outcome read back from a journal: enough to record it (the job's spec is
    read from the database when it is recorded)."""

    session_id: str
    run_id: int
    job_id: int
    name: str
    fire_id: str
    planned_at: datetime
    slot_at: datetime
    attempt: int
    fired_at: datetime
    outcome: Outcome
    ended_at: datetime
    started_at: datetime | None


def _entry(session_id: str, item: Finished) -> dict[str, Any]:
    p = item.fired.prepared
    o = item.outcome
    return {
        "session_id": session_id, "run_id": item.fired.run_id, "job_id": p.job_id,
        "name": p.name, "fire_id": p.fire_id, "planned_at": p.planned_at.isoformat(),
        "slot_at": p.slot_at.isoformat(), "attempt": p.attempt,
        "fired_at": item.fired.fired_at.isoformat(), "status": o.status.value,
        "exit_code": o.exit_code, "output": o.output, "error": o.error,
        "ended_at": item.ended_at.isoformat(),
        "started_at": None if item.started_at is None else item.started_at.isoformat(),
    }


def _from_entry(data: dict[str, Any]) -> JournaledOutcome:
    started = data.get("started_at")
    return JournaledOutcome(
        session_id=str(data["session_id"]), run_id=int(data["run_id"]),
        job_id=int(data["job_id"]), name=str(data["name"]), fire_id=str(data["fire_id"]),
        # "fire_at": journals written before the planned instant had one name
        planned_at=datetime.fromisoformat(data.get("planned_at") or data["fire_at"]),
        slot_at=datetime.fromisoformat(data["slot_at"]), attempt=int(data["attempt"]),
        fired_at=datetime.fromisoformat(data["fired_at"]),
        outcome=Outcome(
            status=RunStatus(data["status"]), exit_code=data.get("exit_code"),
            output=str(data.get("output") or ""), error=data.get("error"),
        ),
        ended_at=datetime.fromisoformat(data["ended_at"]),
        started_at=None if started is None else datetime.fromisoformat(started),
    )


def read_entries(path: Path) -> list[JournaledOutcome]:
    """The outcomes in a journal file that it does not also mark recorded (a torn last
    line is skipped)."""
    outcomes: dict[int, JournaledOutcome] = {}
    recorded: set[int] = set()
    with path.open("rb") as fh:
        for raw in fh:
            try:
                data = json.loads(raw)
            except ValueError:
                continue  # torn by a crash mid-write
            if "outcome" in data:
                entry = _from_entry(data["outcome"])
                outcomes[entry.run_id] = entry
            elif "recorded" in data:
                recorded.update(int(r) for r in data["recorded"])
    return [o for run_id, o in outcomes.items() if run_id not in recorded]


def _encode(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


class Journal:
    """This node's journal file (see the module docstring)."""

    def __init__(self, directory: Path, session_id: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.session_id = session_id
        self.path = directory / f"{session_id}.jsonl"
        self._lock = threading.Lock()
        # Locked under a name replays ignore, then renamed: nobody sees it unlocked.
        making = directory / f".{session_id}.new"
        self._fd: int | None = os.open(making, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(making, self.path)
        self._pending: set[int] = set()
        #: Outcome writes under way outside the lock; close() waits for them.
        self._writing = 0
        self._written = threading.Condition(self._lock)

    def _write(self, fd: int, data: dict[str, Any] | bytes) -> None:
        line = data if isinstance(data, bytes) else _encode(data)
        try:
            os.write(fd, line)
        except OSError as error:  # a full disk must not lose the outcome in memory
            log.error("could not write the outcome journal %s: %s", self.path, error,
                      extra={"action": "journal_error"})

    def outcome(self, item: Finished) -> None:
        """Journal one outcome; the caller queues it for the database only after this.
        The write is outside the lock: a worker holding it across the system call (the
        GIL let go) made every other worker that ended a run queue up behind it, a
        thread switch each. Emptying the file stays safe: it happens only with nothing
        pending, and this run is pending from before its line is written until the
        database has it, which is after this returns."""
        line = _encode({"outcome": _entry(self.session_id, item)})
        with self._lock:
            if self._fd is None:
                return
            self._pending.add(item.fired.run_id)
            fd = self._fd
            self._writing += 1
        try:
            self._write(fd, line)  # O_APPEND: concurrent lines never interleave
        finally:
            with self._lock:
                self._writing -= 1
                if not self._writing:
                    self._written.notify_all()

    def recorded(self, run_ids: list[int]) -> None:
        with self._lock:
            self._pending.difference_update(run_ids)
            if self._fd is None:
                return
            if self._pending:
                self._write(self._fd, {"recorded": run_ids})
            else:
                os.ftruncate(self._fd, 0)  # O_APPEND: the next write starts at 0

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def close(self, *, delete: bool) -> None:
        """Release the file; delete it when nothing in it is left to record."""
        with self._lock:
            while self._writing:  # never close a descriptor a write still uses
                self._written.wait()
            if self._fd is None:
                return
            if delete and not self._pending:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            os.close(self._fd)  # releases the flock
            self._fd = None


@contextlib.contextmanager
def orphaned(directory: Path) -> Iterator[list[tuple[Path, list[JournaledOutcome]]]]:
    """The journals of nodes that are gone (no process holds their lock), with their
    unrecorded outcomes, each locked while the caller records them; on a clean exit
    from the block the files are deleted."""
    held: list[tuple[Path, int, list[JournaledOutcome]]] = []
    try:
        if directory.is_dir():
            for path in sorted(directory.glob("*.jsonl")):
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)  # a live node's
                    continue
                try:
                    entries = read_entries(path)
                except OSError:
                    os.close(fd)
                    continue
                held.append((path, fd, entries))
        yield [(path, entries) for path, _fd, entries in held]
        for path, _fd, _entries in held:
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        for _path, fd, _entries in held:
            os.close(fd)


__all__ = ["Journal", "JournaledOutcome", "orphaned", "read_entries"]
