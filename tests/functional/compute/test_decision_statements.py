"""What one decision costs the host-state store, end to end, pinned
(issue 19: 32.6 store statements a decision at 1,000 hosts, ~18 ms of the
database's CPU each; every round trip is the database's CPU and a wait).

A real agent (the numa plugin on ``numa4``, its ledger, its lease) and a
scheduler's side (the spec fitted on the published state, the allocation
PUT to an embedded Placement, the decision submitted, the answer awaited
as :func:`~compute_plugins.hoststate.protocol.offer` does), each on its
own store object as in their own processes:

- PostgreSQL (push by ``LISTEN``/``NOTIFY``): every query each side sends
  on the wire (:class:`tests.servers.QueryCounter`: the pool's ping, the
  isolation level set and reset, ``BEGIN`` and ``COMMIT`` included);
- SQLite (polling): every statement each side's engines run.

A boot: submit; the agent woken reads its work, verifies, records the
claim in its ledger, publishes its new state and answers; the scheduler
reads once subscribed and once woken. A delete: the requester's release
request, the agent's release (Placement, ledger, publish, answer). The
counts are pinned: a change that adds a statement fails here first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from compute_plugins.hoststate import DecisionStatus, HostStateStore, protocol
from compute_plugins.hoststate.records import HostDecision
from compute_plugins.util import pools
from tests import servers
from tests.functional.compute.test_agent import Host
from tests.functional.hoststate.conftest import create_database

#: PostgreSQL: the queries each side sends for one boot and one delete.
#: Before (9477adc): boot 23 + 32, delete 12 + 32 (every transaction
#: pinged, its isolation level set and reset; the fence, the decision read
#: back and the notification each a statement; the agent's two reads of
#: its work, and a read of its rows before each publish). The agent's
#: publish takes the store's next change number as its last statement
#: (:mod:`compute_plugins.hoststate.changes`: one UPDATE ... RETURNING).
#: Before (6624241): boot 11 + 11, delete 7 + 11 (the decision's insert,
#: its swaps and the reads of decisions each a transaction: BEGIN and
#: COMMIT around one statement; a requester's swap woke the host by a
#: SELECT pg_notify of its own; the agent's publish BEGIN, the bump, the
#: documents, the change number and COMMIT). Each is one statement now.
PG_BOOT = {"scheduler": 5, "agent": 3}
PG_DELETE = {"requester": 2, "agent": 3}
#: SQLite: the statements each side runs (BEGIN and COMMIT are statements
#: there too: the store sends its own BEGIN). Before: boot 6 + 21, delete
#: 7 + 21. The publish's change number: an UPDATE and a read of it.
SQLITE_BOOT = {"scheduler": 6, "agent": 12}
SQLITE_DELETE = {"requester": 6, "agent": 12}


@pytest.fixture(scope="module")
def placement():
    from compute_plugins.placement import embedded

    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield emb
    emb.close()


def _statements(store: HostStateStore) -> list[str]:
    """Every statement ``store``'s engines run from now on."""
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        seen.append(" ".join(statement.split()))

    for engine in store.db.engines:
        sa.event.listen(engine, "before_cursor_execute", before)
    # NOTE: the COMMIT of SQLite's transactions is the driver's own.
    for engine in store.db.engines:
        sa.event.listen(engine, "commit", lambda conn: seen.append("COMMIT"))
    return seen


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _one_decision(host: Host, scheduler: HostStateStore, requester: HostStateStore,
                  seen: dict[str, list[str]], pushes: bool) -> dict[str, Any]:
    """One boot and one delete; the queries of each side during each."""
    agent = host.agent
    for record in seen.values():
        record.clear()
    # the scheduler: fit, PUT the allocation, submit (Host.decide_on)
    host.store = scheduler
    snapshot = scheduler.get_host(host.name)
    assert snapshot is not None
    seen["scheduler"].clear()
    consumer = host.decide_on(snapshot)
    # NOTE: offer() waits on the decision it submitted, not read again:
    # this read is the test's, not counted.
    submit_queries = len(seen["scheduler"])
    submitted = scheduler.active_decision(consumer)
    assert submitted is not None and submitted.status == DecisionStatus.PENDING
    del seen["scheduler"][submit_queries:]
    answered: list[HostDecision] = []
    waiter = threading.Thread(target=lambda: answered.append(protocol.wait_for_answer(
        scheduler, consumer, 10, until_host_down=True, decision=submitted)))
    before_wait = len(seen["scheduler"])
    if pushes:
        waiter.start()
        # NOTE: the waiter subscribed (LISTEN) and read once before the
        # agent answers, and reads once more when woken
        _wait_until(lambda: any(q.startswith("SELECT ") for q in seen["scheduler"][
            before_wait:]))
        assert agent.wait_for_work(10)
    (claim,) = agent.poll().claims
    assert claim.claimed, claim.reasons
    if not pushes:
        # NOTE: polling, the waiter reads every 50 ms and more: how many
        # times depends on the clock; one read once the agent answered.
        waiter.start()
    waiter.join(15)
    assert answered and answered[0].status == DecisionStatus.CLAIMED
    boot = {"scheduler": len(seen["scheduler"]), "agent": len(seen["agent"])}
    text = {side: list(queries) for side, queries in seen.items()}
    for record in seen.values():
        record.clear()
    # the delete: a requester asks, the agent frees
    requested = protocol.request_release(requester, consumer)
    assert requested is not None and requested.status == DecisionStatus.RELEASING
    if pushes:
        assert agent.wait_for_work(10)
    (freed,) = agent.poll().releases
    assert freed.ledger and freed.allocations_deleted
    delete = {"requester": len(seen["requester"]), "agent": len(seen["agent"])}
    return {"boot": boot, "delete": delete, "boot_queries": text,
            "delete_queries": {side: list(q) for side, q in seen.items()}}


