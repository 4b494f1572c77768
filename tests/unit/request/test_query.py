"""The Placement query a spec derives: groups Placement accepts, the group
policy and its filter, legacy PCI affinity, announced cuts.

(Symmetric alternatives are in test_query_symmetry.py; every alternative
sent to a real Placement in tests/functional/request.)
"""

from __future__ import annotations

import pytest

from compute_plugins.scheduler import query
from compute_plugins.scheduler.query import preview
from tests.unit.request.conftest import build


def alts(spec):
    return preview(spec).alternatives


# Placement answers 400 to a group without resources outside same_subtree.
@pytest.mark.parametrize("specs", [
    {"trait:CUSTOM_X": "required"},
    {"hw:numa_nodes": "1", "trait:HW_CPU_X86_AVX2": "required"},
    {"member_of": "in:7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d", "hw:numa_nodes": "2"},
    {"member_of": "!7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d"},
])
def test_every_group_has_resources_or_is_in_a_subtree(manager, specs):
    for alt in alts(build(manager, specs, vcpus=2, memory_mb=2048)):
        in_subtree = {s for pair in alt.same_subtree for s in pair}
        for group in alt.groups:
            assert group.resources or group.requester_id in in_subtree, alt


def test_two_guest_nodes_use_group_policy_none_and_the_filter(manager):
    spec = build(manager, {"hw:numa_nodes": "2"},
                 ports=[{"vnic_type": "direct", "physnet": "p"}] * 2)
    alt = alts(spec)[0]
    assert alt.group_policy == "none" and alt.distinct == ("_NUMA0", "_NUMA1")
    same = {"mappings": {"_NUMA0": ["a"], "_NUMA1": ["a"], "_PORT0": ["p"],
                         "_PORT1": ["p"]}}
    apart = {"mappings": {"_NUMA0": ["a"], "_NUMA1": ["b"], "_PORT0": ["p"],
                          "_PORT1": ["p"]}}
    assert not query.accept(alt, same) and query.accept(alt, apart)


def test_legacy_adds_an_alternative_without_same_subtree_last(manager):
    spec = build(manager, {"hw:numa_nodes": "1"},
                 ports=[{"vnic_type": "direct", "physnet": "p"}])
    found = alts(spec)
    assert [a.same_subtree for a in found] == [(("_NUMA0", "_PORT0"),), ()]
    assert found[-1].unattached == ("_PORT0",)
    required = build(manager, {"hw:numa_nodes": "1",
                               "hw:pci_numa_affinity_policy": "required"},
                     ports=[{"vnic_type": "direct", "physnet": "p"}])
    assert all(a.same_subtree and not a.unattached for a in alts(required))
    summaries = {"pf": {"parent_provider_uuid": "n0", "traits": []},
                 "n0": {"parent_provider_uuid": "root", "traits": ["HW_NUMA_ROOT"]},
                 "root": {"parent_provider_uuid": None, "traits": []},
                 "pf2": {"parent_provider_uuid": "root", "traits": []}}
    assert not query.accept(found[-1], {"mappings": {"_PORT0": ["pf"]}}, summaries)
    assert query.accept(found[-1], {"mappings": {"_PORT0": ["pf2"]}}, summaries)


def test_cut_alternatives_are_announced(manager, monkeypatch):
    monkeypatch.setattr(query, "MAX_ALTERNATIVES", 1)
    spec = build(manager, {"hw:numa_nodes": "2", "hw:pci_numa_affinity_policy":
                           "required"}, ports=[{"vnic_type": "direct", "physnet": "p"}] * 2)
    found = preview(spec)
    assert len(found.alternatives) == 1 and found.warnings
    assert "warning: more than 1" in str(found)
