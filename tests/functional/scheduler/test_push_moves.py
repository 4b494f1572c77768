"""The re-keys of moves reach a pushed-to agent's ledger at once: where the
store pushes, the agent woken by a hand-over's or a revert's wake-up
follows it on that wake-up (:meth:`~compute_plugins.compute.agent.
ComputeAgent.poll`), not at its safety-net read. The store here pushes in
this process (``fake://``) with a safety net far beyond the test's wait, so
only the wake-up can bring the re-key."""

from __future__ import annotations

import os

import pytest

from compute_plugins.hoststate.records import MoveStatus
from compute_plugins.hoststate.store import HostStateStore
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import PUSH_TRANSPORT_URL, Cloud
from tests.functional.scheduler.moving import (
    check_invariants,
    ledger_keys,
    mover,
    wait_until,
)
from tests.functional.scheduler.test_schedule import new_consumer, pinned, spec_of

#: The safety net: no full read by an agent during the test.
NEVER = 600.0


@pytest.fixture
def cloud(placement, tmp_path):
    url = "sqlite:///%s" % os.path.join(str(tmp_path), "host_state.sqlite")
    cloud = Cloud(placement, str(tmp_path), store=HostStateStore(
        url, push_transport_url=PUSH_TRANSPORT_URL, safety_poll_interval=NEVER))
    yield cloud
    cloud.close()


def test_a_hand_over_and_its_revert_reach_the_source_ledger_on_their_wake_up(cloud):
    a = cloud.add_host("a", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("b", [cell(4, 4096)], dedicated="0-3")
    assert a.agent.pushed() and b.agent.pushed()
    sched, mv = cloud.scheduler(), mover(cloud)
    consumer = new_consumer()
    placed = sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), consumer, "p", "u")
    assert placed.placed, placed.reasons
    source = cloud.hosts[placed.host]

    moved = mv.migrate(consumer)
    assert moved.moved and moved.move.status == MoveStatus.TO_CONFIRM
    # no periodic run here: the source's agent follows the hand-over's
    # re-key on its wake-up, its next periodic finds the ledger right
    wait_until(lambda: ledger_keys(source) == {moved.move.migration},
               "the source's ledger names the migration consumer")
    assert source.agent.run_once().ok
    assert ledger_keys(source) == {moved.move.migration}
    check_invariants(cloud)

    done = mv.revert(consumer, timeout=10)
    assert done.done and done.move.status == MoveStatus.REVERTED
    wait_until(lambda: ledger_keys(source) == {consumer},
               "the source's ledger names the instance again")
    check_invariants(cloud)
