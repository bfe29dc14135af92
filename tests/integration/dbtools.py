"""Small SQL helpers for integration tests: look at rows and plant runs directly, the way
a node would have written them (the client never writes runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import create_engine, func, insert, pool, select, update
from sqlalchemy.engine import Connection

from quartzlite.storage.engine import Database
from quartzlite.storage.node import NodeStore
from quartzlite.storage.tables import jobs, locks, runs


@contextmanager
def connect(url: str) -> Iterator[Connection]:
    engine = create_engine(
        url, poolclass=pool.NullPool, connect_args={"init_command": "SET time_zone='+00:00'"}
    )
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def registered_store(url: str, session_id: str) -> Iterator[NodeStore]:
    """A node's store (node ``test:1``) with its session registered, for a fixture to
    ``yield from``; afterwards its pool has nothing checked out."""
    db = Database(url)
    store = NodeStore(db, node_name="test:1")
    store.register(session_id=session_id, host="test", pid=1, capacity=100, tags=(), version="t")
    yield store
    assert db.checked_out() == 0
    db.dispose()


def naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def job_rows(url: str) -> list[dict[str, Any]]:
    """Every row of ql_jobs, deleted ones included, by id."""
    with connect(url) as conn:
        return [dict(r) for r in conn.execute(select(jobs).order_by(jobs.c.id)).mappings()]


def job_count(url: str) -> int:
    with connect(url) as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def job_lock_version(url: str) -> int:
    """Bumped by every management write that got as far as taking the job lock."""
    with connect(url) as conn:
        return int(
            conn.execute(select(locks.c.version).where(locks.c.name == "job")).scalar_one()
        )


def set_job(url: str, name: str, **values: Any) -> None:
    """Change columns of the active job ``name`` behind the client's back."""
    with connect(url) as conn:
        result = conn.execute(update(jobs).where(jobs.c.active_name == name).values(**values))
        assert result.rowcount == 1, f"no active job {name!r}"


def add_run(
    url: str,
    *,
    job_id: int,
    job_name: str,
    planned_at: datetime,
    status: str = "succeeded",
    node: str | None = "node-a",
    attempt: int = 1,
    output: str = "",
) -> int:
    """Insert a run row as a node would have; returns its id."""
    values: dict[str, Any] = {
        "job_id": job_id,
        "job_name": job_name,
        "fire_id": f"f-{job_id}-{planned_at.timestamp()}",
        "planned_at": naive(planned_at),
        "slot_at": naive(planned_at),
        "attempt": attempt,
        "started_at": None if status == "missed" else naive(planned_at),
        "ended_at": None if status in ("missed", "running") else naive(planned_at),
        "session_id": None if node is None else f"s-{node}",
        "node": node,
        "status": status,
        "exit_code": 0 if status == "succeeded" else None,
        "output": output,
        "error": None,
    }
    with connect(url) as conn:
        return int(conn.execute(insert(runs).values(**values)).inserted_primary_key[0])
