"""Push through a message broker (issue 19, item 1): with ``[host_state]
push_transport_url`` a store on any database (SQLite here, MariaDB and
PostgreSQL too) wakes the host's agent and the waiting scheduler through
RabbitMQ (:mod:`compute_plugins.hoststate.broker`): the session's private
RabbitMQ (:func:`tests.servers.rabbitmq`), real Placement (embedded) and
each host's real agent. ``fake://`` does the same within one process.

The agent and the scheduler each have their own store object (as two
processes would: their own engine, listener and publisher), and the
safety-net poll is 600 s wherever a test shows that a wake-up did the work.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from compute_plugins.hoststate import broker, notify
from compute_plugins.hoststate.store import HostStateStore
from tests import servers
from tests.functional.hoststate.conftest import clear_database, create_database
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import Cloud
from tests.functional.scheduler.test_push import (
    ANSWER,
    NEVER,
    heartbeat,
    run_agent,
    statements,
)
from tests.functional.scheduler.test_schedule import new_consumer, spec_of


def sqlite_url(tmp_path) -> str:
    return "sqlite:///%s" % os.path.join(str(tmp_path), "host_state.sqlite")


def open_cloud(placement, tmp_path, url: str, transport_url: str,
               safety: float = NEVER) -> tuple[Cloud, HostStateStore]:
    """A cloud whose scheduler's store and agents' store are two objects of
    the same database, both pushing through ``transport_url``."""
    cloud = Cloud(placement, str(tmp_path),
                  store=HostStateStore(url, safety_poll_interval=safety,
                                       push_transport_url=transport_url))
    agents = HostStateStore(url, safety_poll_interval=safety,
                            push_transport_url=transport_url)
    return cloud, agents


def beyond_heartbeat(seen: list[str]) -> list[str]:
    """The statements of ``seen`` that are not the lease renewal's (on
    SQLite its transaction's ``BEGIN IMMEDIATE`` too)."""
    left = []
    for index, statement in enumerate(seen):
        if heartbeat(statement):
            continue
        if statement == "BEGIN IMMEDIATE" and index + 1 < len(seen) \
                and heartbeat(seen[index + 1]):
            continue
        left.append(statement)
    return left


