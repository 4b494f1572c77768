"""The host-state store on PostgreSQL recovers from an outage without a
restart (issue 20, item 6): a server that took only reads for a while (a
standby after a failover, ``default_transaction_read_only``), a connection
the server dropped (a restart)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.hoststate import HostStateStore, StoreUnavailable, notify
from compute_plugins.hoststate import engine as engines
from tests import servers
from tests.functional.hoststate.conftest import create_database


@pytest.fixture(scope="module")
def pg(postgresql_server):
    """``(url, admin)``: a new database and a superuser connection."""
    url, drop = create_database(postgresql_server)
    admin = postgresql_server.admin()
    yield url, admin
    admin.close()
    drop()


def test_a_read_only_server_recovers_once_it_takes_writes_again(pg):
    """A connection opened while the server took only reads kept failing
    every write (not even as the store being unavailable: a raw driver
    error) after the server took writes again."""
    url, admin = pg
    name = sa.engine.make_url(url).database
    with HostStateStore(url) as store:
        store.acquire_lease("h1", "node-1", "test", 30)
        with admin.cursor() as cur:
            cur.execute("ALTER DATABASE %s SET default_transaction_read_only = on" % name)
        try:
            # NOTE: the failover: the pool's connection is opened again.
            store.engine.dispose()
            with pytest.raises(StoreUnavailable, match="read-only transaction"):
                store.acquire_lease("h2", "node-2", "test", 30)
        finally:
            with admin.cursor() as cur:
                cur.execute("ALTER DATABASE %s RESET default_transaction_read_only" % name)
        lease = store.acquire_lease("h2", "node-2", "test", 30)
        assert lease.host == "h2"


def test_a_dropped_connection_is_replaced(pg):
    """A pooled connection the server closed is replaced, not used: its
    socket shows the server's close (no ping on every checkout:
    :func:`compute_plugins.util.pools.ping_when_idle`)."""
    url, admin = pg
    name = sa.engine.make_url(url).database
    with HostStateStore(url) as store:
        store.acquire_lease("h3", "node-3", "test", 30)
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))

        def gone() -> bool:
            # NOTE: pg_terminate_backend only signals: closed once it exited.
            with admin.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
                return cur.fetchone()[0] == 0
        assert wait_until(gone)
        assert store.acquire_lease("h4", "node-4", "test", 30).host == "h4"


def kill_backend(admin, pid: int) -> None:
    """Terminate the PostgreSQL backend ``pid`` and wait until it exited."""
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def gone() -> bool:
        with admin.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            return cur.fetchone()[0] == 0
    assert wait_until(gone)


@contextlib.contextmanager
def killed_at_checkout(engine, admin, maria: bool = False):
    """While the block runs, the first connection ``engine``'s pool hands
    out has its backend ended (and gone) just after the pool's checks:
    the pids killed (a list, filled then). ``maria``: a MariaDB one."""
    killed: list[int] = []

    def checkout(dbapi_conn, record, proxy) -> None:
        if not killed:
            if maria:
                killed.append(dbapi_conn.thread_id())
                kill_thread(admin, killed[0])
            else:
                killed.append(dbapi_conn.get_backend_pid())
                kill_backend(admin, killed[0])

    sa.event.listen(engine, "checkout", checkout)
    try:
        yield killed
    finally:
        sa.event.remove(engine, "checkout", checkout)


def test_a_connection_killed_after_its_checkout_is_retried_once(pg):
    """The server ends a pooled connection just after the pool handed it
    out (used less than a second ago, its socket quiet then: no ping):
    the write transaction's first statement fails on it. Nothing of the
    transaction was committed, so it is run once more on a fresh
    connection and the write lands (before: StoreUnavailable)."""
    url, admin = pg
    with HostStateStore(url) as store:
        store.acquire_lease("k1", "node-k1", "test", 30)
        with killed_at_checkout(store.db.engine, admin) as killed:
            lease = store.acquire_lease("k2", "node-k2", "test", 30)
        assert killed and lease.host == "k2"
        assert store.get_lease("k2") == lease


def test_the_schedulers_liveness_read_on_a_killed_connection_is_retried_once(pg):
    """The read a scheduler makes first in every plan (the hosts changed
    since its mark) on a pooled read connection the server ended just
    after the pool handed it out: read again on a fresh one (before:
    StoreUnavailable, the request failed). It runs on its own (one
    statement: the single statements' pool), a transaction only when it
    reads every host."""
    url, admin = pg
    with HostStateStore(url) as store:
        store.publish("r1", {}, 0)
        assert "r1" in store.host_status_changes(None).generations
        assert store.db.single_engine is not None
        with killed_at_checkout(store.db.single_engine, admin) as killed:
            found = store.host_status_changes(None)
        assert killed and "r1" in found.generations


def test_a_connection_lost_at_the_commit_is_not_retried(pg):
    """The connection is lost as the commit is sent (its backend ended
    after the transaction's statements): whether the commit landed cannot
    be known, so the transaction is not run again (it could be twice);
    the caller is told the store is unavailable."""
    url, admin = pg
    lost_at_the_commit_is_not_retried(
        url, lambda dbapi: kill_backend(admin, dbapi.get_backend_pid()))


def lost_at_the_commit_is_not_retried(url: str, kill: Callable[[Any], None]) -> None:
    """A lease taken on a store whose connection ``kill(dbapi_connection)``
    ends as the first commit is sent: StoreUnavailable (not the retried
    Disconnected), one commit, no lease written."""
    with HostStateStore(url) as store:
        store.acquire_lease("c1", "node-c1", "test", 30)
        commits: list[int] = []

        def commit(conn) -> None:
            commits.append(1)
            if len(commits) == 1:
                kill(conn.connection.dbapi_connection)

        sa.event.listen(store.db.engine, "commit", commit)
        try:
            with pytest.raises(StoreUnavailable) as raised:
                store.acquire_lease("c2", "node-c2", "test", 30)
        finally:
            sa.event.remove(store.db.engine, "commit", commit)
        assert commits == [1] and type(raised.value) is StoreUnavailable
        assert store.get_lease("c2") is None


@pytest.fixture(scope="module")
def maria(mariadb_server):
    """``(url, admin)``: a new MariaDB database and a root connection."""
    url, drop = create_database(mariadb_server)
    admin = mariadb_server.admin()
    yield url, admin
    admin.close()
    drop()


def kill_thread(admin, thread_id: int) -> None:
    """End the MariaDB connection ``thread_id`` and wait until it is gone."""
    with admin.cursor() as cur:
        cur.execute("KILL %d" % thread_id)

    def gone() -> bool:
        with admin.cursor() as cur:
            cur.execute("SELECT count(*) FROM information_schema.processlist "
                        "WHERE id = %s", (thread_id,))
            return cur.fetchone()[0] == 0
    assert wait_until(gone)


def test_mariadb_a_connection_killed_after_its_checkout_is_retried_once(maria):
    """MariaDB (pymysql): a pooled connection the server ended just after
    the pool handed it out fails the transaction's first statement (lost
    connection): nothing committed, run once more on a fresh one; the
    liveness read likewise."""
    url, admin = maria
    with HostStateStore(url) as store:
        store.acquire_lease("k1", "node-k1", "test", 30)
        store.publish("r1", {}, 0)
        with killed_at_checkout(store.db.engine, admin, maria=True) as killed:
            store.acquire_lease("k2", "node-k2", "test", 30)
        assert killed
        with killed_at_checkout(store.db.read_engine, admin, maria=True) as killed:
            store.host_status_changes(None)
        assert killed
        assert store.get_lease("k2").epoch == 1
        assert "r1" in store.host_status_changes(None).generations


def test_mariadb_a_connection_lost_at_the_commit_is_not_retried(maria):
    """MariaDB: the connection ended as the commit is sent is not run
    again (it may have committed): StoreUnavailable, one commit."""
    url, admin = maria
    lost_at_the_commit_is_not_retried(
        url, lambda dbapi: kill_thread(admin, dbapi.thread_id()))


def wait_until(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _socket_options(dbapi_connection) -> dict[str, int]:
    """What the kernel's socket of a psycopg2 connection carries."""
    sock = socket.socket(fileno=os.dup(dbapi_connection.fileno()))
    try:
        return {"SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                "TCP_KEEPIDLE": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                "TCP_KEEPINTVL": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                "TCP_KEEPCNT": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                "TCP_USER_TIMEOUT": sock.getsockopt(socket.IPPROTO_TCP,
                                                    socket.TCP_USER_TIMEOUT)}
    finally:
        sock.close()  # NOTE: the duplicate only


