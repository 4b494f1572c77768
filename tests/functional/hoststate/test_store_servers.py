"""The host-state store on PostgreSQL and MariaDB: the shared cases of
:mod:`tests.unit.hoststate.cases` on each server (threads), and concurrent
writers and readers in separate processes, as agents and schedulers on
several machines are."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from compute_plugins import hoststate
from tests import servers
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


@pytest.fixture(scope="module")
def pool():
    """Worker processes, spawned once per module (each opens its own store
    per task, as an agent or a scheduler does)."""
    with multiprocessing.get_context("spawn").Pool(4) as p:
        yield p


def test_writer_processes_lose_no_update(url, pool):
    with hoststate.HostStateStore(url) as s:
        s.publish("h1", {"counter": workers.doc("counter", n=0)}, 0)
    conflicts = pool.starmap(workers.increment, [(url, "h1", 8)] * 4)
    with hoststate.HostStateStore(url) as s:
        snap = s.get_host("h1")
    assert snap.states["counter"]["state"]["n"] == 32, conflicts
    assert snap.generation == 33


def test_reads_are_atomic_across_processes(url, pool):
    """Two writer processes (one host each) and two reader processes: no
    read mixes two generations of a host."""
    with hoststate.HostStateStore(url) as s:
        workers.publish_round(s, "h1", 1)
        workers.publish_round(s, "h2", 1)
    last = 30
    readers = [pool.apply_async(workers.read_rounds, (url, host, last))
               for host in ("h1", "h2")]
    writers = [pool.apply_async(workers.publish_rounds, (url, host, 2, last))
               for host in ("h1", "h2")]
    for w in writers:
        w.get(300)
    seen = [r.get(300) for r in readers]
    # NOTE: the reads overlapped the writes (not all before or after).
    assert all(n > 1 for n in seen), seen
    with hoststate.HostStateStore(url) as s:
        assert s.generations() == {"h1": last, "h2": last}


def test_agent_processes_cannot_double_claim(url, pool):
    with hoststate.HostStateStore(url) as s:
        ids = [s.submit_decision("c%d" % i, "h1", SPEC).id for i in range(20)]
    won = pool.starmap(workers.claim, [(url, ids)] * 4)
    assert sorted(sum(won, [])) == ids
    with hoststate.HostStateStore(url) as s:
        assert {d.status for d in map(s.get_decision, ids)} == {"claimed"}


def test_processes_create_the_schema_once(empty_url, pool):
    assert pool.map(workers.open_store, [empty_url] * 4) == [hoststate.SCHEMA_VERSION] * 4


def test_password_is_hidden(backend):
    url = {"postgresql": "postgresql+psycopg2://postgres:s3cret@127.0.0.1:1/none",
           "mariadb": "mysql+pymysql://root:s3cret@127.0.0.1:1/none"}[backend]
    with pytest.raises(hoststate.StoreUnavailable) as info:
        hoststate.HostStateStore(url)
    assert "s3cret" not in str(info.value) and "127.0.0.1:1" in str(info.value)


def test_schema_lock_is_held_until_the_creation_commits(empty_url, backend):
    """MySQL's named lock belongs to the session: an opener that takes it
    as soon as the creator releases it must find the version row (on
    PostgreSQL the lock is the transaction's: nothing to see)."""
    seen = []

    def open_second(conn, cursor, statement, parameters, context, executemany):
        if "RELEASE_LOCK" in statement and not seen:
            seen.append(statement)
            # NOTE: the creator has just released the schema lock.
            with hoststate.HostStateStore(empty_url) as second:
                seen.append(second.generations())
    event.listen(sa.engine.Engine, "after_cursor_execute", open_second)
    try:
        hoststate.HostStateStore(empty_url).close()
    finally:
        event.remove(sa.engine.Engine, "after_cursor_execute", open_second)
    assert seen[1:] == ([{}] if backend == "mariadb" else []), seen


def test_a_lease_expires_by_the_servers_clock_not_the_takers(url, monkeypatch):
    """review: a lease's expiry was compared with the taker's clock: an
    agent on a machine whose clock ran an hour ahead took the host from a
    live agent at once (and one behind made its own lease look expired to
    the others early). With a database server the server's clock decides."""
    import datetime

    from compute_plugins.hoststate import database

    with hoststate.HostStateStore(url) as s:
        s.acquire_lease("h1", "node-a", "pid 1 on m1", 60)
    right = database.utcnow
    monkeypatch.setattr(database, "utcnow",
                        lambda: right() + datetime.timedelta(hours=1))
    with hoststate.HostStateStore(url) as s:
        with pytest.raises(hoststate.AgentLeaseHeld, match="node-a"):
            s.acquire_lease("h1", "node-b", "pid 2 on m2", 60)
        lease = s.get_lease("h1")
        assert lease.node == "node-a"
    # a renewal by a machine whose clock is behind still extends it from
    # the server's now
    monkeypatch.setattr(database, "utcnow",
                        lambda: right() - datetime.timedelta(hours=1))
    with hoststate.HostStateStore(url) as s:
        renewed = s.renew_lease(lease, 60)
    monkeypatch.setattr(database, "utcnow", right)
    assert renewed.expires_at > right() + datetime.timedelta(seconds=30)
    with hoststate.HostStateStore(url) as s:
        with pytest.raises(hoststate.AgentLeaseHeld):
            s.acquire_lease("h1", "node-b", "pid 2 on m2", 60)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_plain_postgresql_url_opens_the_store(url, backend):
    """``postgresql://`` without a driver is what the docs show and what
    operators write: SQLAlchemy 2.1 reads it as psycopg (3), which the
    ``postgresql`` extra installs (it used to fail with ``No module named
    'psycopg'``). Push needs psycopg2 and is not used on it: waiters poll."""
    plain = sa.engine.make_url(url).set(drivername="postgresql")
    with hoststate.HostStateStore(plain.render_as_string(hide_password=False)) as s:
        assert s.engine.dialect.driver == "psycopg"
        s.publish("plain-url", states(numa=1), 0)
        assert s.get_host("plain-url").generation == 1


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_heartbeat_is_one_statement_on_postgresql(url, backend):
    """issue 19: an agent's lease renewal, the one steady-state write of
    every idle host, was one UPDATE but five round trips (the pool's ping,
    the isolation level set, the UPDATE, the COMMIT, the level reset): a
    third of an idle agent's store work. It is one statement on the wire
    now; a renewal on a connection the server closed since still renews,
    and a lease taken over is still refused (Fenced)."""
    parsed = sa.engine.make_url(url)
    proxy = servers.QueryCounter(parsed.host, parsed.port)
    try:
        with hoststate.HostStateStore(proxy.url(url)) as s:
            lease = s.acquire_lease("beat", "node-a", "pid 1", 60)
            s.renew_lease(lease, 60)  # its connection opened and set up
            proxy.queries.clear()
            renewed = s.renew_lease(lease, 60)
            assert len(proxy.queries) == 1, proxy.queries
            assert proxy.queries[0].startswith("UPDATE hoststate_leases SET expires_at")
            assert renewed.expires_at >= lease.expires_at
            # the server closed the pooled connection (a restart, an idle
            # timeout): no ping caught it; the renewal is tried again
            with s.db.engine.connect() as conn:
                killed = conn.execute(sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'UPDATE hoststate_leases%' AND pid <> pg_backend_pid()"
                )).scalars().all()
                conn.commit()
            assert killed == [True]
            again = s.renew_lease(lease, 60)
            assert again.expires_at >= renewed.expires_at
            s.end_lease(lease)
            taken = s.acquire_lease("beat", "node-b", "pid 2", 60)
            with pytest.raises(hoststate.Fenced):
                s.renew_lease(lease, 60)
            assert s.get_lease("beat").epoch == taken.epoch
    finally:
        proxy.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_forked_child_uses_database_sessions_of_its_own(url, backend):
    """review (merge of the broker push and the one-statement heartbeat): a
    process forked with its parent's store (the broker push forgets the
    parent's threads for it) ran its writes and its heartbeats on the
    parent's pooled sockets (two processes' statements interleaved on one
    session), and closing its store ended the parent's sessions. The child
    opens sessions of its own and leaves the parent's alone."""
    import os

    pid = sa.text("SELECT pg_backend_pid()")
    with hoststate.HostStateStore(url, push=False) as store:
        lease = store.acquire_lease("forked", "node-f", "pid 1 on m1", 60)

        def sessions() -> tuple[int, int]:
            with store.db.write() as conn:
                writer = conn.execute(pid).scalar()
            return writer, store.db.single(lambda conn: conn.execute(pid).scalar())

        store.renew_lease(lease, 60)
        parent = sessions()
        ctx = multiprocessing.get_context("fork")
        answers = ctx.Queue()

        def child() -> None:
            try:
                answers.put(sessions())
                store.renew_lease(lease, 60)
                store.close()
                answers.put("closed")
            except BaseException as err:  # noqa: BLE001 - said to the parent
                answers.put(repr(err))
            finally:
                answers.close()
                answers.join_thread()  # NOTE: flushed before os._exit
                os._exit(0)

        proc = ctx.Process(target=child)
        proc.start()
        proc.join(60)
        mine = answers.get(timeout=5)
        assert answers.get(timeout=5) == "closed"
        assert not set(mine) & set(parent), (mine, parent)
        assert sessions() == parent
        assert store.renew_lease(lease, 60).epoch == lease.epoch


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_forked_childs_waiters_are_woken_by_listen_notify(url, backend):
    """review: a process forked with its parent's store on PostgreSQL kept
    the parent's LISTEN hub, whose thread is not in the child and whose
    connection is the parent's socket: a waiter's subscription in the
    child waited for that thread for ever (the agent hung). The child
    listens on a connection of its own, as with a broker."""
    import os

    from compute_plugins.hoststate import notify

    with hoststate.HostStateStore(url, safety_poll_interval=600.0) as store:
        sub = store.host_changes("parent")
        assert sub is not None
        ctx = multiprocessing.get_context("fork")
        answers = ctx.Queue()

        def child() -> None:
            try:
                mine = store.host_changes("child")
                assert mine is not None
                for _ in range(200):
                    if mine.live:
                        break
                    time.sleep(0.05)
                with store.db.write() as conn:
                    store.db.wake(conn, [notify.host_channel("child")], "x")
                answers.put(mine.wait(10.0))
            except BaseException as err:  # noqa: BLE001 - said to the parent
                answers.put(repr(err))
            finally:
                answers.close()
                answers.join_thread()  # NOTE: flushed before os._exit
                os._exit(0)

        proc = ctx.Process(target=child)
        proc.start()
        proc.join(60)
        assert answers.get(timeout=5) is True
        with store.db.write() as conn:  # the parent's listener still works
            store.db.wake(conn, [notify.host_channel("parent")], "x")
        assert sub.wait(10.0)
        sub.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_decisions_statements_are_one_round_trip_each_on_postgresql(url, backend):
    """issue 19: a decision's insert, its status swaps and the reads of
    one decision each ran in a transaction of their own (BEGIN, the
    statement, COMMIT: three round trips, the database's CPU each). Each is
    one statement on the wire now. A swap on a pooled connection the
    server closed since is sent on a fresh one (its socket says so), once:
    not answered as a conflict with itself nor as the store unavailable."""
    from compute_plugins.hoststate import DecisionStatus, protocol

    parsed = sa.engine.make_url(url)
    proxy = servers.QueryCounter(parsed.host, parsed.port)
    try:
        with hoststate.HostStateStore(proxy.url(url)) as s:
            lease = s.acquire_lease("h1", "node-a", "pid 1", 60)
            agent = s.fenced(lease)
            s.submit_decision("c0", "h1", SPEC)  # the connections opened
            proxy.queries.clear()
            first = s.submit_decision("c1", "h1", SPEC)
            assert s.get_decision(first.id).status == DecisionStatus.PENDING
            assert [d.id for d in agent.list_decisions("h1")] == [1, first.id]
            assert s.active_decision("c1").id == first.id
            assert s.latest_decision("c1").id == first.id
            assert protocol.claim(agent, first.id).status == DecisionStatus.CLAIMED
            assert len(proxy.queries) == 6, proxy.queries
            proxy.queries.clear()
            assert protocol.request_release(s, "c1").status == DecisionStatus.RELEASING
            assert len(proxy.queries) == 2, proxy.queries
            # the server closed the pooled connection (a restart, an idle
            # timeout): the release goes through on a fresh one, once
            with s.db.engine.connect() as conn:
                killed = conn.execute(sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'UPDATE hoststate_decisions%' "
                    "AND pid <> pg_backend_pid()")).scalars().all()
                conn.commit()
            assert killed == [True]
            time.sleep(0.2)  # NOTE: the server's goodbye reaches the socket
            released = protocol.release(agent, first.id)
            assert released.status == DecisionStatus.RELEASED
            assert s.get_decision(first.id).status == DecisionStatus.RELEASED
    finally:
        proxy.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("push", ["listen", "broker"])