def wait_until(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.fixture
def rabbit(rabbitmq_server, monkeypatch):
    """The private RabbitMQ, running (a test that stopped it restarts it).

    The listeners reconnect and the publishers retry every second at most
    (rather than backing off to 30 s and 5 s): a test that stops the broker
    waits for the broker's own start, not for the back-off's next try.
    """
    monkeypatch.setattr(broker, "_RECONNECT_MAX", 1.0)
    monkeypatch.setattr(broker, "_PUBLISH_RETRY_MAX", 1.0)
    if rabbitmq_server.process is None:
        rabbitmq_server.start()
    return rabbitmq_server


def test_an_idle_agent_on_sqlite_makes_only_heartbeat_statements(placement, tmp_path,
                                                                  rabbit):
    """SQLite, wake-ups through RabbitMQ: periodics every 0.3 s, polls
    every 0.05 s, the lease renewed every second: in 4 s the idle agent
    runs only its lease renewals (before: two reads per poll, 160 in 4 s)."""
    cloud, own = open_cloud(placement, tmp_path, sqlite_url(tmp_path), rabbit.transport_url)
    try:
        host = cloud.add_host("idle", [cell(4, 4096)], start=False, store=own,
                              lease_duration=3.0)
        agent = host.agent
        halt = run_agent(agent, 0.3)
        try:
            time.sleep(1.0)
            assert agent.pushed()
            seen, forget = statements(own.engine)
            calls = agent.client.placement.calls.snapshot()
            time.sleep(4.0)
            forget()
            after = agent.client.placement.calls.snapshot()
        finally:
            halt()
        assert beyond_heartbeat(seen) == []
        assert any(s.startswith("UPDATE hoststate_leases") for s in seen)
        assert after == calls
    finally:
        cloud.close()
        own.close()


@pytest.mark.parametrize("backend", ["sqlite", "mariadb", "postgresql"])
def test_a_decision_is_answered_on_its_wakeup(placement, tmp_path, rabbit, request,
                                              backend):
    """Whatever the database, the agent reads its decisions only when woken
    (it polls every 600 s and so does the safety net): a decision is
    answered well within the answer timeout, and the scheduler learns the
    answer the same way. On PostgreSQL the broker carries the wake-ups
    instead of ``NOTIFY`` (no ``pg_notify`` is run)."""
    drop = None
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    else:
        server = request.getfixturevalue(
            "postgresql_server" if backend == "postgresql" else "mariadb_server")
        url, drop = create_database(server)
        clear_database(url)
    cloud, own = open_cloud(placement, tmp_path, url, rabbit.transport_url)
    try:
        assert own.db.push is not None and own.db.push.kind == "rabbit"
        host = cloud.add_host("push-" + backend, [cell(4, 4096)], start=False, store=own,
                              lease_duration=1800.0)
        host.agent.claim_poll_interval = NEVER
        host.start()
        assert wait_until(host.agent.pushed)
        seen, forget = statements(cloud.store.engine)
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        forget()
        assert result.placed, result.reasons
        assert [a.outcome for a in result.attempts] == ["claimed"]
        assert result.timings["claim"] < 2.0
        assert consumer in host.agent.ledger.entries()
        assert not [s for s in seen if "pg_notify" in s]
    finally:
        cloud.close()
        own.close()
        if drop is not None:
            drop()


def test_a_broker_restart_is_survived(placement, tmp_path, rabbit, caplog):
    """RabbitMQ stops with an agent and a scheduler subscribed: the
    listeners say so once each and poll meanwhile; a decision made while
    it is down is still answered (by polling); once it is back they
    reconnect, wake every waiter, and the next decision arrives by its
    wake-up again (safety net 600 s)."""
    cloud, own = open_cloud(placement, tmp_path, sqlite_url(tmp_path), rabbit.transport_url)
    try:
        host = cloud.add_host("restart", [cell(8, 8192)], start=False, store=own,
                              lease_duration=1800.0)
        host.agent.claim_poll_interval = 0.2
        host.start()
        assert wait_until(host.agent.pushed)
        listener = own.db.listener()
        assert listener is not None
        sub = own.host_changes("watched")
        assert sub is not None and sub.live
        sched = cloud.scheduler(answer_timeout=ANSWER)

        rabbit.stop()
        assert wait_until(lambda: not host.agent.pushed())
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        assert result.placed, result.reasons  # NOTE: polled: the broker is down
        assert consumer in host.agent.ledger.entries()

        sub.wait(0)
        rabbit.start()
        assert wait_until(lambda: host.agent.pushed() and sub.live, 60)
        assert sub.wait(ANSWER)  # NOTE: woken at the reconnection
        sub.close()
        host.agent.claim_poll_interval = NEVER
        time.sleep(0.5)  # the agent back in its (now long) wait
        second = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), second, "p", "u")
        assert result.placed, result.reasons
        assert result.timings["claim"] < 2.0
        assert second in host.agent.ledger.entries()
        outages = [r for r in caplog.records
                   if "cannot listen for changes on" in r.getMessage()]
        assert 1 <= len(outages) <= 2  # NOTE: once per listener (the agent's, the scheduler's)
    finally:
        if rabbit.process is None:
            rabbit.start()
        cloud.close()
        own.close()


def test_a_lost_wakeup_is_caught_by_the_safety_net(placement, tmp_path, rabbit,
                                                   monkeypatch):
    """Every wake-up lost (a writer that died after its commit, before
    publishing): the agent and the scheduler still get there by their
    safety-net reads (1 s here)."""
    cloud, own = open_cloud(placement, tmp_path, sqlite_url(tmp_path), rabbit.transport_url,
                            safety=1.0)
    try:
        host = cloud.add_host("lost", [cell(4, 4096)], store=own)
        assert wait_until(host.agent.pushed)
        monkeypatch.setattr(broker.BrokerPush, "committed", lambda self, wakeups: None)
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        assert result.placed, result.reasons
        assert consumer in host.agent.ledger.entries()
    finally:
        cloud.close()
        own.close()


