"""The push channel's pieces that need no server
(:mod:`compute_plugins.hoststate.notify`); against PostgreSQL:
``tests/functional/scheduler/test_push.py``."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from compute_plugins.hoststate import notify
from compute_plugins.hoststate.store import HostStateStore


def test_channels_fit_postgresql_names_whatever_the_host_name():
    long = "h" * 255
    assert len(notify.host_channel(long).encode()) <= 63
    assert notify.host_channel(long) != notify.host_channel("h" * 254)
    assert notify.host_channel("a") == notify.host_channel("a")
    assert notify.decision_channel(2**62) == "cp_decision_%d" % 2**62


def test_sqlite_does_not_push():
    """SQLite (and MySQL) have no LISTEN: their waiters poll."""
    with HostStateStore("sqlite://") as store:
        assert not store.db.pushes
        assert store.db.listener() is None
        assert store.host_changes("h") is None


def test_a_listener_that_cannot_connect_says_so_and_lets_waiters_poll(caplog):
    """The server cannot be reached: subscribing still works (the waiter
    polls meanwhile: ``live`` is False), said once, retried in the
    background."""
    def refuse():
        raise OSError("connection refused")

    listener = notify.Listener(refuse, "postgresql://db/x", 300.0)
    try:
        sub = listener.subscribe(notify.host_channel("h"))
        assert not sub.live
        assert not sub.wait(0)
        said = [r.getMessage() for r in caplog.records if "cannot listen" in r.getMessage()]
        assert said == ["host-state store postgresql://db/x: cannot listen for changes "
                        "(connection refused): polling until it can"]
        sub.close()
    finally:
        listener.close()


@pytest.mark.parametrize("name", ['x"; DROP TABLE t; --', "a b", ""])
def test_only_the_modules_channel_names_are_quoted(name):
    with pytest.raises(ValueError):
        notify._quoted(name)


def test_send_is_nothing_where_nothing_listens():
    engine = sa.create_engine("sqlite://")
    try:
        with engine.begin() as conn:
            notify.send(conn, [notify.host_channel("h")], "x")  # no statement, no error
    finally:
        engine.dispose()
