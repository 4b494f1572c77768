"""The host-state store on SQLite (the embedded default): the shared cases
of :mod:`tests.unit.hoststate.cases`, and what is SQLite's own."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
import threading

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins import hoststate
from compute_plugins.conf import host_state as host_state_conf
from compute_plugins.hoststate import protocol
from tests.unit.hoststate import workers
from tests.unit.hoststate.cases import (  # noqa: F401 - collected here
    SPEC,
    TestAgentLeases,
    TestChanges,
    TestDecisions,
    TestDisabledHosts,
    TestLiveness,
    TestPublish,
    TestSchema,
    TestTransitions,
    TestWaitForAnswer,
    states,
)


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
        conn.exec_driver_sql("UPDATE hoststate_version SET version = 99")
    engine.dispose()
    with pytest.raises(hoststate.SchemaVersionMismatch) as info:
        hoststate.HostStateStore(url)
    assert "delete %s with its -wal and -shm files" % url[len("sqlite:///"):] in str(
        info.value)


def test_writer_processes_lose_no_update(url):
    """Read-modify-CAS from several processes on one SQLite file."""
    with hoststate.HostStateStore(url) as s:
        s.publish("h1", {"counter": workers.doc("counter", n=0)}, 0)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        pool.starmap(workers.increment, [(url, "h1", 8)] * 3)
    with hoststate.HostStateStore(url) as s:
        snap = s.get_host("h1")
    assert snap.states["counter"]["state"]["n"] == 24
    assert snap.generation == 25


def test_store_unavailable_while_waiting(store, monkeypatch):
    """A database that goes away for a few polls does not end the wait
    (the decision would stay pending for a late agent). Not per backend:
    the outage is simulated."""
    d = store.submit_decision("c1", "h1", SPEC)
    real_get = store.get_decision
    polls = []

    def flaky_get(decision_id):
        polls.append(decision_id)
        if len(polls) <= 2:
            raise hoststate.StoreUnavailable(store.url, "server closed the connection")
        if len(polls) == 3:
            protocol.claim(store, decision_id)
        return real_get(decision_id)
    monkeypatch.setattr(store, "get_decision", flaky_get)
    answer = protocol.wait_for_answer(store, "c1", timeout=60, poll_interval=0.001)
    assert answer.status == "claimed" and answer.id == d.id
    assert len(polls) == 3


def test_store_unavailable_at_the_deadline(store, monkeypatch):
    d = store.submit_decision("c1", "h1", SPEC)

    def down(*args, **kwargs):
        raise hoststate.StoreUnavailable(store.url, "connection refused")
    monkeypatch.setattr(store, "get_decision", down)
    monkeypatch.setattr(store, "swap_status", down)
    with pytest.raises(hoststate.AnswerTimeout) as info:
        protocol.wait_for_answer(store, "c1", timeout=0.05, poll_interval=0.001)
    err = info.value
    assert not err.withdrawn and err.unavailable == "connection refused"
    assert "connection refused" in str(err) and "not withdrawn" in str(err)
    assert isinstance(err.__cause__, hoststate.StoreUnavailable)
    monkeypatch.undo()
    assert store.get_decision(d.id).status == "pending"


def test_a_lone_name_is_not_a_list(store):
    """A string where a list of names is expected is refused, not read as
    its characters (which found nothing, silently)."""
    store.publish("h", states(a=1), 0, providers={"u": "n"})
    for call in (store.get_hosts, store.generations, store.hosts_for_providers):
        with pytest.raises(TypeError):
            call("h" if call != store.hosts_for_providers else "u")
    assert list(store.get_hosts(["h"])) == ["h"]
    assert store.hosts_for_providers(["u"]) == {"u": "h"}


def test_wait_refuses_a_busy_loop_and_an_endless_timeout(store, monkeypatch):
    """A zero poll interval polled the database without sleeping; a NaN
    timeout never reached its deadline."""
    store.submit_decision("c1", "h1", SPEC)
    polls = []
    real_get = store.get_decision

    def counting_get(decision_id):
        polls.append(decision_id)
        assert len(polls) < 1000, "busy loop"
        return real_get(decision_id)
    monkeypatch.setattr(store, "get_decision", counting_get)
    for kwargs in ({"timeout": 0.2, "poll_interval": 0, "max_poll_interval": 0},
                   {"timeout": float("nan")}, {"timeout": -1}):
        with pytest.raises(ValueError):
            protocol.wait_for_answer(store, "c1", **kwargs)
    assert polls == []
    assert store.active_decision("c1").status == "pending"


def test_a_new_file_locked_by_another_connection_is_waited_for(tmp_path):
    """Switching a file to WAL while another connection writes it waits
    (SQLite answers "database is locked" at once, without its busy
    handler), instead of failing the agent that opened it second."""
    import sqlite3
    import threading

    path = tmp_path / "hs.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE t (x)")  # a write lock (RESERVED), as ensure_schema holds
    timer = threading.Timer(0.3, other.commit)
    timer.start()
    try:
        with hoststate.HostStateStore("sqlite:///%s" % path, lock_timeout=10) as store:
            assert store.generations() == {}
    finally:
        timer.join()
        other.close()
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_file_that_is_not_a_database_is_the_stores_error(tmp_path):
    """A file that is not SQLite (``file is not a database``) is one of the
    store's errors naming the database, not a bare SQLAlchemy error (which
    the command line reports as a bug); the file is left as it was."""
    path = tmp_path / "hs.sqlite"
    path.write_text("not a database\n")
    with pytest.raises(hoststate.HostStateError) as info:
        hoststate.HostStateStore("sqlite:///%s" % path)
    assert str(path) in str(info.value) and "not a database" in str(info.value)
    assert path.read_text() == "not a database\n"


def test_sqlite_a_failure_in_one_thread_leaves_another_s_transaction_whole(tmp_path):
    """A failing transaction drops the pooled connections (store recovery):
    one that another thread of the process (the demo's scheduler and
    agent) has open carries on and commits."""
    from compute_plugins.hoststate.database import Database
    from compute_plugins.hoststate.errors import StoreUnavailable

    db = Database("sqlite:///%s" % (tmp_path / "shared.sqlite"))
    try:
        with db.write() as conn:
            conn.execute(sa.text("CREATE TABLE t (n INTEGER)"))
        with db.read() as conn:  # NOTE: a second pooled connection, idle
            conn.execute(sa.text("SELECT 1"))
        failed = []

        def another_thread_fails():
            try:
                with db.read() as conn:
                    conn.execute(sa.text("SELECT * FROM missing_table"))
            except StoreUnavailable as err:
                failed.append(err)

        with db.write() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            thread = threading.Thread(target=another_thread_fails)
            thread.start()
            thread.join(30)
            conn.execute(sa.text("INSERT INTO t VALUES (2)"))
        assert len(failed) == 1
        with db.read() as conn:
            assert conn.execute(sa.text("SELECT n FROM t ORDER BY n")).scalars().all() == [1, 2]
    finally:
        db.close()


def test_reading_many_hosts_fits_sqlite_s_older_limit_of_variables(tmp_path):
    """An SQLite before 3.32 (Ubuntu 20.04's 3.31) takes 999 variables in
    a statement: a scheduler's read of the CHUNK hosts it fits keeps
    under it (before: the rows, states and providers read as one
    ``UNION ALL`` of three ``IN`` lists, 1,500 variables: "too many SQL
    variables", the plan failed)."""
    def older(dbapi_conn, _record):
        dbapi_conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)

    sa.event.listen(sa.pool.Pool, "connect", older)
    try:
        with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "s.db")) as store:
            names = ["h%03d" % i for i in range(400)]
            for name in names:
                store.publish(name, states(numa=1), 0, nodename=name,
                              providers={"u-" + name: name})
            found = store.get_hosts(names)
        assert sorted(found) == names
        assert dict(found["h399"].providers) == {"u-h399": "h399"}
        assert found["h007"].states["numa"]["state"]["n"] == 1
    finally:
        sa.event.remove(sa.pool.Pool, "connect", older)
