"""Push, not poll (issue 19, item 1): on PostgreSQL, decisions reach the
host's agent and answers reach the scheduler by ``LISTEN``/``NOTIFY``
(:mod:`compute_plugins.hoststate.notify`), against real Placement
(embedded), the session's private PostgreSQL and each host's real agent.

The safety-net poll is set to 600 s wherever a test shows that something
arrived by its notification: without one, nothing would read the store
for ten minutes, far beyond the answer timeout."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Optional

import pytest
import sqlalchemy as sa

from compute_plugins.hoststate import notify
from compute_plugins.hoststate.store import HostStateStore
from tests.functional.hoststate.conftest import clear_database, create_database
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import Cloud
from tests.functional.scheduler.test_host_disable import TRAIT, root_traits
from tests.functional.scheduler.test_schedule import new_consumer, spec_of

#: The safety net where a test shows that a notification did the work.
NEVER = 600.0
#: Seconds the scheduler waits for an answer: far below NEVER.
ANSWER = 10.0


@pytest.fixture(scope="module")
def pg_url(postgresql_server):
    url, drop = create_database(postgresql_server)
    yield url
    drop()


@pytest.fixture
def url(pg_url):
    clear_database(pg_url)
    return pg_url


@pytest.fixture
def cloud(placement, tmp_path, url):
    cloud = Cloud(placement, str(tmp_path),
                  store=HostStateStore(url, safety_poll_interval=NEVER))
    yield cloud
    cloud.close()


def statements(engine):
    """The SQL statements run on ``engine`` from now on (a list that
    fills), and the function that stops recording."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", record)
    return seen, lambda: sa.event.remove(engine, "before_cursor_execute", record)


def heartbeat(statement: str) -> bool:
    """Whether ``statement`` is one of the lease renewal's (its row, read
    for update and updated; the server's clock)."""
    return "hoststate_leases" in statement or "clock_timestamp()" in statement


