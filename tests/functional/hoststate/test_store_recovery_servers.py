"""The host-state store on PostgreSQL recovers from an outage without a
restart (issue 20, item 6): a server that took only reads for a while (a
standby after a failover, ``default_transaction_read_only``), a connection
the server dropped (a restart)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from compute_plugins.hoststate import HostStateStore, StoreUnavailable
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
    url, admin = pg
    name = sa.engine.make_url(url).database
    with HostStateStore(url) as store:
        store.acquire_lease("h3", "node-3", "test", 30)
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
        assert store.acquire_lease("h4", "node-4", "test", 30).host == "h4"