def test_a_wakeup_reaches_only_its_channel_and_only_after_the_commit(tmp_path, rabbit):
    """The broker routes a host's wake-up to that host's subscriptions
    only, and a rolled-back write publishes nothing."""
    url = sqlite_url(tmp_path)
    with HostStateStore(url, safety_poll_interval=NEVER,
                        push_transport_url=rabbit.transport_url) as waiter, \
            HostStateStore(url, safety_poll_interval=NEVER,
                           push_transport_url=rabbit.transport_url) as writer:
        mine = waiter.host_changes("mine")
        other = waiter.host_changes("other")
        assert isinstance(mine, notify.Subscription) and isinstance(other, notify.Subscription)
        try:
            # NOTE: the listener's thread connects after the first
            # subscription (which polls meanwhile) and then wakes every
            # waiter once: the wake-ups it could have missed.
            assert wait_until(lambda: mine.live)
            with mine.listener._lock:  # NOTE: its wake-up of all is done
                mine.wait(0)
                other.wait(0)
            with pytest.raises(RuntimeError), writer.db.write() as conn:
                writer.db.wake(conn, [notify.host_channel("mine")], "x")
                raise RuntimeError("rolled back")
            assert not mine.wait(1.0)
            with writer.db.write() as conn:
                writer.db.wake(conn, [notify.host_channel("mine")], "x")
            assert mine.wait(ANSWER)
            assert not other.wait(0.5)
        finally:
            mine.close()
            other.close()


def test_fake_transport_pushes_within_the_process(placement, tmp_path):
    """``fake://`` (oslo.messaging's in-process driver's name): the agent
    and the scheduler of one process, on SQLite, are woken without a
    broker; the idle agent makes only heartbeat statements and the
    decision is answered on its wake-up."""
    cloud, own = open_cloud(placement, tmp_path, sqlite_url(tmp_path), "fake://")
    try:
        assert own.db.push is not None and own.db.push.kind == "fake"
        host = cloud.add_host("local", [cell(4, 4096)], start=False, store=own,
                              lease_duration=1800.0)
        host.agent.claim_poll_interval = NEVER
        host.start()
        assert wait_until(host.agent.pushed)
        seen, forget = statements(own.engine)
        time.sleep(2.0)
        forget()
        assert beyond_heartbeat(seen) == []
        sched = cloud.scheduler(answer_timeout=ANSWER)
        consumer = new_consumer()
        result = sched.schedule(spec_of(sched, {}, 1, 512), consumer, "p", "u")
        assert result.placed, result.reasons
        assert result.timings["claim"] < 2.0
        assert consumer in host.agent.ledger.entries()
    finally:
        cloud.close()
        own.close()


def test_a_wakeup_committed_while_the_broker_is_down_is_published_when_it_is_back(
        tmp_path, rabbit):
    """The writer never waits for the broker and never drops what it could
    not publish: a wake-up committed while RabbitMQ is down is published
    once it is back, and reaches a waiter that subscribed only then (a new
    listener: no wake-up at a reconnection could have woken it). The
    writer's publisher is held off (its lock) until the waiter is bound."""
    url = sqlite_url(tmp_path)
    with HostStateStore(url, safety_poll_interval=NEVER,
                        push_transport_url=rabbit.transport_url) as writer:
        push = writer.db.push
        assert isinstance(push, broker.BrokerPush)
        with writer.db.write() as conn:  # NOTE: connects the publisher
            writer.db.wake(conn, [notify.host_channel("warm")], "x")
        assert wait_until(lambda: push._control is not None)
        try:
            rabbit.stop()
            started = time.monotonic()
            with writer.db.write() as conn:
                writer.db.wake(conn, [notify.host_channel("late")], "decision")
            assert time.monotonic() - started < 1.0  # NOTE: not held up
            assert wait_until(lambda: push._down_said)
            with push._control_lock:
                rabbit.start()
                waiter = HostStateStore(url, safety_poll_interval=NEVER,
                                        push_transport_url=rabbit.transport_url)
                sub = waiter.host_changes("late")
                assert sub is not None
                # NOTE: its listener's thread connects, binds "late" and
                # wakes it once (what it could have missed): cleared, so
                # that only the publisher's wake-up is waited for below.
                assert wait_until(lambda: sub.live)
                with sub.listener._lock:  # NOTE: its wake-up of all is done
                    sub.wait(0)
                assert not sub.wait(0)
        finally:
            if rabbit.process is None:
                rabbit.start()
        try:
            assert sub.wait(ANSWER)
        finally:
            sub.close()
            waiter.close()