def test_every_connection_notices_a_server_that_vanished(pg):
    """The pool's, the heartbeat's and the listener's connections carry TCP
    keepalives and ``tcp_user_timeout`` (the lock timeout, or a third of
    the agents' lease: ``[compute] agent_lease_duration`` reaches the
    store opened from the configuration): libpq says so
    (``get_dsn_parameters``) and the kernel's sockets have them (before:
    only the listener had keepalives; a lease renewal sent to a server
    gone without a RST blocked for ~15 minutes). A URL's own win."""
    url, _ = pg
    expected = {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3,
                "TCP_USER_TIMEOUT": 20000}
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", url, "host_state")
    conf.set_override("lock_timeout", 40, "host_state")
    conf.set_override("agent_lease_duration", 60, "compute")
    with HostStateStore.from_config(conf) as store:
        assert store.db.single_engine is not None
        sub = store.host_changes("h")
        assert isinstance(sub, notify.Subscription)
        try:
            assert wait_until(lambda: sub.live)
            listening = sub.listener._conn
            for engine in store.db.engines:
                raw = engine.raw_connection()
                try:
                    dsn = raw.driver_connection.get_dsn_parameters()
                    assert (dsn["keepalives"], dsn["tcp_user_timeout"]) == ("1", "20000")
                    assert _socket_options(raw.driver_connection) == expected
                finally:
                    raw.close()
            assert listening.get_dsn_parameters()["tcp_user_timeout"] == "20000"
            assert _socket_options(listening) == expected
        finally:
            sub.close()
    with HostStateStore(url + "?keepalives_idle=45&tcp_user_timeout=5000") as store:
        raw = store.db.engine.raw_connection()
        try:
            options = _socket_options(raw.driver_connection)
        finally:
            raw.close()
        assert (options["TCP_KEEPIDLE"], options["TCP_USER_TIMEOUT"]) == (45, 5000)