def test_one_statement_writes_wake_the_host_on_postgresql(url, backend, push):
    """The one-statement insert and swaps still wake the host's agent: by
    their own ``RETURNING`` with ``LISTEN``/``NOTIFY`` (the host's channel
    made of the row's host by PostgreSQL: a scheduler's or a requester's
    swap; never the agent's own), through a broker after their commit."""
    from compute_plugins.hoststate import notify, protocol

    extra = {"push_transport_url": "fake://"} if push == "broker" else {}
    with hoststate.HostStateStore(url, safety_poll_interval=600.0, **extra) as s:
        host = "h\u00e9-" + "x" * 200
        lease = s.acquire_lease(host, "node-a", "pid 1", 60)
        agent = s.fenced(lease)
        sub = s.host_changes(host)
        assert sub is not None
        for _ in range(200):
            if sub.live:
                break
            time.sleep(0.05)
        sub.wait(0)
        decision = s.submit_decision("c1", host, SPEC)
        assert sub.wait(10.0)
        protocol.claim(agent, decision.id)
        assert not sub.wait(0.5)    # NOTE: the agent's own move
        protocol.request_release(s, "c1")
        assert sub.wait(10.0)
        sub.close()
        if push == "listen":
            with s.db.engine.connect() as conn:
                made = conn.execute(sa.select(notify.host_channel_of(
                    sa.literal(host, sa.String())))).scalar()
            assert made == notify.host_channel(host)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_publish_in_place_is_one_statement_compiled_once(url, backend):
    """An agent's publish after a claim or a release (its documents
    changed in place) is one statement on PostgreSQL, and its text does not
    hold the documents (array parameters): SQLAlchemy compiles it once, not
    at every publish (a VALUES list of literals did: the agents' CPU)."""
    compiled: list[int] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("WITH locked"):
            compiled.append(id(context.compiled))

    with hoststate.HostStateStore(url) as s:
        s.publish("h1", states(a=0, b=0), 0)
        for engine in s.db.engines:
            event.listen(engine, "before_cursor_execute", before)
        for n in range(1, 6):
            assert s.publish("h1", states(a=n, b=n % 2), n).written
        assert len(compiled) == 5 and len(set(compiled)) == 1, compiled
        with hoststate.HostStateStore(url) as other:
            snapshot = other.get_host("h1")
        assert snapshot.generation == 6
        assert dict(snapshot.states) == states(a=5, b=1)
        first = s.host_status_changes(None).mark
        assert s.publish("h1", states(a=6, b=1), 6).written
        assert dict(s.host_status_changes(first).generations) == {"h1": 7}