def test_a_forked_child_publishes_and_listens_on_its_own(tmp_path, rabbit):
    """A process forked with its parent's store (a pre-forking server, a
    benchmark's workers) gets none of the parent's threads: its wake-ups
    are still published and its waiters still woken, on connections of
    its own (before: its writes woke nobody, its publisher being the
    parent's thread, and it wrote on the parent's sockets)."""
    url = sqlite_url(tmp_path)
    with HostStateStore(url, safety_poll_interval=NEVER,
                        push_transport_url=rabbit.transport_url) as store:
        with store.db.write() as conn:  # NOTE: the parent's publisher and connection
            store.db.wake(conn, [notify.host_channel("warm")], "x")
        sub = store.host_changes("parent")
        assert sub is not None and wait_until(lambda: sub.live)
        with sub.listener._lock:
            sub.wait(0)
        ctx = multiprocessing.get_context("fork")
        answers = ctx.Queue()

        def child() -> None:
            try:
                mine = store.host_changes("child")
                live = mine is not None and wait_until(lambda: mine.live, 20)
                with store.db.write() as conn:
                    store.db.wake(conn, [notify.host_channel("parent")], "x")
                answers.put(live)
                time.sleep(1.0)  # NOTE: its publisher's time
            finally:
                os._exit(0)

        proc = ctx.Process(target=child)
        proc.start()
        proc.join(60)
        assert answers.get(timeout=5) is True
        assert sub.wait(ANSWER)
        sub.close()


def test_a_broker_that_dies_mid_run_is_left_for_the_next_one(tmp_path, rabbit, caplog):
    """Two brokers in the URL (one connection per broker tried in turn,
    not kombu's failover): the first one's connections die mid-run (a
    relay in front of the session's RabbitMQ, closed; it then refuses);
    the listener and the publisher go on with the second, the waiter is
    woken by a wake-up published after, and no message shows a password."""
    # NOTE: a relay, not a second RabbitMQ: one node's start is 15 s.
    relay = servers.Relay("127.0.0.1", rabbit.port)
    transport_url = "rabbit://guest:guest@127.0.0.1:%d,guest:guest@127.0.0.1:%d/" % (
        relay.port, rabbit.port)
    url = sqlite_url(tmp_path)
    try:
        with HostStateStore(url, safety_poll_interval=NEVER,
                            push_transport_url=transport_url) as waiter, \
                HostStateStore(url, safety_poll_interval=NEVER,
                               push_transport_url=transport_url) as writer:
            sub = waiter.host_changes("h")
            assert isinstance(sub, notify.Subscription)
            try:
                assert wait_until(lambda: sub.live)
                with sub.listener._lock:
                    sub.wait(0)
                with writer.db.write() as conn:
                    writer.db.wake(conn, [notify.host_channel("h")], "x")
                assert sub.wait(ANSWER)
                # NOTE: both went through the first broker (the relay).
                assert len(relay.connections) == 2, relay.connections
                through_relay = sub.listener._conn
                relay.close()
                # NOTE: reconnected at once (the relay refuses): live may
                # never be seen False.
                assert wait_until(lambda: sub.live and sub.listener._conn is not through_relay)
                with sub.listener._lock:  # NOTE: its wake-up of all is done
                    sub.wait(0)
                with writer.db.write() as conn:
                    writer.db.wake(conn, [notify.host_channel("h")], "x")
                assert sub.wait(ANSWER)
            finally:
                sub.close()
    finally:
        relay.close()
    assert "guest:guest" not in caplog.text


def listening(sub: notify.Subscription) -> None:
    """Wait until ``sub``'s listener is connected, and take the wake-up of
    every waiter it makes then."""
    assert wait_until(lambda: sub.live)
    with sub.listener._lock:  # NOTE: its wake-up of all is done
        sub.wait(0)


def wake(store: HostStateStore, host: str) -> None:
    """Commit a wake-up of ``host``'s channel through ``store``."""
    with store.db.write() as conn:
        store.db.wake(conn, [notify.host_channel(host)], "x")


