"""Engines of the host-state store without a database server: what
happens when the URL names something that is not one."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from compute_plugins import hoststate
from compute_plugins.hoststate import engine as engines


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never says a word (another
    service's port, a server that hangs)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener.getsockname()[1]
    listener.close()


@pytest.mark.parametrize("scheme", ["postgresql+psycopg2", "mysql+pymysql"])
def test_a_silent_server_is_unavailable_not_a_hang(silent_server, scheme, monkeypatch):
    # NOTE: libpq's connect_timeout is at least 2 s.
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT", 2 if scheme.startswith("postgresql") else 1)
    monkeypatch.setattr(engines, "_MYSQL_SCHEMA_LOCK_WAIT", 1)
    url = "%s://user:s3cret@127.0.0.1:%d/db" % (scheme, silent_server)
    outcome = []

    def open_store():
        try:
            hoststate.HostStateStore(url, lock_timeout=0.5).close()
            outcome.append(None)
        except Exception as err:  # noqa: BLE001 - checked below
            outcome.append(err)
    thread = threading.Thread(target=open_store, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "opening the store hung on a silent server"
    assert isinstance(outcome[0], hoststate.StoreUnavailable), outcome
    assert "s3cret" not in str(outcome[0])
    assert time.monotonic() - start < 60


def _connect_params(url, **kwargs):
    """The parameters the engine of ``url`` hands its driver."""
    engine = engines.create_engine(url, **kwargs)
    seen = {}

    def capture(dialect, record, cargs, cparams):
        seen.update(cparams)
        # NOTE: then the driver connects to port 1: refused.
    event.listen(engine, "do_connect", capture)
    try:
        with pytest.raises(sa.exc.DBAPIError):
            engine.connect()
    finally:
        engine.dispose()
    return seen


def test_server_timeouts():
    params = _connect_params("mysql+pymysql://root@127.0.0.1:1/db", lock_timeout=100)
    assert (params["connect_timeout"], params["read_timeout"],
            params["write_timeout"]) == (10, 110, 110)
    params = _connect_params("postgresql+psycopg2://pg@127.0.0.1:1/db")
    assert params["connect_timeout"] == 10


@pytest.mark.parametrize("autocommit", [False, True])
def test_postgresql_connections_notice_a_vanished_server(autocommit):
    """The pool's and the heartbeat's (autocommit) connections get TCP
    keepalives and ``tcp_user_timeout`` = the lock timeout or a third of
    the lease, whichever is less, at least 10 s (before: none, and a
    renewal sent to a server gone without a RST waited for the kernel's
    ~15 minutes of retransmissions)."""
    params = _connect_params("postgresql+psycopg2://pg@127.0.0.1:1/db", lock_timeout=25,
                             autocommit=autocommit, lease_duration=90)
    assert {key: params[key] for key in ("keepalives", "keepalives_idle",
                                         "keepalives_interval", "keepalives_count",
                                         "tcp_user_timeout")} == {
        "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
        "keepalives_count": 3, "tcp_user_timeout": 25000}
    assert _connect_params("postgresql+psycopg2://pg@127.0.0.1:1/db",
                           lock_timeout=0.5)["tcp_user_timeout"] == 10000


@pytest.mark.parametrize(("lock_timeout", "lease_duration", "expected"), [
    (30, 30, 10000), (60, 60, 20000), (120, 45, 15000), (30, 9, 10000)])
def test_a_renewal_stalled_on_a_vanished_server_fails_while_the_lease_holds(
        lock_timeout, lease_duration, expected):
    """``tcp_user_timeout`` is at most a third of the agents' lease (at
    least 10 s): an agent renews every third of it, so a renewal stalled on
    a server that vanished fails and is tried again, on a new connection,
    before the lease ends. It was the lock timeout: by default (30 s, a
    30 s lease) the renewal failed as the lease ended, another agent could
    take the host over, and schedulers saw it down."""
    params = _connect_params("postgresql+psycopg2://pg@127.0.0.1:1/db",
                             lock_timeout=lock_timeout, lease_duration=lease_duration)
    assert params["tcp_user_timeout"] == expected
    assert engines.pg_socket_params(30.0)["tcp_user_timeout"] == 10000


def test_server_timeouts_in_the_url_win():
    params = _connect_params(
        "mysql+pymysql://root@127.0.0.1:1/db?read_timeout=5&connect_timeout=3")
    assert (params["read_timeout"], params["connect_timeout"]) == (5, 3)
    params = _connect_params("postgresql+psycopg2://pg@127.0.0.1:1/db?connect_timeout=3"
                             "&keepalives=0&tcp_user_timeout=0")
    assert (params["connect_timeout"], params["keepalives"], params["tcp_user_timeout"]) == \
        ("3", "0", "0")
    assert params["keepalives_idle"] == 30


@pytest.mark.parametrize("url", [
    "postgresql+psycopg2://pg:s3cret@127.0.0.1:1/db",
    "postgresql+psycopg2://pg@127.0.0.1:1/db?password=s3cret",
    "mysql+pymysql://root@127.0.0.1:1/db?password=s3cret&charset=utf8mb4",
])
def test_passwords_are_hidden(url):
    assert "s3cret" not in engines.safe_url(url)
    assert "127.0.0.1:1/db" in engines.safe_url(url)
    with pytest.raises(hoststate.StoreUnavailable) as info:
        hoststate.HostStateStore(url)
    assert "s3cret" not in str(info.value)


def test_ssl_key_passwords_are_hidden():
    url = "postgresql+psycopg2://pg@db/hs?sslkey=/k.pem&sslpassword=s3cret"
    assert engines.safe_url(url) == (
        "postgresql+psycopg2://pg@db/hs?sslkey=%2Fk.pem&sslpassword=%2A%2A%2A")
    assert "s3cret" not in engines.safe_url("mysql+pymysql://root@db/hs?passwd=s3cret")


def test_every_lease_default_is_the_options_default():
    """``[compute] agent_lease_duration``'s default is the lease a store,
    its engine, its push and an agent assume when not told (a store
    opened without a configuration): one value, so that changing the
    option's default changes them all (they were separate literals)."""
    import inspect

    from oslo_config import cfg

    from compute_plugins.compute import agent
    from compute_plugins.conf import compute as compute_conf
    from compute_plugins.hoststate import database, notify, push, store

    conf = cfg.ConfigOpts()
    compute_conf.register_opts(conf)
    conf([], default_config_files=[])
    option = conf.compute.agent_lease_duration
    assert engines.DEFAULT_LEASE_DURATION == option
    takers = [engines.pg_socket_params, engines.create_engine, database.Database,
              notify.connector, notify.PgPush, store.HostStateStore, push.choose,
              agent.ComputeAgent]
    defaults = {taker.__qualname__: inspect.signature(taker).parameters["lease_duration"].default
                for taker in takers}
    assert defaults == {name: option for name in defaults}
    assert store._lease_duration(cfg.ConfigOpts()) == option
