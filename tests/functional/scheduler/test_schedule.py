"""The scheduler against real Placement (embedded) and a real host-state
store (SQLite): hosts reported and published by the real plugins; their
answers come from each host's real compute agent, running in a thread
(:mod:`tests.functional.scheduler.cloud`)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from compute_plugins.hoststate import protocol
from compute_plugins.scheduler.selection import ConsumerAllocated
from tests import cli
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import FirstPutRaces, expected_allocation
from tests.unit.request.conftest import build


def new_consumer() -> str:
    return str(uuid.uuid4())


def pinned(nodes: int, vcpus: int, memory_mb: int, **more):
    return {"hw:numa_nodes": str(nodes), "hw:cpu_policy": "dedicated", **more}, vcpus, memory_mb


def spec_of(sched, extra_specs, vcpus, memory_mb, **flavor):
    return build(sched.plugins, extra_specs, vcpus=vcpus, memory_mb=memory_mb, **flavor)


def test_eight_node_pinned_guest_is_placed_on_the_eight_cell_host(cloud):
    big = cloud.add_host("cells8", [cell(4, 4096)] * 8, dedicated="0-31")
    four = cloud.add_host("cells4", [cell(8, 8192)] * 4, dedicated="0-31")
    sched = cloud.scheduler()
    spec = spec_of(sched, *pinned(8, 32, 16384))
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "project", "user")
    assert result.placed, result.reasons
    assert result.host == big.name
    numa = result.decision.assignments["numa"]
    assert sorted(c.host_cell for c in numa.cells) == list(range(8))
    # Placement was asked which providers have room: the root, and one
    # query for the 8 identical guest nodes; then the allocation was written.
    assert result.placement_calls == {"GET /resource_providers": 2,
                                      "PUT /allocations/{consumer}": 1}
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert cloud.allocations(consumer) == {
        rp: dict(res) for rp, res in result.decision.allocations.items()}
    assert all(res == {"PCPU": 4, "MEMORY_MB": 2048}
               for res in cloud.allocations(consumer).values())
    # The 4-cell host had room per cell but cannot hold 8 guest nodes.
    assert any(r.plugin == "numa" and "8 NUMA nodes" in r.reason
               for r in result.verdicts[four.name])
    assert cloud.store.active_decision(consumer).status == "claimed"


def test_eight_node_guest_among_many_hosts_finds_the_only_one(cloud):
    for i in range(6):
        cloud.add_host("four%d" % i, [cell(4, 4096)] * 4, dedicated="0-15")
    for i in range(3):
        cloud.add_host("tiny%d" % i, [cell(1, 1024)] * 8, dedicated="0-7")
    only = cloud.add_host("only", [cell(4, 4096)] * 8, dedicated="0-31")
    sched = cloud.scheduler()
    result = sched.schedule(spec_of(sched, *pinned(8, 16, 8192)), new_consumer(),
                            "project", "user")
    assert result.placed and result.host == only.name
    assert result.candidates == 7 and result.fitting == 1  # tiny: no room per cell
    assert result.placement_calls["GET /resource_providers"] == 2


def test_floating_guest_with_vgpu_and_disk_allocation_is_the_sum_of_assignments(cloud):
    gpu = cloud.add_host("gpu", [cell(4, 4096), cell(4, 4096)],
                         gpus=((1, "nvidia-35", 4),), disk_gb=100)
    sched = cloud.scheduler()
    spec = spec_of(sched, {"resources:VGPU": "1"}, 2, 2048, root_gb=10)
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "project", "user")
    assert result.placed, result.reasons
    written = cloud.allocations(consumer)
    assert written == expected_allocation(result.decision)
    assert written[gpu.root] == {"DISK_GB": 10}
    assert sorted(rc for res in written.values() for rc in res) == [
        "DISK_GB", "MEMORY_MB", "VCPU", "VGPU"]
    assert cloud.usage(gpu) == written


def test_port_with_bandwidth_lands_where_its_pf_is_near_the_guest(cloud):
    cells = [cell(4, 4096), cell(1, 1024)]
    near = cloud.add_host("pf-cell0", cells, pfs=((0, 4),))
    far = cloud.add_host("pf-cell1", cells, pfs=((1, 4),))
    sched = cloud.scheduler()
    spec = build(sched.plugins, {"hw:numa_nodes": "1",
                                 "hw:pci_numa_affinity_policy": "required"},
                 vcpus=2, memory_mb=2048,
                 ports=[{"vnic_type": "direct", "physnet": "physnet1",
                         "min_kbps_egress": 1000}])
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "project", "user")
    assert result.placed and result.host == near.name, result.reasons
    written = cloud.allocations(consumer)
    assert written == expected_allocation(result.decision)
    [vf] = result.decision.assignments["sriov"].vfs
    assert written[vf.provider_uuid] == {"SRIOV_NET_VF": 1,
                                         "NET_BW_EGR_KILOBIT_PER_SEC": 1000}
    assert {r.plugin for r in result.verdicts[far.name]} == {"sriov"}
    assert cloud.usage(near) == written


def test_two_node_guest_with_an_affine_vgpu_lands_only_where_it_can(cloud):
    # The guest's two nodes need cells 0 and 1 of the 3-cell hosts (cell 2
    # is too small); the vGPU must sit under one of them.
    cells = [cell(4, 4096), cell(4, 4096), cell(1, 512)]
    under_guest = cloud.add_host("gpu-cell1", cells, gpus=((1, "nvidia-35", 4),))
    elsewhere = cloud.add_host("gpu-cell2", cells, gpus=((2, "nvidia-35", 4),))
    sched = cloud.scheduler()
    spec = spec_of(sched, {"hw:numa_nodes": "2", "resources:VGPU": "1",
                           "hw:pci_numa_affinity_policy": "required"}, 4, 4096)
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "project", "user")
    assert result.placed and result.host == under_guest.name, result.reasons
    assert {r.plugin for r in result.verdicts[elsewhere.name]} == {"vgpu"}
    [device] = result.decision.assignments["vgpu"].devices
    assert cloud.allocations(consumer)[device.provider_uuid] == {"VGPU": 1}
    assert cloud.allocations(consumer) == expected_allocation(result.decision)


def test_shared_storage_disk_goes_to_the_sharing_provider_of_its_aggregate(cloud):
    """Hosts on local disk and on two shared storages in one cloud: the
    scheduler's configuration says nothing of it (nova's query, DISK_GB in
    the unsuffixed group); a sharing provider counts only for the hosts in
    its aggregate."""
    agg, small_agg = str(uuid.uuid4()), str(uuid.uuid4())
    shared = cloud.sharing_provider(agg, 500)
    small = cloud.sharing_provider(small_agg, 5)
    host = cloud.add_host("shared-disk", [cell(4, 4096)], disk_aggregate=agg)
    on_small = cloud.add_host("small-shared-disk", [cell(4, 4096)],
                              disk_aggregate=small_agg)
    local = cloud.add_host("local-disk", [cell(4, 4096)], disk_gb=10)
    sched = cloud.scheduler()
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, {}, 2, 1024, root_gb=20), consumer,
                            "project", "user")
    assert result.placed and result.host == host.name, result.reasons
    assert shared in result.decision.mappings[""]
    assert small not in result.decision.allocations
    written = cloud.allocations(consumer)
    assert written[shared] == {"DISK_GB": 20}
    assert sum(res.get("VCPU", 0) for res in written.values()) == 2
    for other in (local.name, on_small.name):
        assert any("DISK_GB" in r.reason and "sharing provider" in r.reason
                   for r in result.verdicts[other]), result.verdicts[other]


def test_no_host_fits_reasons_per_host_and_plugin(cloud):
    small = cloud.add_host("small", [cell(4, 4096)] * 2, dedicated="0-7")
    four = cloud.add_host("four", [cell(4, 4096)] * 4, dedicated="0-15")
    sched = cloud.scheduler()
    # 8 nodes of 1 CPU: every cell has room (Placement), no host has 8 cells.
    result = sched.schedule(spec_of(sched, *pinned(8, 8, 8192)), new_consumer(),
                            "project", "user")
    assert not result.placed and result.attempts == ()
    assert result.candidates == 2 and result.fitting == 0
    by_host = {h.host: h.reasons for h in result.reasons}
    assert set(by_host) == {small.name, four.name}
    assert [r.plugin for r in by_host[four.name]] == ["numa"]
    assert "8 NUMA nodes, the host only 4" in by_host[four.name][0].reason
    # 2 nodes of 8 CPUs: no cell has 8 CPUs: Placement excludes both hosts,
    # and says which group of which plugin found no room.
    result = sched.schedule(spec_of(sched, *pinned(2, 16, 4096)), new_consumer(),
                            "project", "user")
    assert not result.placed and result.candidates == 0
    for host in (small.name, four.name):
        reasons = result.verdicts[host]
        assert {r.plugin for r in reasons} == {"numa"}
        assert any("_NUMA0" in r.reason and "PCPU:8" in r.reason for r in reasons)
    assert len(result.reasons) == 2


def test_disabled_and_trait_less_hosts_are_excluded_with_the_reason(cloud):
    disabled = cloud.add_host("disabled", [cell(4, 4096)])
    plain = cloud.add_host("plain", [cell(4, 4096)])
    avx = cloud.add_host("avx", [cell(4, 4096)])
    cloud.set_root_traits(disabled, "COMPUTE_STATUS_DISABLED", "HW_CPU_X86_AVX2")
    cloud.set_root_traits(avx, "HW_CPU_X86_AVX2")
    sched = cloud.scheduler()
    spec = spec_of(sched, {"trait:HW_CPU_X86_AVX2": "required"}, 2, 1024)
    result = sched.schedule(spec, new_consumer(), "p", "u")
    assert result.placed and result.host == avx.name and result.candidates == 1
    [why] = result.verdicts[disabled.name]
    assert (why.plugin, why.reason) == (
        "placement", "Placement: the host is disabled (COMPUTE_STATUS_DISABLED)")
    [why] = result.verdicts[plain.name]
    assert "HW_CPU_X86_AVX2" in why.reason and why.plugin == "placement"


def test_placement_conflict_moves_to_the_next_host(cloud):
    a = cloud.add_host("aa", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("bb", [cell(4, 4096)], dedicated="0-3")
    one_slot = pinned(1, 4, 2048)
    first = cloud.scheduler()
    results = {}

    def first_places():
        results["first"] = first.schedule(spec_of(first, *one_slot),
                                          new_consumer(), "p", "u")

    second = cloud.scheduler()
    second.placement = FirstPutRaces(second.placement, first_places)
    results["second"] = second.schedule(spec_of(second, *one_slot),
                                        new_consumer(), "p", "u")
    results["third"] = second.schedule(spec_of(second, *one_slot),
                                       new_consumer(), "p", "u")
    assert results["first"].host == a.name
    # Both saw room on aa (spread: a tie, by name); Placement refused the
    # second allocation there atomically, and the next host took it.
    assert [(t.host, t.outcome) for t in results["second"].attempts] == [
        (a.name, "conflict"), (b.name, "claimed")]
    assert "409" in results["second"].attempts[0].reasons[0].reason
    third = results["third"]
    # Refused: bb's published state (its claim) has no room left, and aa,
    # which the kept answer left out after its 409, was asked about again
    # (its tree: 2 shapes) before the refusal: no room there either.
    assert not third.placed and third.candidates == 1
    assert third.placement_calls == {"GET /resource_providers": 2}
    assert {r.plugin for r in third.verdicts[b.name]} == {"numa"}
    assert {r.plugin for r in third.verdicts[a.name]} == {"numa"}
    assert {h.host for h in third.reasons} == {a.name, b.name}
    for host in (a, b):
        assert list(cloud.usage(host).values()) == [{"PCPU": 4, "MEMORY_MB": 2048}]


def test_concurrent_schedulers_one_slot_exactly_one_places(cloud):
    host = cloud.add_host("one", [cell(4, 4096)], dedicated="0-3")
    results = []

    def run():
        sched = cloud.scheduler()
        results.append(sched.schedule(spec_of(sched, *pinned(1, 4, 1024)),
                                      new_consumer(), "p", "u"))
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(r.placed for r in results) == [False, False, False, True]
    assert list(cloud.usage(host).values()) == [{"PCPU": 4, "MEMORY_MB": 1024}]


def test_twenty_concurrent_schedulers_room_for_five(cloud):
    host = cloud.add_host("five", [cell(10, 10240)], dedicated="0-9")
    results = []

    def run():
        sched = cloud.scheduler(max_attempts=5)
        results.append(sched.schedule(spec_of(sched, *pinned(1, 2, 1024)),
                                      new_consumer(), "p", "u"))
    threads = [threading.Thread(target=run) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    placed = [r for r in results if r.placed]
    assert len(results) == 20 and len(placed) == 5
    cpus = [cpu for r in placed for c in r.decision.assignments["numa"].cells
            for cpu in c.pinning.values()]
    assert sorted(cpus) == list(range(10))  # no CPU given twice
    assert len(host.assignments["numa"]) == 5  # the agent's ledger
    assert cloud.ledger_usage(host) == cloud.usage(host)
    usage = cloud.usage(host)
    assert list(usage.values()) == [{"PCPU": 10, "MEMORY_MB": 5120}]
    total: dict = {}
    for r in placed:
        for rp, res in expected_allocation(r.decision).items():
            for rc, n in res.items():
                total.setdefault(rp, {}).setdefault(rc, 0)
                total[rp][rc] += n
    assert total == usage
    for r in results:
        if not r.placed:
            assert r.reasons and cloud.store.active_decision(r.consumer) is None


def test_rejected_decision_frees_the_allocation_and_tries_the_next_host(cloud):
    a = cloud.add_host("aa", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("bb", [cell(4, 4096)], dedicated="0-3")
    two_cpus = pinned(1, 2, 1024)
    other = cloud.scheduler()
    first: dict = {}

    def another_claim_lands_first():
        first["result"] = other.schedule(spec_of(other, *two_cpus), new_consumer(),
                                         "p", "u")

    # Both schedulers read the same states (a tie: aa, by name; CPUs 0-1).
    # The other one's claim lands on aa between this one's read and its
    # allocation: Placement still has room on aa (2 of 4 PCPU), aa's agent
    # has CPUs 0-1 pinned and rejects the stale decision.
    sched = cloud.scheduler()
    sched.placement = FirstPutRaces(sched.placement, another_claim_lands_first)
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, *two_cpus), consumer, "project", "user")
    assert first["result"].host == a.name
    assert result.placed and result.host == b.name, result.attempts
    assert [(t.host, t.outcome) for t in result.attempts] == [
        (a.name, "rejected"), (b.name, "claimed")]
    assert {r.plugin for r in result.attempts[0].reasons} == {"numa"}
    # aa holds only the other claim, in its ledger and in Placement
    assert list(a.agent.ledger.entries()) == [first["result"].consumer]
    assert cloud.usage(a) == cloud.ledger_usage(a) == expected_allocation(
        first["result"].decision)
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert set(cloud.allocations(consumer)) <= set(b.providers)
    assert cloud.usage(b) == cloud.ledger_usage(b)


def test_no_agent_is_a_timeout_naming_the_host(cloud):
    host = cloud.add_host("silent", [cell(4, 4096)], start=False)  # no agent runs
    sched = cloud.scheduler(max_attempts=1)
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u",
                            timeout=0.3)
    assert not result.placed
    assert [(t.host, t.outcome) for t in result.attempts] == [(host.name, "timeout")]
    assert host.name in result.reasons[0].reasons[0].reason
    assert cloud.usage(host) == {}
    assert cloud.store.active_decision(consumer) is None


def test_a_stopped_agents_host_is_down_within_its_lease_and_skipped(cloud):
    """Issue 19, item 3: an agent that stops stops renewing its lease; its
    host is no candidate once the lease expired (one lease period at most)
    and the scheduler says why, instead of offering it a decision nobody
    answers."""
    import time

    lease = 1.0
    dead = cloud.add_host("dead", [cell(8, 8192)], lease_duration=lease)
    live = cloud.add_host("live", [cell(4, 4096)])
    sched = cloud.scheduler()
    spec = spec_of(sched, {}, 2, 1024)
    assert not any("is down" in r.reason for rs in sched.plan(spec).verdicts.values()
                   for r in rs)
    time.sleep(0.2)   # a renewal or two by its polls
    dead.stop()
    stopped = time.monotonic()
    while not sched.plan(spec).verdicts[dead.name]:
        assert time.monotonic() - stopped < lease + 2, "still a candidate"
        time.sleep(0.05)
    excluded_after = time.monotonic() - stopped
    assert excluded_after <= lease + 1.0, excluded_after
    print("liveness: host %s excluded %.2f s after its agent stopped (lease %g s)"
          % (dead.name, excluded_after, lease))
    (reason,) = sched.plan(spec).verdicts[dead.name]
    assert reason.reason.startswith("host %s is down: its agent's lease expired at "
                                    % dead.name), reason
    consumer = new_consumer()
    start = time.monotonic()
    result = sched.schedule(spec, consumer, "p", "u", timeout=60)
    assert result.placed and result.host == live.name
    assert [t.host for t in result.attempts] == [live.name]
    assert time.monotonic() - start < 10
    assert result.verdicts[dead.name] == (reason,)
    assert cloud.usage(dead) == {}
    # its agent back: renewed, a candidate again at the next plan
    cloud.restart(dead)
    assert not sched.plan(spec).verdicts[dead.name]


def test_a_plan_reads_only_the_hosts_that_changed_since_the_last(cloud):
    """Issue 19, item 2: a scheduler keeps every host's generation; a plan
    reads the hosts written since the last plan and the expired leases,
    never every host's generation and lease (1,000 rows a decision at 1,000
    hosts)."""
    from tests.unit.hoststate.cases import statements

    hosts = [cloud.add_host("h%d" % i, [cell(4, 4096)]) for i in range(3)]
    sched = cloud.scheduler()
    spec = spec_of(sched, {}, 2, 1024)
    result = sched.schedule(spec, new_consumer(), "p", "u", timeout=60)
    assert result.placed   # its host published its claim since
    with statements(cloud.store) as seen:
        planned = sched.plan(spec)
    assert sorted(planned.verdicts) == sorted(h.name for h in hosts)
    reads = [q for q in seen if q.startswith("SELECT") and (
        "FROM hoststate_hosts" in q or "FROM hoststate_leases" in q)]
    whole = [q for q in reads if " WHERE " not in q]
    assert reads and not whole, seen
    assert any("change_number >" in q for q in reads), reads


def test_a_decision_pending_on_a_host_that_goes_down_is_replaced_at_once(cloud):
    """The host was alive when planned and chosen, its agent stopped before
    it answered: once its lease expired the decision is withdrawn (freed)
    and the next host tried, long before the answer timeout."""
    import time

    # NOTE: the bigger host is the first choice (spread).
    dead = cloud.add_host("dying", [cell(8, 8192)], lease_duration=2.0)
    live = cloud.add_host("other", [cell(4, 4096)])
    sched = cloud.scheduler()
    spec = spec_of(sched, {}, 2, 1024)
    assert sched.plan(spec).ordered[0][1].host == dead.name
    dead.stop()
    consumer = new_consumer()
    start = time.monotonic()
    result = sched.schedule(spec, consumer, "p", "u", timeout=60)
    took = time.monotonic() - start
    assert result.placed and result.host == live.name, result.attempts
    assert [(t.host, t.outcome) for t in result.attempts] == [
        (dead.name, "down"), (live.name, "claimed")]
    assert took < 2.0 + 5, took
    (why,) = result.attempts[0].reasons
    assert why.reason.startswith("host %s is down: its agent's lease expired at "
                                 % dead.name) and "withdrawn" in why.reason
    (withdrawn, placed) = cloud.store.history(consumer)
    assert (withdrawn.host, withdrawn.status.value) == (dead.name, "released")
    assert withdrawn.reasons and "is down" in withdrawn.reasons[0].reason
    assert placed.status.value == "claimed"
    assert cloud.usage(dead) == {}
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    # the agent that comes back does not execute the withdrawn decision
    cloud.restart(dead)
    assert cloud.store.history(consumer)[0].status.value == "released"
    assert consumer not in dead.agent.ledger


def write_json(path, doc):
    path.write_text(json.dumps(doc))
    return str(path)


def test_cli_schedule_prints_the_decision_or_the_reasons(cloud, placement_url, tmp_path):
    host = cloud.add_host("cli", [cell(4, 4096), cell(4, 4096)], dedicated="0-7")
    config = tmp_path / "compute-plugins.conf"
    config.write_text(cloud.host_state_config())
    fits = write_json(tmp_path / "fits.json", {
        "name": "pinned", "vcpus": 2, "memory_mb": 2048, "root_gb": 0,
        "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}})
    too_big = write_json(tmp_path / "big.json", {
        "name": "big", "vcpus": 16, "memory_mb": 2048,
        "extra_specs": {"hw:cpu_policy": "dedicated"}})
    common = ["--config-file", str(config), "--placement-url", placement_url]
    consumer = new_consumer()
    done = cli.run(*common, "schedule", "--flavor", fits, "--consumer", consumer,
                   "--format", "json", "--timeout", "10")
    out = json.loads(done.stdout)
    assert done.returncode == 0
    [instance] = out["instances"]
    assert out["reasons"] == []
    assert set(instance) == {"consumer", "host", "nodename", "allocations",
                             "assignments"}
    assert (instance["consumer"], instance["host"]) == (consumer, host.name)
    assert instance["allocations"] == cloud.allocations(consumer)
    assert sorted(instance["assignments"]) == ["numa"]

    done = cli.run(*common, "schedule", "--flavor", fits, "--timeout", "10")
    text = done.stdout
    assert done.returncode == 0 and "host %s" % host.name in text and "numa:" in text

    done = cli.run(*common, "schedule", "--flavor", fits, "--count", "2", "--format", "json")
    out = json.loads(done.stdout)
    assert done.returncode == 0 and len(out["instances"]) == 2
    assert len({i["consumer"] for i in out["instances"]}) == 2

    done = cli.run(*common, "schedule", "--flavor", too_big, "--timeout", "1")
    assert done.returncode == 1
    assert "not placed" in done.stdout
    assert "host %s:" % host.name in done.stdout and "numa: " in done.stdout

    done = cli.run(*common, "schedule", "--flavor", fits, "--consumer", "nope")
    assert done.returncode == 2
    assert "--consumer 'nope' is not a uuid" in done.stderr
    # the same request again for that consumer: its claim, not a second one
    done = cli.run(*common, "schedule", "--flavor", fits, "--consumer", consumer)
    assert done.returncode == 0
    assert "%s: host %s" % (consumer, host.name) in done.stdout
    assert len(cloud.store.history(consumer)) == 1
    # another request for it: refused
    done = cli.run(*common, "schedule", "--flavor", too_big, "--consumer", consumer)
    assert done.returncode == 2
    assert "consumer %s already has a decision on host %s (claimed)" % (
        consumer, host.name) in done.stderr


def test_weighers_spread_by_default_and_pack_when_configured(cloud):
    busy = cloud.add_host("busy", [cell(4, 4096)], dedicated="0-3")
    idle = cloud.add_host("idle", [cell(4, 4096)], dedicated="0-3")
    one_cpu = pinned(1, 1, 512)
    sched = cloud.scheduler()
    first = sched.schedule(spec_of(sched, *one_cpu), new_consumer(), "p", "u")
    packing = cloud.scheduler(default_weigher_multiplier=1.0)
    packed = packing.schedule(spec_of(packing, *one_cpu), new_consumer(), "p", "u")
    spread = sched.schedule(spec_of(sched, *one_cpu), new_consumer(), "p", "u")
    assert first.host == busy.name  # a tie: by name
    assert packed.host == busy.name  # the fuller host
    assert spread.host == idle.name  # the emptier host


def test_a_trait_placement_never_heard_of_is_no_room_not_an_error(cloud):
    """Placement answers 400 "No such trait(s)" for a trait it does not
    know: requiring one means no host has it; forbidding one excludes
    nobody."""
    host = cloud.add_host("plain", [cell(4, 4096)])
    sched = cloud.scheduler()
    required = sched.schedule(spec_of(sched, {"trait:CUSTOM_NEVER_SEEN_A": "required"},
                                      1, 512), new_consumer(), "project", "user")
    assert not required.placed and required.candidates == 0
    assert any("CUSTOM_NEVER_SEEN_A" in r.reason
               for r in required.verdicts[host.name]), required.verdicts[host.name]
    forbidden = sched.schedule(
        spec_of(sched, {"trait:CUSTOM_NEVER_SEEN_B": "forbidden"}, 1, 512),
        new_consumer(), "project", "user")
    assert forbidden.placed, forbidden.reasons


class CountingPuts:
    """The real Placement client, counting the allocation PUTs it sends."""

    def __init__(self, client):
        self._client = client
        self.puts = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def put(self, path, body=None, **kw):
        if path.startswith("/allocations/"):
            self.puts += 1
        return self._client.put(path, body, **kw)


def test_an_orphaned_allocation_of_the_consumer_stops_at_once_and_stays(cloud):
    """A scheduler stopped between its PUT /allocations and addressing the
    host: the consumer has allocations in Placement and no decision. A new
    schedule of that consumer gets a consumer-generation 409 on every host:
    it must say so at once (not PUT on each of many hosts and blame their
    capacity), and never delete allocations it did not write."""
    hosts = [cloud.add_host("or%d" % i, [cell(4, 4096)], dedicated="0-3", start=False)
             for i in range(4)]
    consumer = new_consumer()
    (numa0,) = [rp for rp, name in hosts[0].providers.items() if name.endswith("_NUMA0")]
    orphan = {numa0: {"resources": {"MEMORY_MB": 512}}}
    cloud.placement.emb.client().put("/allocations/%s" % consumer, {
        "allocations": orphan, "project_id": "p", "user_id": "u",
        "consumer_generation": None, "consumer_type": "INSTANCE"})
    sched = cloud.scheduler(max_attempts=10)
    sched.placement = counting = CountingPuts(sched.placement)
    with pytest.raises(ConsumerAllocated) as caught:
        sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), consumer, "p", "u")
    assert counting.puts == 1
    message = str(caught.value)
    assert consumer in message and "no decision" in message
    assert numa0 in message
    # the allocation someone else wrote is still there
    assert cloud.allocations(consumer) == {numa0: {"MEMORY_MB": 512}}
    assert cloud.store.active_decision(consumer) is None


class FirstPutAfterProviderDeleted(FirstPutRaces):
    """The chosen host's NUMA provider is deleted from Placement between
    the query and the PUT (its agent removed it, or the host was
    decommissioned)."""


def test_a_provider_deleted_before_the_put_moves_to_the_next_host(cloud):
    a = cloud.add_host("ga", [cell(4, 4096)], dedicated="0-3")
    b = cloud.add_host("gb", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    numa_a = [rp for rp, name in a.providers.items() if name != a.name]

    def delete_a():
        for rp in numa_a:
            resp = cloud.placement.session.request(
                cloud.placement.emb_url("/resource_providers/%s" % rp), "DELETE",
                headers={"OpenStack-API-Version": "placement 1.39"}, raise_exc=False)
            assert resp.status_code == 204, resp.text

    sched.placement = FirstPutAfterProviderDeleted(sched.placement, delete_a)
    result = sched.schedule(spec_of(sched, *pinned(1, 4, 2048)),
                            new_consumer(), "p", "u")
    assert result.placed and result.host == b.name
    (first, second) = result.attempts
    assert (first.host, first.outcome) == (a.name, "conflict")
    assert "does not exist" in first.reasons[0].reason
    assert second.outcome == "claimed"


@pytest.mark.parametrize("args, says", [
    (["--timeout", "inf"], "--timeout inf: expected a finite number of seconds >= 0"),
    (["--timeout", "nan"], "--timeout nan: expected a finite number of seconds >= 0"),
    (["--timeout", "-1"], "--timeout -1.0: expected a finite number of seconds >= 0"),
    (["--project-id", ""], "--project-id '': expected 1 to 255 characters"),
    (["--user-id", "u" * 256], "--user-id 'uuu"),
    (["--count", "0"], "--count 0: expected 1 to 1000"),
    # NOTE: one request placing a million instances would hold the store
    # and Placement for hours (and build a million uuids first).
    (["--count", "1001"], "--count 1001: expected 1 to 1000"),
    (["--count", "10000000000"], "--count 10000000000: expected 1 to 1000"),
])
def test_cli_schedule_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    """Refused before anything is asked of Placement or the store: an
    infinite timeout would wait forever for a host with no agent, an empty
    project would be Placement's 400 after the query (exit 1)."""
    flavor = write_json(tmp_path / "f.json", {"name": "f", "vcpus": 1, "memory_mb": 512})
    done = cli.run("schedule", "--flavor", flavor, *args)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("compute-plugins: error: ") and says in line


