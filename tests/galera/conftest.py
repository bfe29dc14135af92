"""The Galera suite's fixture: one private three-member MariaDB Galera Cluster per test
module (tests/cluster/galera.py), with quartzlite's schema upgraded on member 0 and
replicated to the others. Only `make test-galera` collects this folder (it sets
QUARTZLITE_GALERA=1; tests/conftest.py ignores the folder otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.cluster.galera import GaleraCluster, rows

DATABASE = "quartzlite"


def _tables(cluster: GaleraCluster, i: int) -> set[str]:
    conn = cluster.connect(i, connect_timeout=2, read_timeout=10)
    try:
        found = rows(conn, "SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = %s", (DATABASE,))
    finally:
        conn.close()
    return {str(r[0]) for r in found}


def _has_tables(cluster: GaleraCluster, i: int, expected: set[str]) -> Callable[[], bool]:
    return lambda: _tables(cluster, i) >= expected


@pytest.fixture(scope="module")
def galera() -> Iterator[GaleraCluster]:
    """A Synced three-member cluster with the quartzlite schema at head on every member
    (database ``quartzlite``; ``galera.url(i, "quartzlite")``)."""
    from quartzlite.storage import migrate
    from tests.cluster.harness import wait_until

    with GaleraCluster(size=3) as cluster:
        try:
            migrate.upgrade(cluster.url(0, DATABASE))
            expected = _tables(cluster, 0)
            assert "ql_locks" in expected, expected
            for i in range(1, cluster.size):
                wait_until(_has_tables(cluster, i, expected), timeout=60,
                           message=f"the schema replicated to member {i}")
        except BaseException:
            print(cluster.logs())
            raise
        yield cluster
