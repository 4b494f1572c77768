"""The host-state store on SQLite (the embedded default): the shared cases
of :mod:`tests.unit.hoststate.cases`, and what is SQLite's own."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import hoststate
from compute_plugins.conf import host_state as host_state_conf
from tests.unit.hoststate import workers
from tests.unit.hoststate.cases import (  # noqa: F401 - collected here
    TestDecisions,
    TestPublish,
    TestSchema,
    TestWaitForAnswer,
    make_store,
    states,
    store,
)


@pytest.fixture
def url(tmp_path):
    return "sqlite:///%s" % (tmp_path / "state" / "host_state.sqlite")


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_are_private(tmp_path):
    old = os.umask(0)
    try:
        with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "new" / "hs.sqlite")) as s:
            s.publish("h1", states(a=1), 0)
            files = sorted(os.listdir(tmp_path / "new"))
            assert files == ["hs.sqlite", "hs.sqlite-shm", "hs.sqlite-wal"]
            assert {f: _mode(tmp_path / "new" / f) for f in files} == dict.fromkeys(files, 0o600)
            assert _mode(tmp_path / "new") == 0o700
    finally:
        os.umask(old)


def test_wal_mode(url):
    with hoststate.HostStateStore(url) as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_default_connection_is_in_the_state_dir(tmp_path):
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", str(tmp_path / "agent"), "compute_plugins")
    path = tmp_path / "agent" / "host_state.sqlite"
    assert host_state_conf.connection(conf) == "sqlite:///%s" % path
    with hoststate.HostStateStore.from_config(conf) as s:
        s.publish("h1", states(a=1), 0)
    assert _mode(path) == 0o600
    conf.set_override("connection", "sqlite://", "host_state")
    assert host_state_conf.connection(conf) == "sqlite://"


def test_default_state_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    conf = cfg.ConfigOpts()
    assert host_state_conf.connection(conf) == "sqlite:///%s" % (
        tmp_path / "xdg" / "compute-plugins" / "host_state.sqlite")


def test_in_memory_store_is_shared_by_threads():
    with hoststate.HostStateStore("sqlite://") as s:
        s.publish("h1", {"counter": workers.doc("counter", n=0)}, 0)

        def bump():
            for _ in range(10):
                while True:
                    snap = s.get_host("h1")
                    try:
                        s.publish("h1", {"counter": workers.doc(
                            "counter", n=snap.states["counter"]["state"]["n"] + 1)},
                            snap.generation)
                        break
                    except hoststate.GenerationConflict:
                        continue
        threads = [threading.Thread(target=bump) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert s.get_host("h1").states["counter"]["state"]["n"] == 30


def test_delete_the_file_in_the_mismatch_message(url):
    hoststate.HostStateStore(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE hoststate_version SET version = 7")
    engine.dispose()
    with pytest.raises(hoststate.SchemaVersionMismatch) as info:
        hoststate.HostStateStore(url)
    assert "delete %s" % url[len("sqlite:///"):] in str(info.value)


def test_a_locked_database_is_unavailable(url):
    with hoststate.HostStateStore(url) as s:
        s.publish("h1", states(a=1), 0)
    blocker = sa.create_engine(url)
    impatient = hoststate.HostStateStore(url, sqlite_busy_timeout=0.1)
    try:
        with blocker.connect() as conn:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
            with pytest.raises(hoststate.StoreUnavailable) as info:
                impatient.publish("h1", states(a=2), 1)
            assert "locked" in str(info.value)
            conn.exec_driver_sql("ROLLBACK")
        assert impatient.publish("h1", states(a=2), 1).written
    finally:
        impatient.close()
        blocker.dispose()


def test_writer_processes_lose_no_update(url):
    """Read-modify-CAS from several processes on one SQLite file."""
    with hoststate.HostStateStore(url) as s:
        s.publish("h1", {"counter": workers.doc("counter", n=0)}, 0)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        pool.starmap(workers.increment, [(url, "h1", 15)] * 3)
    with hoststate.HostStateStore(url) as s:
        snap = s.get_host("h1")
    assert snap.states["counter"]["state"]["n"] == 45
    assert snap.generation == 46
