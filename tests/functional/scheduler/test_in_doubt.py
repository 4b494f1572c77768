"""Issue 20 item 4: in-doubt work always ends.

- the consumer and its decision are told before the scheduler waits
  (``on_offer``), so an interrupted scheduler's work can be found;
- a scheduler interrupted while it waits leaves a pending decision that a
  re-run of the same request for the same consumer resumes (the host's
  answer is returned, nothing placed a second time), or that ``release``
  withdraws;
- a release asked while the scheduler is between two hosts (the first
  rejected, the next not offered yet) wins: the consumer is placed nowhere.
"""

from __future__ import annotations

import json
import uuid

import pytest

from compute_plugins.compute.release import request_release
from compute_plugins.hoststate import protocol
from compute_plugins.hoststate.records import DecisionStatus
from compute_plugins.scheduler.selection import ConsumerInUse
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import FirstPutRaces, expected_allocation
from tests.functional.scheduler.test_schedule import pinned, spec_of, write_json


class InterruptedWhileWaiting:
    """The real store, except that the scheduler is interrupted (Ctrl-C,
    or killed) once it waits for the host's answer."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def wait_for_change(self, *args, **kwargs):
        raise KeyboardInterrupt


def test_the_decision_is_told_before_the_scheduler_waits(cloud):
    host = cloud.add_host("told", [cell(4, 4096)], start=False)
    told = []
    sched = cloud.scheduler(max_attempts=1)
    sched.on_offer = lambda decision, wait: told.append(
        (decision.consumer, decision.host, decision.status, wait))
    consumer = str(uuid.uuid4())
    sched.store = InterruptedWhileWaiting(sched.store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u", timeout=5)
    assert told == [(consumer, host.name, DecisionStatus.PENDING, 5)]


def test_a_rerun_after_an_interrupt_resumes_the_same_decision(cloud):
    host = cloud.add_host("resume", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    spec = spec_of(sched, {}, 2, 1024)
    consumer = str(uuid.uuid4())
    sched.store = InterruptedWhileWaiting(sched.store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec, consumer, "p", "u")
    pending = cloud.store.active_decision(consumer)
    assert pending.status == DecisionStatus.PENDING and pending.host == host.name
    allocated = cloud.allocations(consumer)
    assert allocated
    host.start()  # the host's agent claims it meanwhile (or later)
    again = cloud.scheduler()
    result = again.schedule(spec_of(again, {}, 2, 1024), consumer, "p", "u")
    assert result.placed and result.host == host.name
    assert [(a.host, a.outcome) for a in result.attempts] == [(host.name, "claimed")]
    # nothing placed a second time: one decision, the same allocation
    assert [d.id for d in cloud.store.history(consumer)] == [pending.id]
    assert cloud.allocations(consumer) == allocated == expected_allocation(result.decision)
    # once claimed, a re-run still answers the claim
    third = cloud.scheduler().schedule(spec, consumer, "p", "u")
    assert third.placed and third.host == host.name
    assert [d.id for d in cloud.store.history(consumer)] == [pending.id]


def written_before_2_1(doc):
    """As the writer before format 2.1 wrote it: version 2.0, with every
    port's ``tunneled`` and ``affinity_policy`` at their defaults."""
    assert doc["version"] == "2.0"
    for port in doc["ports"]:
        port.update(tunneled=False, affinity_policy=None)


def written_by_an_older_sriov(doc):
    """As a release whose sriov plugin wrote its data at 1.1 wrote it
    (this request has no sriov part: the same request)."""
    assert doc["requests"].get("sriov") is None
    doc["plugins"]["sriov"] = "1.1"


class WrittenByAnotherRelease(InterruptedWhileWaiting):
    """:class:`InterruptedWhileWaiting`, whose decision's spec is written
    as ``writer`` (the JSON document, changed in place) writes it."""

    def __init__(self, store, writer):
        super().__init__(store)
        self._writer = writer

    def submit_decision(self, consumer, host, spec):
        doc = json.loads(spec)
        self._writer(doc)
        return self._store.submit_decision(consumer, host, json.dumps(doc))