def run_agent(agent, interval: float):
    """Run ``agent`` in a thread with periodics every ``interval``
    seconds; returns the function that stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop, interval), daemon=True)
    thread.start()

    def halt():
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
    return halt


def test_an_idle_agent_makes_only_heartbeat_statements(cloud, url):
    """Periodics every 0.3 s, polls every 0.05 s, the lease renewed every
    second: in 4 s an idle agent runs only its lease renewals on the
    store, calls Placement not at all, and holds no connection checked
    out (one pooled, for its lease renewal, besides the listening one).
    (Before push: two reads per poll, and each periodic's reads of its
    decisions, its claims, its disabled record and the store's id.)"""
    own = HostStateStore(url, safety_poll_interval=NEVER)
    try:
        host = cloud.add_host("idle", [cell(4, 4096)], start=False, store=own,
                              lease_duration=3.0)
        agent = host.agent
        halt = run_agent(agent, 0.3)
        try:
            time.sleep(1.0)  # its first periodic, subscribed
            assert agent.pushed()
            seen, forget = statements(own.engine)
            # NOTE: the renewal runs on its own connections (one statement)
            beats, forget_beats = statements(own.db.single_engine)
            calls = agent.client.placement.calls.snapshot()
            time.sleep(4.0)
            forget()
            forget_beats()
            after = agent.client.placement.calls.snapshot()
        finally:
            halt()
        assert [s for s in seen + beats if not heartbeat(s)] == []
        assert seen == []  # nothing but the renewals, on their own connection
        assert beats and all(s.startswith("UPDATE hoststate_leases") for s in beats)
        assert after == calls
        # NOTE: besides its listening connection, at most the one its
        # lease renewal uses stays pooled (and one its periodic used); none
        # is held.
        assert own.engine.pool.checkedout() == 0
        assert own.db.single_engine.pool.checkedout() == 0
        assert own.engine.pool.checkedin() <= 1
        assert own.db.single_engine.pool.checkedin() <= 1
    finally:
        own.close()


def test_a_decision_is_answered_on_its_notification(cloud):
    """The agent reads its decisions only when told (safety net 600 s,
    polls every 600 s where nothing is pushed): a decision is answered
    well within the answer timeout (10 s), and the scheduler learns the
    answer the same way."""
    host = cloud.add_host("push", [cell(4, 4096)], start=False, lease_duration=1800.0)
    host.agent.claim_poll_interval = NEVER
    host.start()
    time.sleep(0.3)  # the agent idles: subscribed, nothing read
    assert host.agent.pushed()
    sched = cloud.scheduler(answer_timeout=ANSWER)
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
    assert result.placed, result.reasons
    assert result.host == host.name
    assert [a.outcome for a in result.attempts] == ["claimed"]
    assert result.timings["claim"] < ANSWER
    assert consumer in host.agent.ledger.entries()


def test_an_agent_served_by_a_shared_thread_is_polled_only_when_woken_or_due(cloud):
    """Many agents on a few threads (``bench.scale``'s 10,000 hosts): an
    idle agent has nothing to do before its lease renewal
    (``due_at``), and it calls back when a decision for its host is
    pushed, so that the thread that serves it polls it then; the
    decision is answered from that poll alone."""
    host = cloud.add_host("shared", [cell(4, 4096)], start=False, lease_duration=120.0)
    agent = host.agent
    assert agent.pushed()
    assert agent.due_at() > time.monotonic() + 20  # the renewal, 40 s after the last
    woken: queue.SimpleQueue[str] = queue.SimpleQueue()
    agent.on_wake(lambda: woken.put(agent.host))
    polls: list[Any] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                woken.get(timeout=0.1)
            except queue.Empty:
                continue
            polls.append(agent.poll())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
    finally:
        stop.set()
        thread.join(10)
    assert result.placed, result.reasons
    assert [a.outcome for a in result.attempts] == ["claimed"]
    assert [c.consumer for p in polls for c in p.claimed] == [consumer]


def test_a_release_reaches_the_agent_by_its_notification(cloud):
    host = cloud.add_host("rel", [cell(4, 4096)])
    sched = cloud.scheduler(answer_timeout=ANSWER)
    consumer = new_consumer()
    assert sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u").placed
    outcome = sched.release(consumer, timeout=ANSWER)
    assert outcome.outcome == "released", outcome
    assert consumer not in host.agent.ledger.entries()


def test_a_lost_notification_is_caught_by_the_safety_net(placement, tmp_path, url,
                                                         monkeypatch):
    """Every notification lost (none sent): the agent and the scheduler
    still get there, by their safety-net reads (1 s here)."""
    cloud = Cloud(placement, str(tmp_path),
                  store=HostStateStore(url, safety_poll_interval=1.0))
    try:
        host = cloud.add_host("lost", [cell(4, 4096)])
        time.sleep(0.3)
        assert host.agent.pushed()
        monkeypatch.setattr(notify, "send", lambda conn, channels, payload: None)
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        assert result.placed, result.reasons
        assert consumer in host.agent.ledger.entries()
    finally:
        cloud.close()


def _listening_pid(listener: Any) -> Optional[int]:
    """The server pid of the listener's connection; None while it is closed
    (killed, and the listener thread has not noticed yet)."""
    conn = listener._conn
    if conn is None or conn.closed:
        return None
    return int(conn.get_backend_pid())


def _listening(cloud: Cloud) -> tuple[Any, Optional[int]]:
    """The store's listener, connected (its agent subscribed), and the
    server pid of its connection."""
    time.sleep(0.3)
    listener = cloud.store.db.listener()
    assert listener is not None and listener.connected
    return listener, _listening_pid(listener)


def _terminate(url: str, pid: Optional[int]) -> None:
    """Kill the server process ``pid`` (a server restart, a proxy's timeout)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        engine.dispose()


def _gone(engine: Any, pid: Optional[int]) -> None:
    """Wait until the server process ``pid`` ended."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with engine.begin() as conn:
            if not conn.execute(sa.text("SELECT 1 FROM pg_stat_activity WHERE pid = :pid"),
                                {"pid": pid}).first():
                return
        time.sleep(0.05)
    raise AssertionError("server process %s still running" % pid)


def test_a_listener_that_lost_its_connection_reconnects_and_reads(cloud, url):
    """The agent's listening connection is killed (a server restart, a
    proxy's timeout): it reconnects, and the next decision still arrives
    by notification (safety net 600 s)."""
    host = cloud.add_host("cut", [cell(4, 4096)])
    listener, pid = _listening(cloud)
    _terminate(url, pid)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
            not listener.connected or _listening_pid(listener) in (None, pid)):
        time.sleep(0.05)
    assert listener.connected and _listening_pid(listener) not in (None, pid)
    sched = cloud.scheduler(answer_timeout=ANSWER)
    result = sched.schedule(spec_of(sched, {}, 1, 512), new_consumer(), "p", "u")
    assert result.placed and result.host == host.name, result.reasons


