"""Regressions of the RequestSpec review (one test per finding)."""

from __future__ import annotations

import pytest

from compute_plugins.request.errors import RequestInputError
from compute_plugins.scheduler import candidates, query
from tests.unit.request.conftest import build, problems


def alts(spec):
    return spec.placement_query().alternatives


def has_problem(found, key, text):
    return any(p.key == key and text in p.rule for p in found)


# 1. no group without resources outside same_subtree (Placement's 400)

@pytest.mark.parametrize("specs,kwargs", [
    ({"trait:CUSTOM_X": "required"}, {}),
    ({"hw:numa_nodes": "1", "trait:HW_CPU_X86_AVX2": "required"}, {}),
    ({"member_of": "in:7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d", "hw:numa_nodes": "2"}, {}),
    ({"member_of": "!7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d"}, {}),
])
def test_every_group_has_resources_or_is_in_a_subtree(manager, specs, kwargs):
    for alt in alts(build(manager, specs, vcpus=2, memory_mb=2048, **kwargs)):
        in_subtree = {s for pair in alt.same_subtree for s in pair}
        for group in alt.groups:
            assert group.resources or group.requester_id in in_subtree, alt


def test_unsuffixed_traits_are_root_traits(manager):
    alt = alts(build(manager, {"trait:CUSTOM_X": "required",
                               "trait:CUSTOM_Y": "forbidden"}))[-1]
    assert "CUSTOM_X" in alt.root_required and "CUSTOM_Y" in alt.root_forbidden
    assert not any(g.required_traits for g in alt.groups if not g.requester_id)


# 2. group policy

def test_two_guest_nodes_use_group_policy_none_and_the_filter(manager):
    spec = build(manager, {"hw:numa_nodes": "2"},
                 ports=[{"vnic_type": "direct", "physnet": "p"}] * 2)
    alt = alts(spec)[0]
    assert alt.group_policy == "none" and alt.distinct == ("_NUMA0", "_NUMA1")
    same = {"mappings": {"_NUMA0": ["a"], "_NUMA1": ["a"], "_PORT0": ["p"],
                         "_PORT1": ["p"]}}
    apart = {"mappings": {"_NUMA0": ["a"], "_NUMA1": ["b"], "_PORT0": ["p"],
                          "_PORT1": ["p"]}}
    assert not candidates.accept(alt, same) and candidates.accept(alt, apart)


def test_user_group_policy_is_honoured(manager):
    assert alts(build(manager, {"hw:numa_nodes": "2", "group_policy": "isolate"})
                )[0].group_policy == "isolate"


# 3. legacy

def test_legacy_adds_an_alternative_without_same_subtree_last(manager):
    spec = build(manager, {"hw:numa_nodes": "1"},
                 ports=[{"vnic_type": "direct", "physnet": "p"}])
    found = alts(spec)
    assert [a.same_subtree for a in found] == [(("_NUMA0", "_PORT0"),), ()]
    assert found[-1].numa_free == ("_PORT0",)
    required = build(manager, {"hw:numa_nodes": "1",
                               "hw:pci_numa_affinity_policy": "required"},
                     ports=[{"vnic_type": "direct", "physnet": "p"}])
    assert all(a.same_subtree and not a.numa_free for a in alts(required))
    summaries = {"pf": {"parent_provider_uuid": "n0", "traits": []},
                 "n0": {"parent_provider_uuid": "root", "traits": ["HW_NUMA_ROOT"]},
                 "root": {"parent_provider_uuid": None, "traits": []},
                 "pf2": {"parent_provider_uuid": "root", "traits": []}}
    assert not candidates.accept(found[-1], {"mappings": {"_PORT0": ["pf"]}}, summaries)
    assert candidates.accept(found[-1], {"mappings": {"_PORT0": ["pf2"]}}, summaries)


# 4. memory with no page size

@pytest.mark.parametrize("specs,memory", [
    ({"hw:mem_page_size": "large"}, 513),
    ({"hw:mem_page_size": "large", "hw:numa_nodes": "2"}, 1026),
    ({"hw:mem_page_size": "1GB"}, 1536),
])
def test_memory_no_page_size_divides_is_a_problem(manager, specs, memory):
    assert has_problem(problems(manager, specs, vcpus=2, memory_mb=memory),
                       "hw:mem_page_size", "is not a multiple of")


# 5. large numbers

