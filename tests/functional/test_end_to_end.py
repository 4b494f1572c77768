"""The scheduler decides, the compute executes: one system, end to end.

Real parts only: one embedded Placement per module, an SQLite host-state
store per test, and for every host a real
:class:`~compute_plugins.compute.agent.ComputeAgent` built as
``compute-plugins report`` builds it, running in a thread, with its claims
ledger in the host's own state directory
(:mod:`tests.functional.scheduler.cloud`). After every step the test
checks what must always hold: each provider's usage in Placement equals
what the assignments in the agents' ledgers take.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.compute.claims import RECORDED_EARLIER
from compute_plugins.hoststate import DecisionStatus, protocol
from compute_plugins.placement import embedded
from tests.functional.request.hosts import Placement, cell
from tests.functional.scheduler.cloud import (
    Cloud,
    FirstPutRaces,
    Host,
    expected_allocation,
)
from tests.unit.request.conftest import build

#: 2 dedicated CPUs on one guest node.
TWO_PINNED = ({"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1"}, 2, 1024)


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield Placement(emb)
    emb.close()


@pytest.fixture
def cloud(placement, tmp_path):
    cloud = Cloud(placement, str(tmp_path))
    yield cloud
    cloud.close()


def consumer() -> str:
    return str(uuid.uuid4())


def schedule(sched, request=TWO_PINNED, who=None, **kw):
    extra_specs, vcpus, memory_mb = request
    spec = build(sched.plugins, extra_specs, vcpus=vcpus, memory_mb=memory_mb, **kw)
    return sched.schedule(spec, who or consumer(), "project", "user")


def pinned_cpus(decision) -> set[int]:
    return {cpu for part in decision.assignments["numa"].cells
            for cpu in part.pinning.values()}


def published_pinned(cloud: Cloud, host: Host) -> set[int]:
    """The CPUs the host's last PUBLISHED numa state (what every scheduler
    reads) says are pinned."""
    snapshot = cloud.store.get_host(host.name)
    assert snapshot is not None, "the agent never published"
    state = host.manager.plugins.decode_state("numa", snapshot.states["numa"])
    return {cpu for c in state.cells for cpu in c.pinned}


def consistent(cloud: Cloud) -> None:
    """Placement's usage of every provider == the sum of the ledgers'
    assignments, host by host."""
    for host in cloud.hosts.values():
        assert cloud.usage(host) == cloud.ledger_usage(host), host.name


def test_claim_is_published_and_the_next_schedule_sees_it(cloud):
    host = cloud.add_host("one", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    generation = cloud.store.get_host(host.name).generation
    assert published_pinned(cloud, host) == set()

    first = schedule(sched)
    assert first.placed and first.host == host.name, first.reasons
    # the agent claimed it: in its ledger, in its next published state
    assert list(host.agent.ledger.entries()) == [first.consumer]
    assert cloud.store.active_decision(first.consumer).status == DecisionStatus.CLAIMED
    assert cloud.store.get_host(host.name).generation > generation
    assert published_pinned(cloud, host) == pinned_cpus(first.decision)
    consistent(cloud)

    second = schedule(sched)
    assert second.placed and second.host == host.name
    assert pinned_cpus(first.decision).isdisjoint(pinned_cpus(second.decision))
    assert published_pinned(cloud, host) == {0, 1, 2, 3}
    consistent(cloud)

    # full: refused, with the plugin's reason per host. The scheduler's view
    # kept Placement's answer (the host, a candidate then) and the fit on
    # the host's published state -- its CPUs all pinned -- refuses it: the
    # view re-asks Placement only for hosts its answer left out.
    third = schedule(sched)
    assert not third.placed and third.candidates == 1
    [why] = third.reasons
    assert why.host == host.name and {r.plugin for r in why.reasons} == {"numa"}
    assert cloud.store.active_decision(third.consumer) is None
    consistent(cloud)


def test_stale_decision_on_the_only_host_is_rejected_then_placed_on_fresh_state(cloud):
    host = cloud.add_host("only", [cell(4, 4096)], dedicated="0-3")
    other = cloud.scheduler()
    landed = {}

    def another_claim_lands_first():
        landed["result"] = schedule(other)

    sched = cloud.scheduler()
    sched.placement = FirstPutRaces(sched.placement, another_claim_lands_first)
    result = schedule(sched)
    # this scheduler fitted CPUs 0-1 on the state it read; the other claim
    # took them first (Placement still had room for 2 PCPU): the agent
    # rejected the stale decision, the scheduler freed its allocation,
    # planned again on the state the agent published since, and placed it
    # on the CPUs left.
    assert landed["result"].placed
    assert [(a.host, a.outcome) for a in result.attempts] == [
        (host.name, "rejected"), (host.name, "claimed")]
    [reason] = result.attempts[0].reasons
    assert reason.plugin == "numa"
    assert pinned_cpus(landed["result"].decision) == {0, 1}
    assert pinned_cpus(result.decision) == {2, 3}
    decisions = cloud.store.list_decisions(host.name, DecisionStatus.REJECTED)
    assert [(d.consumer, d.reasons[0].plugin) for d in decisions] == [
        (result.consumer, "numa")]
    assert sorted(host.agent.ledger.entries()) == sorted(
        [landed["result"].consumer, result.consumer])
    consistent(cloud)


def test_restarted_agent_keeps_its_claims(cloud):
    host = cloud.add_host("restart", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    first = schedule(sched)
    assert first.placed
    before = cloud.store.get_host(host.name)

    restarted = cloud.restart(host)
    assert restarted.ok and restarted.releases == []
    assert list(host.agent.ledger.entries()) == [first.consumer]
    # the same state: nothing new written, nothing freed
    assert restarted.store_writes == 0
    assert cloud.store.get_host(host.name).generation == before.generation
    consistent(cloud)

    second = schedule(sched)
    assert second.placed
    assert pinned_cpus(second.decision) == {2, 3}  # not 0-1: still claimed
    assert not schedule(sched).placed
    consistent(cloud)


class AgentKilled(BaseException):
    """The agent's process dies (nothing of the agent catches it)."""