def test_the_disabled_record_arrives_by_notification(cloud):
    """An idle agent reads its disabled record only when told: disabling
    the host wakes it, and its next periodic sets the trait."""
    host = cloud.add_host("dis", [cell(4, 4096)])
    host.stop()
    agent = host.agent
    agent.run_once()  # a quiet periodic: nothing to read
    cloud.store.disable_host(host.name, "maintenance", "test")
    deadline = time.monotonic() + ANSWER
    while not agent.wait_for_work(0.1) and time.monotonic() < deadline:
        pass
    result = agent.run_once()
    assert result.ok, result.to_dict()
    assert TRAIT in root_traits(cloud, host)
    cloud.store.enable_host(host.name)
    while not agent.wait_for_work(0.1) and time.monotonic() < deadline:
        pass
    assert agent.run_once().ok
    assert TRAIT not in root_traits(cloud, host)


def test_a_host_that_goes_down_while_the_scheduler_waits_is_given_up(cloud):
    """A lease that lapses writes nothing to notify: the waiting scheduler
    reads again when the lease it read would expire, and gives the host up
    then (safety net 600 s, answer timeout 60 s), trying the next one."""
    dead = cloud.add_host("dying", [cell(8, 8192)], lease_duration=2.0)
    live = cloud.add_host("other", [cell(4, 4096)])
    sched = cloud.scheduler()
    spec = spec_of(sched, {}, 2, 1024)
    assert sched.plan(spec).ordered[0][1].host == dead.name
    dead.stop()
    result = sched.schedule(spec, new_consumer(), "p", "u", timeout=60)
    assert [(t.host, t.outcome) for t in result.attempts] == [
        (dead.name, "down"), (live.name, "claimed")]


def test_a_recreated_store_gets_the_agents_state_and_claims_at_its_next_periodic(
        cloud, url):
    """The store is emptied (recreated, restored from nothing) under an idle
    agent: nothing is notified, and its lease taken again has the same
    epoch (1, as in the first store). Its next periodic still reads the
    store in full: the host's state and its claims are back at once, not
    after the safety net (600 s)."""
    host = cloud.add_host("again", [cell(4, 4096)], lease_duration=3.0)
    sched = cloud.scheduler(answer_timeout=ANSWER)
    consumer = new_consumer()
    assert sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u").placed
    host.stop()
    agent = host.agent
    assert agent.run_once().ok
    clear_database(url)
    time.sleep(1.1)  # the lease renewal is due: the store holds none
    agent.run_once()
    assert cloud.store.get_host(host.name) is not None
    active = cloud.store.active_decision(consumer)
    assert active is not None and active.host == host.name


def test_subscribing_while_the_listening_connection_is_broken_polls_meanwhile(cloud, url):
    """The listening connection died and the listener's thread has not
    noticed yet (a server restart, a network cut): a waiter that subscribes
    or stops listening then gets no driver error; it polls until the
    listener reconnected, and is woken by the channel's notifications
    after."""
    cloud.add_host("broken", [cell(4, 4096)])
    listener, pid = _listening(cloud)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with listener._lock:  # NOTE: its thread cannot notice meanwhile
            _terminate(url, pid)
            _gone(engine, pid)
            sub = cloud.store.host_changes("elsewhere")
            assert sub is not None and not sub.live
            cloud.store.host_changes("broken-too").close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not sub.live:
            time.sleep(0.05)
        assert sub.live
        sub.wait(0)
        with engine.begin() as conn:
            notify.send(conn, [notify.host_channel("elsewhere")], "x")
        assert sub.wait(ANSWER)
        sub.close()
    finally:
        engine.dispose()


def test_a_closed_store_opens_no_listener_again(url):
    """A waiter still running when its store is closed (a process stopping)
    polls: it starts no new listening thread nor connection that nothing
    would close."""
    store = HostStateStore(url, safety_poll_interval=NEVER)
    store.host_changes("h").close()
    store.close()
    before = {t.ident for t in threading.enumerate() if t.name == "hoststate-listener"}
    assert store.host_changes("h") is None
    assert store.db.listener() is None
    after = {t.ident for t in threading.enumerate() if t.name == "hoststate-listener"}
    assert after <= before


def test_a_subscriptions_hook_runs_when_its_host_is_notified(url):
    """A process that runs many agents on a few threads (``bench.scale``)
    learns which one a pushed change is for (``Subscription.on_wake``),
    and the subscription's own wait sees it too."""
    with HostStateStore(url, safety_poll_interval=NEVER) as store:
        sub = store.host_changes("hooked")
        other = store.host_changes("not-hooked")
        assert isinstance(sub, notify.Subscription)
        assert isinstance(other, notify.Subscription)
        rung = threading.Event()
        sub.on_wake(rung.set)
        try:
            with store.db.engine.begin() as conn:
                notify.send(conn, [notify.host_channel("hooked")], "decision")
            assert rung.wait(ANSWER)
            assert sub.wait(0)
            assert not other.wait(0)
        finally:
            sub.close()
            other.close()