class DownBroker:
    """A broker's port with nothing behind it that answers: it accepts a
    connection and closes it at once (a load balancer without a node);
    counts the connections it got."""

    def __init__(self) -> None:
        import socket
        import threading

        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            client.close()

    def close(self) -> None:
        self._listener.close()


def test_after_a_failover_new_connections_start_with_the_broker_that_answered(
        tmp_path, rabbit):
    """Two brokers in the URL, the first down. The publisher's connection
    (the start's check) tries it, then reaches the second; the listener's
    connection, made after, starts with the second (oslo.messaging's
    ``kombu_failover_strategy`` default, round-robin), not with the
    URL's first again (each new connection tried the down broker first)."""
    down = DownBroker()
    transport_url = "rabbit://guest:guest@127.0.0.1:%d,guest:guest@127.0.0.1:%d/" % (
        down.port, rabbit.port)
    url = sqlite_url(tmp_path)
    try:
        with HostStateStore(url, safety_poll_interval=NEVER,
                            push_transport_url=transport_url) as store:
            push = store.db.push
            assert isinstance(push, broker.BrokerPush)
            push.verify()
            tried = down.accepted
            assert tried >= 1
            sub = store.host_changes("h")
            assert isinstance(sub, notify.Subscription)
            try:
                listening(sub)
                wake(store, "h")
                assert sub.wait(ANSWER)
                assert down.accepted == tried, "the listener tried the down broker first"
            finally:
                sub.close()
    finally:
        down.close()


@contextlib.contextmanager
def stalled_publisher(tmp_path: Any, rabbit: Any, port: int, query: str,
                      beat: broker.Heartbeat) -> Iterator[tuple[HostStateStore, Any, Any]]:
    """A store publishing through a relay to ``port`` (``query``: the URL's,
    TLS's options) with heartbeats ``beat``, and a waiter's subscription to
    host ``h`` (directly on the broker), listening; the relay then stops
    forwarding the connections it holds (a NAT or a firewall that forgot
    them: nothing arrives, nothing is refused), new ones go through.
    Yields the publishing store, the subscription and the store's push."""
    relay = servers.Relay("127.0.0.1", port, receive_buffer=4096)
    through = "rabbit://guest:guest@127.0.0.1:%d/%s" % (relay.port, query)
    url = sqlite_url(tmp_path)
    try:
        with HostStateStore(url, safety_poll_interval=NEVER,
                            push_transport_url=rabbit.transport_url) as waiter, \
                HostStateStore(url, safety_poll_interval=NEVER, push_transport_url=through,
                               push_heartbeat=beat) as writer:
            push = writer.db.push
            assert isinstance(push, broker.BrokerPush)
            push.verify()
            assert push._control is not None
            sub = waiter.host_changes("h")
            assert isinstance(sub, notify.Subscription)
            try:
                listening(sub)
                relay.stall_existing()
                yield writer, sub, push
            finally:
                sub.close()
    finally:
        relay.close()


def test_a_publishing_connection_dropped_without_a_word_is_noticed_by_heartbeat(
        tmp_path, rabbit, caplog):
    """The publisher's connection goes through a relay that stops
    forwarding it without closing it (a NAT or a firewall that forgot it:
    nothing arrives, nothing is refused); new connections go through. With
    heartbeats of 2 s (``[host_state] push_heartbeat_timeout_threshold``,
    oslo.messaging's meaning), the idle publisher notices within twice
    that (py-amqp's rule) and drops the connection, so the next wake-up is
    published on a new connection at once and reaches the waiter, instead
    of after the publish's read timeout on the dead one (10 s). Without a
    heartbeat on the publishing connection it was never noticed idle."""
    beat = broker.Heartbeat(timeout_threshold=2, rate=3)
    with stalled_publisher(tmp_path, rabbit, rabbit.port, "", beat) as (writer, sub, push):
        stalled = time.monotonic()
        assert wait_until(lambda: push._control is None, 30)
        noticed = time.monotonic() - stalled
        # NOTE: twice the threshold, a check's interval (0.33 s) and
        # a loaded machine's margin.
        assert noticed < 2 * beat.timeout_threshold + 2, noticed
        # NOTE: said right after the drop.
        assert wait_until(lambda: "its heartbeats stopped" in caplog.text, 5), caplog.text
        wake(writer, "h")
        assert sub.wait(broker.IO_TIMEOUT / 2)
