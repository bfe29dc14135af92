"""A database URL with a host list (several members of one cluster): a connection goes to
the first member that answers and may serve, the others are passed over with the
reason, and the URL's parts survive the split. (Galera members that are not Synced or
left the primary component: tests/galera.)"""

from __future__ import annotations

import hashlib
import socket

import pytest
from sqlalchemy.engine import make_url

from quartzlite.config import DatabaseHost, NodeConfig, database_hosts
from quartzlite.errors import TransientStoreError, ValidationError
from quartzlite.storage import migrate
from quartzlite.storage.engine import Database

pytestmark = pytest.mark.db


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_database_hosts_splits_a_host_list() -> None:
    single, hosts = database_hosts("mysql+pymysql://u:p%40w@db1:3307,db2,[::1]:3310/ql?ssl_ca=/ca.pem")
    assert single == "mysql+pymysql://u:p%40w@db1:3307/ql?ssl_ca=/ca.pem"
    assert hosts == (DatabaseHost("db1", 3307), DatabaseHost("db2", 3306), DatabaseHost("::1", 3310))
    assert [str(h) for h in hosts] == ["db1:3307", "db2:3306", "[::1]:3310"]
    assert database_hosts("mysql+pymysql://root@127.0.0.1/q")[1] == (DatabaseHost("127.0.0.1", 3306),)
    for bad in ("mysql+pymysql://u@db1,,db2/q", "mysql+pymysql://u@db1:x/q", "mysql+pymysql://u@db1:0/q",
                "mysql+pymysql://u@:3306/q"):
        with pytest.raises(ValidationError) as raised:
            database_hosts(bad)
        assert raised.value.field == "database_url"
    # One journal per database, whatever the order of the list (a single host's is where
    # it always was: the hash of host:port/database).
    listed = NodeConfig(database_url="mysql+pymysql://u@db1:3307,db2/ql")
    reordered = NodeConfig(database_url="mysql+pymysql://u@db2:3306,db1:3307/ql")
    assert listed.journal_dir == reordered.journal_dir
    alone = NodeConfig(database_url="mysql+pymysql://u@db1:3307/ql")
    assert alone.journal_dir.name == hashlib.sha256(b"db1:3307/ql").hexdigest()[:16]
    assert alone.journal_dir != listed.journal_dir


def test_a_connection_passes_over_members_that_do_not_answer(database_url: str) -> None:
    url = make_url(database_url)
    dead = _closed_port()
    listed = f"mysql+pymysql://{url.username}@127.0.0.1:{dead},{url.host}:{url.port or 3306}/{url.database}"
    db = Database(listed, io_timeout_s=2)
    try:
        with db.connect() as conn:
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM ql_locks").scalar() == 2
        assert db.member == DatabaseHost(url.host or "", url.port or 3306)
        (_, _, server), *_ = db.server_threads()
        assert server == f"{url.host}:{url.port or 3306}"
        # The schema commands take the list too (on the first member that serves).
        assert migrate.one_server(listed).endswith(f"@{url.host}:{url.port or 3306}/{url.database}")
    finally:
        db.dispose()
    nobody = Database(f"mysql+pymysql://root@127.0.0.1:{dead},127.0.0.1:{_closed_port()}/x",
                      io_timeout_s=1)
    try:
        with pytest.raises(TransientStoreError) as raised, nobody.connect():
            pass
        assert raised.value.details["mysql_error"] == 2003
    finally:
        nobody.dispose()


def test_the_heartbeat_records_the_member_it_reached(db_url: str) -> None:
    """`quartzlite cluster` and the API show which database server each node talks to:
    the member its heartbeat reached, here the second of a host list whose first is down."""
    from datetime import UTC, datetime

    from quartzlite.client import SchedulerClient
    from quartzlite.storage.node import NodeStore

    url = make_url(db_url)
    here = f"{url.host}:{url.port or 3306}"
    listed = f"mysql+pymysql://{url.username}@127.0.0.1:{_closed_port()},{here}/{url.database}"
    db = Database(listed, io_timeout_s=2)
    client = SchedulerClient(db_url)
    try:
        store = NodeStore(db, node_name="test:1")
        store.register(session_id="m" * 32, host="test", pid=1, capacity=4, tags=(), version="t")
        assert store.heartbeat("m" * 32, 0.0, lambda: datetime.now(UTC)).alive
        (session,) = client.cluster()
        assert session.db_member == here
    finally:
        db.dispose()
        client.close()