def test_a_huge_vcpu_count_stays_a_count(manager):
    """10^8 vCPUs without pinning is a number in the spec and in the query,
    never a set of numbered guest CPUs; numbering that many is refused."""
    spec = build(manager, {}, vcpus=100000000, memory_mb=4096)
    assert [[dict(g.resources) for g in alt.groups] for alt in alts(spec)] == [
        [{"VCPU": 100000000, "MEMORY_MB": 4096}],
        [{"VCPU": 50000000, "MEMORY_MB": 2048}, {"VCPU": 50000000, "MEMORY_MB": 2048}]]
    numa = spec.requests["numa"]
    assert (numa.vcpus, numa.cells, numa.realtime_cpus) == (100000000, (), frozenset())
    # what travels to the host is a count, not 10^8 CPU ids
    assert len(spec.to_json()) < 4096
    for specs, key in [({"hw:cpu_policy": "dedicated"}, "vcpus"),
                       ({"hw:numa_nodes": "2"}, "vcpus"),
                       ({"hw:cpu_policy": "dedicated", "hw:cpu_realtime": "yes"},
                        "hw:cpu_realtime_mask")]:
        assert has_problem(problems(manager, specs, vcpus=100000000), key,
                           "at most 65536 vCPUs"), specs


@pytest.mark.parametrize("field", ["vcpus", "memory_mb", "root_gb", "swap"])
def test_amounts_above_placement_max_are_unusable_input(manager, field):
    kwargs = {"vcpus": 2, "memory_mb": 2048, field: 2**31}
    with pytest.raises(RequestInputError, match="2147483647"):
        build(manager, {}, **kwargs)


def test_numa_nodes_bounded(manager):
    assert has_problem(problems(manager, {"hw:numa_nodes": "129"}),
                       "hw:numa_nodes", "max value of '128'")


def test_cut_alternatives_are_announced(manager, monkeypatch):
    monkeypatch.setattr(query, "MAX_ALTERNATIVES", 1)
    spec = build(manager, {"hw:numa_nodes": "2", "hw:pci_numa_affinity_policy":
                           "required"}, ports=[{"vnic_type": "direct", "physnet": "p"}] * 2)
    found = spec.placement_query()
    assert len(found.alternatives) == 1 and found.warnings
    assert "warning: more than 1" in str(found)


# 6. digits

@pytest.mark.parametrize("specs,key", [
    ({"hw:numa_cpus." + "1" * 5000: "0"}, "hw:numa_cpus." + "1" * 5000),
    ({"pci_passthrough:alias": "qat:" + "1" * 5000}, "pci_passthrough:alias"),
    ({"hw:mem_page_size": "1" * 5000}, "hw:mem_page_size"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "1" * 5000},
     "hw:cpu_dedicated_mask"),
    ({"hw:numa_nodes": "1" * 5000}, "hw:numa_nodes"),
])
def test_thousands_of_digits_are_problems(manager, specs, key):
    assert any(p.key == key for p in problems(manager, specs))


# 9. nova's NUMA semantics

def test_cell_maps_without_numa_nodes(manager):
    assert has_problem(problems(manager, {
        "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3", "hw:numa_mem.0": "2048",
        "hw:numa_mem.1": "2048"}), "hw:numa_cpus.N", "set hw:numa_nodes")
    # dedicated: one node (nova's nodes = nodes or 1), so two maps are wrong
    assert has_problem(problems(manager, {
        "hw:cpu_policy": "dedicated", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
        "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}), "hw:numa_nodes",
        "must be provided for all NUMA nodes")


@pytest.mark.parametrize("size,order", [
    ("large", ["CUSTOM_MEMORY_PAGE_1048576KB", "CUSTOM_MEMORY_PAGE_2048KB"]),
    ("any", ["CUSTOM_MEMORY_PAGE_1048576KB", "CUSTOM_MEMORY_PAGE_2048KB", "MEMORY_MB"]),
])
def test_largest_page_size_first(manager, size, order):
    spec = build(manager, {"hw:mem_page_size": size}, vcpus=2, memory_mb=2048)
    got = [next(rc for rc in a.group("_NUMA0").resources if "MEM" in rc)
           for a in alts(spec)]
    assert got == order


def test_resources_vcpu_zero_is_refused(manager):
    assert has_problem(problems(manager, {"resources:VCPU": "0"}), "resources:VCPU",
                       "not supported")


# 10. smaller

def test_vgpu_socket_affinity_adds_the_root_trait(manager):
    spec = build(manager, {"resources:VGPU": "1", "hw:numa_nodes": "1",
                           "hw:pci_numa_affinity_policy": "socket"})
    assert "COMPUTE_SOCKET_PCI_NUMA_AFFINITY" in alts(spec)[0].root_required


def test_one_problem_for_a_policy_two_plugins_read(manager):
    found = problems(manager, {"resources:VGPU": "1", "hw:pci_numa_affinity_policy": "x"},
                     ports=[{"vnic_type": "direct", "physnet": "p"}])
    assert len([p for p in found if p.key == "hw:pci_numa_affinity_policy"]) == 1


@pytest.mark.parametrize("key", ["resources1:CUSTOM_X", "resources:VGPU",
                                 "resources:DISK_GB", "resources:PCPU"])
def test_resource_amounts_bounded(manager, key):
    assert has_problem(problems(manager, {key: str(2**31)}), key, "greater than the max")