@pytest.fixture
def pg_url(postgresql_server) -> Iterator[str]:
    url, drop = create_database(postgresql_server)
    yield url
    drop()


@pytest.fixture(autouse=True)
def _busy(monkeypatch):
    """Connections used within the hour are not pinged (as on a busy
    store: every connection used within a second); an idle one is
    (:func:`compute_plugins.util.pools.ping_when_idle`)."""
    monkeypatch.setattr(pools, "IDLE_PING_SECONDS", 3600.0)


def test_one_decision_on_postgresql(tmp_path, placement, pg_url):
    parsed = sa.engine.make_url(pg_url)
    proxies = {side: servers.QueryCounter(parsed.host, parsed.port)
               for side in ("scheduler", "agent", "requester")}
    stores = {side: HostStateStore(proxy.url(pg_url)) for side, proxy in proxies.items()}
    host = Host(tmp_path, placement, store_url=proxies["agent"].url(pg_url))
    try:
        host.agent.run_once()
        seen = {side: proxy.queries for side, proxy in proxies.items()}
        # NOTE: a first decision opens the connections and sets them up.
        _one_decision(host, stores["scheduler"], stores["requester"], seen, pushes=True)
        found = _one_decision(host, stores["scheduler"], stores["requester"], seen,
                              pushes=True)
        assert found["boot"] == PG_BOOT, found["boot_queries"]
        assert found["delete"] == PG_DELETE, found["delete_queries"]
        # nothing pinged nor set around a transaction (used just now)
        every = [q for side in ("boot_queries", "delete_queries")
                 for queries in found[side].values() for q in queries]
        assert not [q for q in every if q == "SELECT 1" or q.startswith("SET ")], every
    finally:
        for store in stores.values():
            store.close()
        host.agent.end_lease()
        host.agent.store.close()
        for proxy in proxies.values():
            proxy.close()


def test_one_decision_on_sqlite(tmp_path, placement):
    url = "sqlite:///%s" % (tmp_path / "store.sqlite")
    stores = {side: HostStateStore(url) for side in ("scheduler", "requester")}
    host = Host(tmp_path, placement, store_url=url)
    try:
        host.agent.run_once()
        seen = {"scheduler": _statements(stores["scheduler"]),
                "requester": _statements(stores["requester"]),
                "agent": _statements(host.agent.store)}
        _one_decision(host, stores["scheduler"], stores["requester"], seen, pushes=False)
        found = _one_decision(host, stores["scheduler"], stores["requester"], seen,
                              pushes=False)
        assert found["boot"] == SQLITE_BOOT, found["boot_queries"]
        assert found["delete"] == SQLITE_DELETE, found["delete_queries"]
    finally:
        for store in stores.values():
            store.close()
        host.agent.store.close()


#: PostgreSQL: the queries of a scheduler's reads before its offer (the
#: consumer's decisions; its plan's changes since its mark, disabled hosts
#: and the rows of the hosts it fits). Before: 2 + 3 + 3 + 5 (two reads of
#: the consumer's decisions; each other read a transaction, BEGIN and
#: COMMIT around its statements; the hosts' rows, states and providers
#: three statements).
PG_PLAN_READS = 4


def test_a_schedulers_reads_on_postgresql(pg_url):
    parsed = sa.engine.make_url(pg_url)
    proxy = servers.QueryCounter(parsed.host, parsed.port)
    store = HostStateStore(proxy.url(pg_url))
    try:
        store.publish("h1", {}, 0, nodename="n1", providers={"u1": "n1"})
        consumer = "3c7a8b6e-0000-4000-8000-000000000001"
        store.submit_decision(consumer, "h1", "{}")

        def reads() -> None:
            active, latest = protocol.in_force_and_latest(store, consumer)
            assert active is not None and active == latest
            mark = store.host_status_changes(None).mark
            store.host_status_changes(mark)
            store.disabled_hosts()
            assert store.get_hosts(["h1"])["h1"].providers == {"u1": "n1"}

        reads()  # NOTE: opens the connections
        proxy.queries.clear()
        reads()
        # NOTE: the first read of the changes is the test's (its mark).
        assert len(proxy.queries) == PG_PLAN_READS + 1, proxy.queries
    finally:
        store.close()
        proxy.close()