class DiesBeforeAnswering:
    """The agent's host-state store, except that the agent dies when it
    answers a claim: after the claim is in its ledger and its state
    published, before the scheduler hears ``claimed``."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def fenced(self, lease):
        """The agent writes through its fenced view of the store: that
        one dies too."""
        return DiesBeforeAnswering(self._store.fenced(lease))

    def swap_status(self, decision_id, sources, target, reasons=(), *, move=None):
        if move == protocol.Move.CLAIM:
            raise AgentKilled(decision_id)
        return self._store.swap_status(decision_id, sources, target, reasons, move=move)


def test_agent_killed_mid_claim_answers_it_from_its_ledger_after_restart(cloud):
    host = cloud.add_host("midclaim", [cell(4, 4096)], dedicated="0-3", start=False)
    host.agent = ComputeAgent.from_config(host.conf, cloud.placement.emb.client(),
                                          DiesBeforeAnswering(cloud.store),
                                          host.discover)
    assert host.agent.run_once().ok
    sched = cloud.scheduler()
    who, results = consumer(), []
    waiting = threading.Thread(target=lambda: results.append(
        sched.schedule(build(sched.plugins, TWO_PINNED[0], vcpus=2, memory_mb=1024),
                       who, "p", "u", timeout=60)))
    waiting.start()
    for _ in range(600):
        if cloud.store.active_decision(who) is not None:
            break
        threading.Event().wait(0.01)
    with pytest.raises(AgentKilled):
        host.agent.poll()
    assert cloud.store.active_decision(who).status == DecisionStatus.PENDING
    restarted = cloud.restart(host)  # its ledger, read from disk
    waiting.join(60)
    [claim] = restarted.claims
    assert (claim.consumer, claim.claimed, claim.note) == (who, True, RECORDED_EARLIER)
    [result] = results
    assert result.placed and [(a.host, a.outcome) for a in result.attempts] == [
        (host.name, "claimed")]
    assert list(host.agent.ledger.entries()) == [who]
    assert published_pinned(cloud, host) == pinned_cpus(result.decision)
    consistent(cloud)
    # executed once: the next guest gets the other CPUs
    second = schedule(sched)
    assert pinned_cpus(second.decision) == {0, 1, 2, 3} - pinned_cpus(result.decision)
    consistent(cloud)


def test_release_frees_ledger_placement_and_published_state(cloud):
    host = cloud.add_host("release", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    kept, freed = schedule(sched), schedule(sched)
    assert kept.placed and freed.placed
    done = sched.release(freed.consumer, timeout=30)
    assert (done.outcome, done.was) == ("released", DecisionStatus.CLAIMED)
    assert list(host.agent.ledger.entries()) == [kept.consumer]
    assert cloud.allocations(freed.consumer) == {}
    assert published_pinned(cloud, host) == pinned_cpus(kept.decision)
    consistent(cloud)
    # the freed CPUs are given again
    again = schedule(sched)
    assert again.placed and pinned_cpus(again.decision) == pinned_cpus(freed.decision)
    # nothing in force any more: said, nothing changes
    assert sched.release(freed.consumer).outcome == "nothing-in-force"
    assert sched.release(consumer()).outcome == "unknown"
    consistent(cloud)


def test_release_of_a_decision_no_agent_answered(cloud):
    host = cloud.add_host("silent", [cell(4, 4096)], dedicated="0-3", start=False)
    sched = cloud.scheduler(max_attempts=1)
    who = consumer()
    results = []
    waiting = threading.Thread(target=lambda: results.append(
        sched.schedule(build(sched.plugins, TWO_PINNED[0], vcpus=2, memory_mb=1024),
                       who, "p", "u", timeout=30)))
    waiting.start()
    for _ in range(600):
        if cloud.store.active_decision(who) is not None:
            break
        threading.Event().wait(0.01)
    assert cloud.allocations(who) != {}  # written before the decision
    done = sched.release(who)
    waiting.join(30)
    assert (done.outcome, done.was) == ("released", DecisionStatus.PENDING)
    assert done.allocations_deleted and cloud.allocations(who) == {}
    [result] = results
    assert not result.placed
    assert [(a.host, a.outcome) for a in result.attempts] == [(host.name, "withdrawn")]
    consistent(cloud)


def test_a_release_requested_while_scheduling_is_not_undone_on_another_host(cloud):
    """A requester released the consumer while the scheduler waited for
    the first host's answer (nova deleted the instance during its build):
    the scheduler frees its allocation and stops. Trying the next host
    placed the consumer whose release was asked for (and the requester's
    delete of the allocation could land on the next host's)."""
    hosts = [cloud.add_host(label, [cell(4, 4096)], dedicated="0-3", start=False)
             for label in ("first", "next")]
    sched = cloud.scheduler(max_attempts=2)
    who = consumer()
    results = []
    waiting = threading.Thread(target=lambda: results.append(
        sched.schedule(build(sched.plugins, TWO_PINNED[0], vcpus=2, memory_mb=1024),
                       who, "p", "u", timeout=30)))
    waiting.start()
    for _ in range(600):
        pending = cloud.store.active_decision(who)
        if pending is not None:
            break
        threading.Event().wait(0.01)
    [other] = [h for h in hosts if h.name != pending.host]
    other.start()
    done = sched.release(who)
    waiting.join(30)
    assert (done.outcome, done.was) == ("released", DecisionStatus.PENDING)
    [result] = results
    assert not result.placed
    assert [(a.host, a.outcome) for a in result.attempts] == [(pending.host, "withdrawn")]
    assert cloud.store.active_decision(who) is None
    assert cloud.allocations(who) == {}
    consistent(cloud)


class WithoutFlavorAndImage:
    """The scheduler's host-state store, except that the spec it addresses
    to a host has its flavor's extra specs and its image's properties
    removed: what the compute may not read is not there to read."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def submit_decision(self, consumer, host, spec_json):
        doc = json.loads(spec_json)
        assert doc["flavor"]["extra_specs"] and doc["image"]["properties"]
        doc["flavor"]["extra_specs"] = {}
        doc["image"]["properties"] = {}
        return self._store.submit_decision(consumer, host, json.dumps(doc))


def test_the_compute_never_gathers_the_request_again(cloud):
    host = cloud.add_host("nogather", [cell(4, 4096), cell(4, 4096)],
                          dedicated="0-7", start=False)
    # The agent's configuration differs from the scheduler's (no [pci]
    # alias), and every plugin of the agent refuses to parse a request:
    # the claim can only use the spec's typed requests and its decision.
    host.conf.set_override("alias", [], "pci")
    host.agent = cloud.new_agent(host)

    def parse_request(*args, **kwargs):
        raise AssertionError("the compute parsed a flavor or image again")

    for plugin in host.manager.plugins.values():
        plugin.parse_request = parse_request
    host.start()
    sched = cloud.scheduler()
    sched.store = WithoutFlavorAndImage(sched.store)
    # 2 guest nodes from the flavor, dedicated CPUs from the image: read
    # again from the stripped spec they would be a floating guest.
    result = schedule(sched, ({"hw:numa_nodes": "2"}, 4, 2048),
                      image={"hw_cpu_policy": "dedicated"})
    assert result.placed, result.attempts
    [entry] = host.agent.ledger.entries().values()
    assert entry.spec.flavor.extra_specs == {} and entry.spec.image_properties == {}
    assert entry.spec.decision.assignments == result.decision.assignments
    assert len(pinned_cpus(entry.spec.decision)) == 4
    assert published_pinned(cloud, host) == pinned_cpus(result.decision)
    assert cloud.allocations(result.consumer) == expected_allocation(result.decision)
    consistent(cloud)


def test_many_guests_on_two_hosts_usage_equals_the_ledgers(cloud):
    a = cloud.add_host("aa", [cell(4, 4096), cell(4, 4096)], dedicated="0-7")
    b = cloud.add_host("bb", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    placed = []
    for _ in range(7):
        result = schedule(sched)
        if result.placed:
            placed.append(result)
        consistent(cloud)
    assert len(placed) == 6  # 12 CPUs, 2 each
    by_host: dict = {}
    for result in placed:
        by_host.setdefault(result.host, []).extend(pinned_cpus(result.decision))
    assert sorted(by_host[a.name]) == list(range(8))  # no CPU given twice
    assert sorted(by_host[b.name]) == list(range(4))
    for result in placed[::2]:
        assert sched.release(result.consumer, timeout=30).outcome == "released"
        consistent(cloud)
    assert len(a.agent.ledger) + len(b.agent.ledger) == 3
