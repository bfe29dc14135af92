"""Start-up checks of the database's own settings: a node refuses to start (one line
naming the setting and why) where exactly-once would not hold.

Only a Galera member (``wsrep_on=ON``) has settings that can break it; a single MySQL or
MariaDB server passes. On Galera:

- ``binlog_format`` must be ``ROW``: Galera replicates row events; statement-based
  replication of a non-deterministic write would differ between members.
- every ``ql_`` table has a primary key: Galera certifies and applies rows by key, and a
  table without one may be applied differently (or very slowly) on other members.
- reads are causal: the node sets ``wsrep_sync_wait`` on each of its sessions
  (:func:`~quartzlite.storage.engine.check_member`); the check reads it back.
- the members' clocks agree within :func:`clock_tolerance_s`: expiry compares a
  session's ``heartbeat_at`` (written by one member's ``NOW()``) with another member's
  ``NOW()``, so an offset between them eats the margin the fencing rule keeps.
- the timing contract: after a member dies the survivors stall writes until Galera
  installs a new view, about ``evs.suspect_timeout`` plus :data:`VIEW_INSTALL_S`; that
  stall must end well inside ``fence_after_s``, or every node on a surviving member
  fences at once (docs/ha.md).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from quartzlite.config import DatabaseHost
from quartzlite.errors import SchemaError
from quartzlite.storage.engine import GALERA_SYNC_WAIT, Database

#: What a view change takes beyond ``evs.suspect_timeout`` after a member dies (s):
#: measured on 3 local members (scripts/galera_timing.py, docs/ha.md), rounded up.
VIEW_INSTALL_S = 1.5
#: Galera's default ``evs.suspect_timeout`` (s).
DEFAULT_SUSPECT_S = 5.0


class UnsafeDatabase(SchemaError):
    """The database's settings break a guarantee the node relies on: refuse to run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """The node's settings the checks weigh the database's against."""

    heartbeat_interval_s: float
    fence_after_s: float
    session_timeout_s: float


def clock_tolerance_s(timing: Timing) -> float:
    """Largest clock offset between members accepted: a quarter of the margin the fencing
    rule keeps between a node's fence and its expiry by a peer."""
    margin = timing.session_timeout_s - timing.fence_after_s - timing.heartbeat_interval_s
    return max(margin, 0.0) / 4


def longest_stall_s(provider_options: str) -> float:
    """How long the survivors stall writes after a member dies, by Galera's settings."""
    found = re.search(r"evs\.suspect_timeout\s*=\s*([^;]+)", provider_options)
    suspect = _iso_duration_s(found.group(1).strip()) if found else DEFAULT_SUSPECT_S
    return suspect + VIEW_INSTALL_S


def _iso_duration_s(text: str) -> float:
    """``PT5S``, ``PT1M30S``, ``PT0.5S`` (Galera's durations) in seconds."""
    found = re.fullmatch(r"P(?:(\d+)D)?T?(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", text)
    if not found:
        return DEFAULT_SUSPECT_S
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in found.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def check_database(db: Database, timing: Timing) -> None:
    """Raise :class:`UnsafeDatabase` naming the first setting that breaks exactly-once."""
    with db.connect() as conn:
        wsrep_on = conn.exec_driver_sql("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'").first()
        if wsrep_on is None or str(wsrep_on[1]).upper() != "ON":
            return
        variables = dict(conn.exec_driver_sql(
            "SELECT @@binlog_format, @@SESSION.wsrep_sync_wait, @@wsrep_provider_options"
        ).one()._mapping)
        missing = [row[0] for row in conn.exec_driver_sql(
            "SELECT t.table_name FROM information_schema.tables t "
            "WHERE t.table_schema = DATABASE() AND t.table_type = 'BASE TABLE' "
            "AND NOT EXISTS (SELECT 1 FROM information_schema.table_constraints c "
            "WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name "
            "AND c.constraint_type = 'PRIMARY KEY')"
        )]
    binlog_format, sync_wait, provider = variables.values()
    if str(binlog_format).upper() != "ROW":
        raise UnsafeDatabase(
            f"Galera member with binlog_format={binlog_format}: set binlog_format=ROW "
            "(other formats may apply a write differently on other members)")
    if missing:
        raise UnsafeDatabase(
            f"table(s) without a primary key on Galera: {', '.join(sorted(missing))} "
            "(Galera applies rows by key): add one")
    if int(sync_wait) & GALERA_SYNC_WAIT == 0:
        raise UnsafeDatabase(
            f"wsrep_sync_wait={sync_wait} on the node's session: reads would not see every "
            "commit of the other members (the server refused the node's SET SESSION)")
    stall = longest_stall_s(str(provider or ""))
    limit = timing.fence_after_s - timing.heartbeat_interval_s
    if stall > limit:
        raise UnsafeDatabase(
            f"Galera's evs.suspect_timeout lets writes stall about {stall:.1f} s when a member "
            f"dies, longer than fence_after_s - heartbeat_interval_s ({limit:.1f} s): every node "
            "on a surviving member would fence. Set evs.suspect_timeout lower (docs/ha.md "
            "recommends PT2S) or fence_after_s higher (with session_timeout_s)")
    offset, member = member_clock_offset(db)
    tolerance = clock_tolerance_s(timing)
    if offset > tolerance:
        raise UnsafeDatabase(
            f"the clock of member {member} is {offset * 1000:.0f} ms off the first member's, "
            f"more than the {tolerance * 1000:.0f} ms the expiry rule tolerates: "
            "synchronise the members' clocks (NTP)")


def member_clock_offset(db: Database) -> tuple[float, DatabaseHost | None]:
    """The largest clock offset (s) between the host list's members that answer and the
    first that answers, each read at the midpoint of its round trip."""
    base: float | None = None
    worst: tuple[float, DatabaseHost | None] = (0.0, None)
    for host, conn in db.members():
        if conn is None:
            continue  # down: its clock is checked when a node starts while it is up
        with conn.cursor() as cur:
            before = time.time()
            cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
            row = cur.fetchone()
            after = time.time()
        assert row is not None
        offset = float(row[0]) - (before + after) / 2
        if base is None:
            base = offset
        elif abs(offset - base) > worst[0]:
            worst = (abs(offset - base), host)
    return worst