class ClaimLandsAtTheDeadline:
    """The real store, except that the host's agent claims the decision
    just before the scheduler's withdrawal (the race at the deadline, made
    deterministic)."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def swap_status(self, decision_id, sources, target, reasons=(), *, move=None):
        if move == protocol.Move.WITHDRAW:
            protocol.claim(self._store, decision_id)
        return self._store.swap_status(decision_id, sources, target, reasons, move=move)


def test_a_claim_landing_at_the_deadline_keeps_its_allocation(cloud):
    host = cloud.add_host("late", [cell(4, 4096)], start=False)
    sched = cloud.scheduler(max_attempts=1)
    sched.store = ClaimLandsAtTheDeadline(sched.store)
    consumer = new_consumer()
    result = sched.schedule(spec_of(sched, {}, 2, 1024), consumer, "p", "u",
                            timeout=0.1)
    assert result.placed and result.host == host.name
    assert [(t.host, t.outcome) for t in result.attempts] == [(host.name, "claimed")]
    assert cloud.allocations(consumer) == expected_allocation(result.decision)
    assert cloud.store.active_decision(consumer).status.value == "claimed"


class SubmitAnswerLost:
    """The real store, except that the connection fails after the decision
    was committed (the database's answer to the INSERT is lost): the
    scheduler cannot tell whether the host will see it."""

    def __init__(self, store, after):
        self._store = store
        self._after = after

    def __getattr__(self, name):
        return getattr(self._store, name)

    def submit_decision(self, consumer, host, spec):
        from compute_plugins.hoststate.errors import StoreUnavailable

        self._store.submit_decision(consumer, host, spec)
        self._after()
        raise StoreUnavailable(self._store.url, "server closed the connection")


def test_a_decision_submitted_but_unacknowledged_keeps_or_withdraws_safely(cloud):
    """The submit failed after its commit. Freeing the allocation blindly
    would let the host claim a decision Placement no longer accounts for.
    The scheduler withdraws the decision first: withdrawn, the allocation
    is freed; claimed by the host meanwhile, it stays."""
    from compute_plugins.hoststate.errors import StoreUnavailable

    host = cloud.add_host("ack", [cell(4, 4096)], start=False)
    sched = cloud.scheduler(max_attempts=1)
    sched.store = SubmitAnswerLost(sched.store, lambda: None)
    withdrawn = new_consumer()
    with pytest.raises(StoreUnavailable):
        sched.schedule(spec_of(sched, {}, 2, 1024), withdrawn, "p", "u")
    assert cloud.store.latest_decision(withdrawn).status.value == "released"
    assert cloud.usage(host) == {}

    def agent_claims_at_once():
        decision = cloud.store.list_decisions(host.name)[0]
        protocol.claim(cloud.store, decision.id)

    sched.store = SubmitAnswerLost(cloud.store, agent_claims_at_once)
    claimed = new_consumer()
    with pytest.raises(StoreUnavailable):
        sched.schedule(spec_of(sched, {}, 2, 1024), claimed, "p", "u")
    assert cloud.store.active_decision(claimed).status.value == "claimed"
    assert cloud.allocations(claimed), "the claimed decision lost its allocation"


def test_cli_schedule_count_failing_midway_prints_the_placed_ones(
        cloud, placement_url, tmp_path, monkeypatch):
    """--count 3 and the store fails at the second instance: the first is
    placed and claimed, so its consumer is printed (or nobody could release
    it), then one error line, exit 1. NOTE: the store's failure is injected
    (a database going away mid-run cannot be produced on cue here)."""
    from compute_plugins.hoststate.errors import StoreUnavailable
    from compute_plugins.hoststate.store import HostStateStore

    host = cloud.add_host("mid", [cell(4, 4096)])
    config = tmp_path / "compute-plugins.conf"
    config.write_text(cloud.host_state_config())
    flavor = write_json(tmp_path / "f.json", {"name": "f", "vcpus": 1, "memory_mb": 512})
    real = HostStateStore.submit_decision
    submitted = []

    def fails_second(self, consumer, host_name, spec):
        submitted.append(consumer)
        if len(submitted) == 2:
            raise StoreUnavailable(self.url, "server closed the connection")
        return real(self, consumer, host_name, spec)

    monkeypatch.setattr(HostStateStore, "submit_decision", fails_second)
    done = cli.run("--config-file", str(config), "--placement-url", placement_url,
                   "schedule", "--flavor", flavor, "--count", "3",
                   "--format", "json", "--timeout", "10")
    assert done.returncode == 1
    [instance] = json.loads(done.stdout)["instances"]
    assert (instance["consumer"], instance["host"]) == (submitted[0], host.name)
    # NOTE: the in-process Placement server's request log shares stderr
    # (and each decision is told before the wait: "waiting")
    (line,) = [x for x in done.stderr.splitlines()
               if x.startswith("compute-plugins") and "waiting" not in x]
    assert "server closed the connection" in line
    assert cloud.allocations(submitted[1]) == {}


def test_floating_guest_with_an_sriov_port_end_to_end(cloud):
    """No NUMA topology, one direct port: the host with the physnet's PF is
    chosen, the VF comes from its PF provider, and Placement holds exactly
    what the assignments take."""
    plain = cloud.add_host("novf", [cell(4, 4096), cell(4, 4096)])
    with_pf = cloud.add_host("vf", [cell(4, 4096), cell(4, 4096)], pfs=((1, 4),))
    sched = cloud.scheduler()
    spec = build(sched.plugins, {}, vcpus=2, memory_mb=1024,
                 ports=[{"vnic_type": "direct", "physnet": "physnet1"}])
    consumer = new_consumer()
    result = sched.schedule(spec, consumer, "p", "u")
    assert result.placed and result.host == with_pf.name, result.reasons
    written = cloud.allocations(consumer)
    assert written == expected_allocation(result.decision)
    [vf] = result.decision.assignments["sriov"].vfs
    assert written[vf.provider_uuid] == {"SRIOV_NET_VF": 1}
    assert with_pf.providers[vf.provider_uuid].startswith(with_pf.name + "_pf_")
    assert sum(r.get("VCPU", 0) for r in written.values()) == 2
    assert {r.plugin for r in result.verdicts[plain.name]} == {"sriov"}
