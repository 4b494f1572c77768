"""An agent's fenced writes on PostgreSQL, where the fence is a condition of
the write's own ``UPDATE`` (the lease row share-locked until the commit):
one of them that matches nothing (a decision withdrawn meanwhile, a
generation moved on) is refused at once while another of the agent's
writes is in flight, never waits for it nor deadlocks with it (the fence
then checked again with an exclusive lock, two such writes each waited for
the other: PostgreSQL aborted one, 154 deadlocks in 160 claims by 4
threads)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from compute_plugins import hoststate
from compute_plugins.hoststate import protocol, schema
from tests.functional.hoststate.test_store_recovery_servers import pg  # noqa: F401 - fixture
from tests.unit.hoststate.cases import SPEC, states


@pytest.fixture
def in_flight(pg):  # noqa: F811 - the fixture imported above
    """``(url, hold)``: ``hold(host)`` is a context holding the share lock
    on ``host``'s lease that each fenced write of its agent takes."""
    url, _ = pg
    other = sa.create_engine(url, poolclass=sa.pool.NullPool)

    def hold(host: str):
        conn = other.connect()
        conn.execute(sa.select(schema.leases).where(schema.leases.c.host == host)
                     .with_for_update(read=True)).all()
        return conn
    yield url, hold
    other.dispose()


def test_a_claim_of_a_withdrawn_decision_is_refused_during_another_write(in_flight):
    url, hold = in_flight
    with hoststate.HostStateStore(url, lock_timeout=2) as store:
        lease = store.acquire_lease("fl1", "node-1", "test", 60)
        decision = store.submit_decision("fl-c1", "fl1", SPEC)
        protocol.withdraw(store, decision.id)
        with hold("fl1"):
            with pytest.raises(hoststate.DecisionStatusConflict):
                protocol.claim(store.fenced(lease), decision.id)
        assert store.get_decision(decision.id).status == "released"


def test_a_publish_at_a_moved_generation_is_refused_during_another_write(in_flight):
    url, hold = in_flight
    with hoststate.HostStateStore(url, lock_timeout=2) as store, \
            hoststate.HostStateStore(url) as elsewhere:
        lease = store.acquire_lease("fl2", "node-1", "test", 60)
        agent = store.fenced(lease)
        agent.publish("fl2", states(a=1), 0)
        # NOTE: another store object (no memory of the agent's publish).
        elsewhere.publish("fl2", states(a=2), 1)
        with hold("fl2"):
            with pytest.raises(hoststate.GenerationConflict) as info:
                agent.publish("fl2", states(a=3), 1)
        assert info.value.actual == 2
        assert store.get_host("fl2").states == states(a=2)