def test_a_server_that_stops_answering_fails_the_statement_in_time(pg, monkeypatch):
    """A statement sent to a server that no longer takes it fails once it
    has gone unacknowledged for ``tcp_user_timeout`` (the lock timeout;
    its floor lowered here to keep the test short) with the store
    unavailable, instead of blocking until the kernel gives up (about 15
    minutes; TCP keepalives alone never: their probes are acknowledged)."""
    monkeypatch.setattr(engines, "MIN_TCP_USER_TIMEOUT", 1.0)
    url, _ = pg
    # NOTE: a small window: fewer bytes fill it.
    proxy = servers.Relay("127.0.0.1", sa.engine.make_url(url).port, receive_buffer=4096)
    through = sa.engine.make_url(url).set(port=proxy.port).render_as_string(
        hide_password=False)
    outcome: list[object] = []
    with HostStateStore(through, lock_timeout=2) as store:
        store.acquire_lease("h5", "node-5", "test", 30)
        conn = store.db.engine.connect()
        try:
            conn.execute(sa.text("SELECT 1"))
            proxy.stall()

            def statement() -> None:
                started = time.monotonic()
                try:
                    # NOTE: large enough to fill the buffers between (a
                    # small one is acknowledged by the relay's kernel, and
                    # its answer waited for: what only a server that
                    # vanished, whose kernel is gone too, leaves unacked).
                    conn.execute(sa.text("SELECT length(:x)"), {"x": "x" * 4_000_000})
                    outcome.append("answered")
                except sa.exc.OperationalError as err:
                    outcome.append((time.monotonic() - started, str(err.orig)))
            thread = threading.Thread(target=statement, daemon=True)
            thread.start()
            thread.join(60)
            assert not thread.is_alive(), "the statement waited on a stalled server"
            assert isinstance(outcome[0], tuple), outcome
            assert outcome[0][0] < 15, outcome
        finally:
            # NOTE: first: a connection still waiting then fails at once.
            proxy.close()
            conn.close()
