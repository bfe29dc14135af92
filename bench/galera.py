"""The galera workload's database: a private three-member MariaDB Galera Cluster on
loopback (tests/cluster/galera.py), behind the bench's :class:`~bench.util.Server`, so
that ``ql.burst`` and ``ql.steady`` run on it unchanged and the cost of synchronous
replication shows beside the single server's figures.

Each node is given all three members, node ``i`` listing member ``i`` first: with two
nodes both write, on two members (multi-writer), as docs/ha.md's first Galera topology;
a node moves down its list only if its member fails. The bench's own queries (creating
and dropping databases, the sessions check, the runs' statuses) go to member 0, its status
reads to every member.
"""

from __future__ import annotations

from typing import Any

import pymysql

from bench.util import STATUS_VARS, Server
from tests.cluster.galera import GaleraCluster

#: docs/ha.md's recommended Galera settings. With Galera's defaults a node refuses to
#: start with quartzlite's default timing (``evs.suspect_timeout`` + 1.5 s exceeds
#: ``fence_after_s - heartbeat_interval_s``), so the defaults cannot be measured as such.
RECOMMENDED = ("evs.suspect_timeout=PT2S;evs.keepalive_period=PT0.5S;evs.inactive_timeout=PT3S;"
               "evs.install_timeout=PT3S;evs.inactive_check_period=PT0.5S")
#: Conflicts between members, counted where the losing transaction ran: a local commit
#: that failed certification (the client gets 1213), and a local transaction aborted by
#: a replicated writeset it conflicted with (brute-force abort).
CONFLICTS = ("wsrep_local_cert_failures", "wsrep_local_bf_aborts")
MEMBERS = 3


class GaleraServer(Server):
    """Starts the cluster (bootstrap, two joins by SST, all Synced: about 12 s here)
    and connects to every member; :meth:`close` stops it and removes its datadirs."""

    def __init__(self) -> None:
        self.cluster = GaleraCluster(size=MEMBERS, provider_options=RECOMMENDED)
        self.members: list[pymysql.connections.Connection[Any]] = []
        try:
            super().__init__()
            self.calibrate()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        self._close_members()
        self.members = [self.cluster.connect(i, read_timeout=None) for i in range(MEMBERS)]
        self.conn = self.members[0]
        self.query("SET time_zone = '+00:00'")  # quartzlite stores UTC
        self.conn_id = self.query("SELECT CONNECTION_ID()")[0][0]

    def _each(self, sql: str) -> list[list[tuple[Any, ...]]]:
        """One statement on every member, in member order."""
        found = []
        for conn in self.members:
            with conn.cursor() as cur:
                cur.execute(sql)
                found.append(list(cur.fetchall()))
        return found

    def url_for(self, database: str, node: int = 0) -> str:
        """Every member, the ``node``-th (modulo the size) first."""
        order = [(node + k) % MEMBERS for k in range(MEMBERS)]
        hosts = ",".join(f"127.0.0.1:{self.cluster.port(i)}" for i in order)
        return f"mysql+pymysql://root@{hosts}/{database}"

    def pids(self) -> list[int]:
        return [m.proc.pid for m in self.cluster.members if m.proc is not None]

    def ports(self) -> set[int]:
        return {m.port for m in self.cluster.members}

    def status(self) -> dict[str, int]:
        """:data:`~bench.util.STATUS_VARS` and :data:`CONFLICTS`, summed over the members:
        ``Questions`` counts what clients sent to each member, not the writesets it
        applied from the others."""
        names = ",".join(f"'{n}'" for n in (*STATUS_VARS, *CONFLICTS))
        totals = dict.fromkeys((*STATUS_VARS, *CONFLICTS), 0)
        for rows in self._each(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})"):
            for name, value in rows:
                totals[str(name)] += int(value)
        return totals

    def clients(self) -> list[dict[str, Any]]:
        """Other connections on every member; Galera's own threads (appliers, rollbacker:
        ``system user``) are not clients."""
        keys = ("id", "user", "host", "db", "command", "time", "state")
        return [dict(zip(keys, row, strict=True)) for rows in self._each(
            "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE FROM information_schema.PROCESSLIST "
            "WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Daemon', 'Binlog Dump') "
            "AND USER <> 'system user'") for row in rows]

    def describe(self) -> dict[str, Any]:
        """What the results state about the cluster (member 0's settings: the members'
        are the same)."""
        (threads,) = self.query("SELECT @@wsrep_slave_threads")[0]
        return {
            "members": MEMBERS,
            "galera": self.cluster.status(0).get("wsrep_provider_version"),
            "provider_options": RECOMMENDED,
            "topology": "multi-writer: every node lists all members, node i member i first",
            **server_settings(self),
            "wsrep_slave_threads": int(threads),
        }

    def _close_members(self) -> None:
        for conn in self.members:
            try:
                conn.close()
            except pymysql.err.Error:
                pass  # already gone
        self.members = []

    def close(self) -> None:
        self._close_members()
        self.cluster.close()


def server_settings(server: Server) -> dict[str, Any]:
    """The server settings that weigh on commit cost, stated beside each side's figures
    (the members are sized for a small machine, the single server is whatever it is)."""
    version, pool, flush, log_bin = server.query(
        "SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_flush_log_at_trx_commit, @@log_bin")[0]
    return {"mariadb": str(version), "innodb_buffer_pool_mib": int(pool) // (1 << 20),
            "innodb_flush_log_at_trx_commit": int(flush), "log_bin": bool(log_bin)}
