"""Review of the one-statement store operations on PostgreSQL (issue 19):
the host channel PostgreSQL computes is Python's for any host name, and
publishes of both kinds (one statement, a transaction) racing with a
reader neither deadlock nor lose a change."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from compute_plugins import hoststate
from compute_plugins.hoststate import notify
from compute_plugins.util import pools
from tests import servers
from tests.unit.hoststate.cases import SPEC, run_threads, states

NAMES = ["h1", "H1", "h'1", 'h"1', "h\\1", "h 1;--", "\u00e9t\u00e9",
         "e\u0301", "\U0001f600-host", "\u4e2d\u6587", "x" * 255,
         "\u00e9" * 255, "tab\there", "new\nline", "%s%%", "$1"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_host_channel_made_by_postgresql_is_pythons(url, backend):
    """``notify.host_channel_of`` (sha256 in SQL, the swap's host wake-up)
    equals ``notify.host_channel`` for every name a host may have."""
    with hoststate.HostStateStore(url) as s:
        with s.db.engine.connect() as conn:
            for name in NAMES:
                made = conn.execute(sa.select(notify.host_channel_of(
                    sa.literal(name, sa.String())))).scalar()
                assert made == notify.host_channel(name), name


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_both_kinds_of_publish_and_a_reader_race_without_loss(url, backend):
    """Hosts whose providers change at every publish (a transaction: host
    row, providers, documents, then the counter) and hosts whose documents
    change in place (one statement: host row, counter, documents), each
    on a store of its own, and a reader following the change marks: no
    deadlock, no error, and the reader ends with every host's last
    generation."""
    writers, rounds = 4, 15
    stores = [hoststate.HostStateStore(url) for _ in range(writers + 1)]
    try:
        for i in range(writers):
            stores[i].publish("w%d" % i, states(a=0), 0, providers={"p-%d-0" % i: "n"})
        reader = stores[writers]
        first = reader.host_status_changes(None)
        seen = dict(first.generations)
        done = threading.Event()

        def follow() -> None:
            mark = first.mark
            while not done.is_set():
                found = reader.host_status_changes(mark)
                assert not found.full
                seen.update(found.generations)
                mark = found.mark
            seen.update(reader.host_status_changes(mark).generations)

        follower = threading.Thread(target=follow)
        follower.start()

        def publish(i: int) -> None:
            for n in range(1, rounds + 1):
                providers = ({"p-%d-%d" % (i, n): "n"} if i % 2
                             else {"p-%d-0" % i: "n"})
                stores[i].publish("w%d" % i, states(a=n), n, providers=providers)
        try:
            run_threads(publish, writers)
        finally:
            done.set()
            follower.join(60)
        assert seen == {"w%d" % i: rounds + 1 for i in range(writers)}
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_one_statement_writes_survive_connections_lost_silently(url, backend):
    """A decision's insert and its swaps ran in write transactions, whose
    pooled connection is pinged when it waited over a second
    (:func:`compute_plugins.util.pools.ping_when_idle`): one lost without
    a word (a fail-over) was replaced before the write. As single
    statements (not retried: they may have run) on a connection that is
    never pinged, such a write failed as the store unavailable, its
    outcome unknown to the scheduler."""
    from compute_plugins.hoststate import DecisionStatus, protocol

    parsed = sa.engine.make_url(url)
    proxy = servers.Relay(parsed.host, parsed.port)
    try:
        with hoststate.HostStateStore(proxy.url(url), push=False) as s:
            lease = s.acquire_lease("h1", "node-a", "pid 1", 60)
            agent = s.fenced(lease)
            first = s.submit_decision("c0", "h1", SPEC)
            proxy.drop()
            time.sleep(pools.IDLE_PING_SECONDS + 0.2)
            assert s.submit_decision("c1", "h1", SPEC).status == DecisionStatus.PENDING
            proxy.drop()
            time.sleep(pools.IDLE_PING_SECONDS + 0.2)
            assert protocol.claim(agent, first.id).status == DecisionStatus.CLAIMED
    finally:
        proxy.close()
