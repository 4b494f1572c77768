"""The allocation built from the plugins' assignments, and from Placement's
providers with room for the groups no plugin places."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.contract import GroupAllocation, Rejection
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import FitResult, PluginSet
from compute_plugins.scheduler.allocation import build_decision
from compute_plugins.scheduler.fitting import HostFit
from resources.numa.request import NUMAAssignment
from tests.unit.request.conftest import build, make_manager

ROOT, CELL0, CELL1, OTHER = ("root", "cell0", "cell1", "other")


@pytest.fixture(scope="module")
def manager():
    return make_manager()


def host_fit(assignments=()):
    return HostFit(host="h", nodename="h", generation=1, root_uuid=ROOT,
                   states={"numa": None},
                   result=FitResult(assignments=FrozenMap(assignments)))


class NUMAWith:
    """The numa plugin's allocation hook answering ``items``."""

    def __init__(self, items):
        self.items = items

    def allocations(self, request, assignment, state):
        return self.items


def test_groups_no_plugin_places_go_to_providers_with_room_root_first(manager):
    spec = build(manager, {"resources1:CUSTOM_X": "1"}, vcpus=2, memory_mb=1024)
    room = {("1", ""): (OTHER,), ("", "VCPU"): (CELL0, ROOT),
            ("", "MEMORY_MB"): (CELL1,)}
    decision = build_decision(PluginSet(), spec, host_fit(), room)
    assert {rp: dict(r) for rp, r in decision.allocations.items()} == {
        OTHER: {"CUSTOM_X": 1}, ROOT: {"VCPU": 2}, CELL1: {"MEMORY_MB": 1024}}
    assert dict(decision.mappings) == {"1": (OTHER,), "": (CELL1, ROOT)}


def test_a_plugin_allocation_is_summed_per_provider(manager):
    spec = build(manager, {}, vcpus=4, memory_mb=2048)
    numa = NUMAWith([GroupAllocation("_SPLIT0", CELL0, {"VCPU": 2, "MEMORY_MB": 1024}),
                     GroupAllocation("_SPLIT1", CELL1, {"VCPU": 2, "MEMORY_MB": 1024})])
    decision = build_decision(PluginSet.of({"numa": numa}), spec,
                              host_fit({"numa": NUMAAssignment()}), {})
    assert {rp: dict(r) for rp, r in decision.allocations.items()} == {
        CELL0: {"VCPU": 2, "MEMORY_MB": 1024}, CELL1: {"VCPU": 2, "MEMORY_MB": 1024}}
    assert dict(decision.mappings) == {"_SPLIT0": (CELL0,), "_SPLIT1": (CELL1,)}


def test_a_plugin_allocation_that_does_not_add_up_rejects_the_host(manager):
    spec = build(manager, {}, vcpus=4, memory_mb=2048)
    numa = NUMAWith([GroupAllocation("", CELL0, {"VCPU": 3, "MEMORY_MB": 2048})])
    problem = build_decision(PluginSet.of({"numa": numa}), spec,
                             host_fit({"numa": NUMAAssignment()}), {})
    assert isinstance(problem, Rejection) and problem.plugin == "numa"
    assert "'VCPU': 3" in problem.reason and "'VCPU': 4" in problem.reason