@pytest.mark.parametrize("writer", [written_before_2_1, written_by_an_older_sriov])
def test_a_rerun_by_an_upgraded_scheduler_resumes_the_same_decision(cloud, writer):
    """The same request, its decision written by the scheduler before an
    upgrade (another format or plugin data version, the same request):
    resumed, not refused as another request (the specs were compared as
    written, not as read)."""
    host = cloud.add_host("upgraded", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    ports = [{"id": "p0"}]
    consumer = str(uuid.uuid4())
    sched.store = WrittenByAnotherRelease(sched.store, writer)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec_of(sched, {}, 2, 1024, ports=ports), consumer, "p", "u")
    pending = cloud.store.active_decision(consumer)
    host.start()
    again = cloud.scheduler()
    result = again.schedule(spec_of(again, {}, 2, 1024, ports=ports), consumer, "p", "u")
    assert result.placed and result.host == host.name
    assert [d.id for d in cloud.store.history(consumer)] == [pending.id]


def test_a_rerun_with_another_request_is_refused(cloud):
    cloud.add_host("other", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    sched.store = InterruptedWhileWaiting(sched.store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u")
    again = cloud.scheduler()
    with pytest.raises(ConsumerInUse):
        again.schedule(spec_of(again, {}, 1, 512), consumer, "p", "u")


def test_release_of_an_interrupted_schedule_withdraws_and_frees(cloud):
    host = cloud.add_host("relint", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    sched.store = InterruptedWhileWaiting(sched.store)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u")
    done = request_release(cloud.store, consumer, cloud.placement.emb.client())
    assert done.outcome == "released" and done.allocations_deleted
    assert cloud.usage(host) == {}


class ReleasedWhenRejected:
    """The real store; when the host's rejection reaches the scheduler, a
    requester releases the consumer (``compute-plugins release``), before
    the scheduler offers it to the next host."""

    def __init__(self, store, release):
        self._store = store
        self._release = release
        self.outcomes = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def wait_for_change(self, *args, **kwargs):
        decision = self._store.wait_for_change(*args, **kwargs)
        if decision.status == DecisionStatus.REJECTED and not self.outcomes:
            self.outcomes.append(self._release())
        return decision


def test_a_release_between_two_hosts_wins(cloud):
    a = cloud.add_host("wa", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("wb", [cell(4, 4096)], dedicated="0-3")
    two_cpus = pinned(1, 2, 1024)
    other = cloud.scheduler()
    first: dict = {}

    def another_claim_lands_first():
        first["result"] = other.schedule(spec_of(other, *two_cpus), str(uuid.uuid4()),
                                         "p", "u")

    sched = cloud.scheduler()
    sched.placement = FirstPutRaces(sched.placement, another_claim_lands_first)
    consumer = str(uuid.uuid4())
    sched.store = store = ReleasedWhenRejected(sched.store, lambda: request_release(
        cloud.store, consumer, cloud.placement.emb.client()))
    result = sched.schedule(spec_of(sched, *two_cpus), consumer, "p", "u")
    assert first["result"].host == a.name
    (released,) = store.outcomes
    assert released.outcome == "nothing-in-force"
    # the release wins: placed nowhere, nothing allocated, nothing in force
    assert not result.placed, result.attempts
    assert result.attempts[-1].outcome == "withdrawn"
    assert cloud.store.active_decision(consumer) is None
    assert cloud.placement.get("/allocations/%s" % consumer).json()["allocations"] == {}
    assert cloud.usage(b) == {}
    assert b.assignments.get("numa", []) == []
    assert protocol.Move.CANCEL in protocol.TRANSITIONS


# -- the command line ---------------------------------------------------------

def cli_common(cloud, tmp_path, placement_url):
    config = tmp_path / "compute-plugins.conf"
    config.write_text(cloud.host_state_config())
    flavor = write_json(tmp_path / "f.json", {"name": "f", "vcpus": 2,
                                              "memory_mb": 1024, "root_gb": 0})
    return ["--config-file", str(config), "--placement-url", placement_url], flavor


def test_cli_schedule_tells_the_consumer_before_it_waits(cloud, placement_url,
                                                         tmp_path, capsys):
    from compute_plugins.cmd import main

    host = cloud.add_host("clitell", [cell(4, 4096)], start=False)
    common, flavor = cli_common(cloud, tmp_path, placement_url)
    code = main.main(common + ["schedule", "--flavor", flavor, "--timeout", "0.2"])
    captured = capsys.readouterr()
    assert code == 1
    (told,) = [ln for ln in captured.err.splitlines() if "waiting" in ln]
    consumer = told.split()[2].rstrip(":")
    decision = cloud.store.latest_decision(consumer)
    assert told == ("compute-plugins: consumer %s: decision %d offered to host %s; "
                    "waiting up to 0.2 s for its agent" % (consumer, decision.id, host.name))


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_cli_schedule_interrupted_names_the_consumer_and_its_state(
        cloud, placement_url, tmp_path, capsys, monkeypatch, fmt):
    import json

    from compute_plugins.cmd import main
    from compute_plugins.hoststate.decisions import SqlDecisionQueue

    host = cloud.add_host("cliint", [cell(4, 4096)], start=False)
    common, flavor = cli_common(cloud, tmp_path, placement_url)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(SqlDecisionQueue, "wait_for_change", interrupted)
    code = main.main(common + ["--format", fmt, "schedule", "--flavor", flavor])
    captured = capsys.readouterr()
    assert code == 130
    last = captured.err.splitlines()[-1]
    (decision,) = cloud.store.list_decisions(host.name)
    assert last == (
        "compute-plugins: interrupted (consumer %s: decision %d on host %s is "
        "pending: its agent may still claim it; `release --consumer %s` "
        "withdraws it, `schedule --consumer %s` with the same request waits "
        "for its answer)" % ((decision.consumer, decision.id, host.name)
                             + (decision.consumer,) * 2))
    if fmt == "json":
        doc = json.loads(captured.out)
        assert doc["interrupted"] == {"consumer": decision.consumer, "host": host.name,
                                      "decision": decision.id, "status": "pending"}
        assert doc["instances"] == []


class _ReleasedThenClaimedAtOnce:
    """The scheduler's store, except that a requester releases the consumer
    (nothing in force: a cancel) just before the decision is submitted, and
    the host's agent claims the decision before the scheduler looks again."""

    def __init__(self, store, release, claim):
        self._store, self._release, self._claim = store, release, claim
        self.outcomes = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def submit_decision(self, consumer, host, spec):
        self.outcomes.append(self._release())
        submitted = self._store.submit_decision(consumer, host, spec)
        self._claim()
        return submitted


def test_a_release_before_the_submit_wins_over_a_claim_that_lands_first(cloud):
    """The release came first: the claim that beat the scheduler's
    withdrawal is released as any claim, never kept."""
    host = cloud.add_host("rc", [cell(4, 4096)], start=False)
    sched = cloud.scheduler()
    consumer = str(uuid.uuid4())
    spec = spec_of(sched, {}, 2, 1024)
    host.start()
    assert sched.schedule(spec, consumer, "p", "u").placed
    assert request_release(cloud.store, consumer, timeout=10).outcome == "released"
    host.stop()
    sched.store = store = _ReleasedThenClaimedAtOnce(
        sched.store, lambda: request_release(cloud.store, consumer,
                                             cloud.placement.emb.client()),
        lambda: host.agent.poll())
    result = sched.schedule(spec, consumer, "p", "u")
    (released,) = store.outcomes
    assert released.outcome == "nothing-in-force"
    assert not result.placed, result.attempts
    assert result.attempts[-1].outcome == "withdrawn"
    host.start()
    decision = cloud.store.wait_for_change(cloud.store.latest_decision(consumer), 10)
    assert decision.status == DecisionStatus.RELEASED
    assert cloud.store.active_decision(consumer) is None
    assert cloud.allocations(consumer) == {}
    assert host.assignments.get("numa", []) == []
