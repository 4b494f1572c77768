"""Alternatives that differ only by a permutation of like guest nodes run once."""

from __future__ import annotations

from compute_plugins.request.groups import (
    KIND_DEVICE,
    KIND_GUEST_NODE,
    RequestGroup,
)
from compute_plugins.request.types import FrozenMap
from compute_plugins.scheduler.query import derive

PAGES: tuple[FrozenMap[str, int], ...] = (FrozenMap({"CUSTOM_MEMORY_PAGE_2048KB": 512}),
         FrozenMap({"CUSTOM_MEMORY_PAGE_1048576KB": 1}))


def cell(node: int, pcpus: int = 2, choices=PAGES) -> RequestGroup:
    return RequestGroup("_NUMA%d" % node, resources=FrozenMap({"PCPU": pcpus}),
                        required_traits=frozenset({"HW_NUMA_ROOT"}),
                        kind=KIND_GUEST_NODE, node=node, choices=choices)


def port(index: int) -> RequestGroup:
    return RequestGroup("_PORT%d" % index, resources=FrozenMap({"SRIOV_NET_VF": 1}),
                        kind=KIND_DEVICE, affinity="required")


def placements(query):
    """Per alternative: {cell suffix: (page class, devices under it)}."""
    result = []
    for alt in query.alternatives:
        under = {}
        for cell_suffix, dev in alt.same_subtree:
            under.setdefault(cell_suffix, set()).add(dev)
        result.append({g.requester_id: (
            next(rc for rc in g.resources if rc.startswith("CUSTOM_MEMORY_PAGE")),
            frozenset(under.get(g.requester_id, ())))
            for g in alt.groups if g.kind == KIND_GUEST_NODE})
    return result


def test_like_nodes_are_not_permuted():
    query = derive([cell(0), cell(1), port(0)])
    got = placements(query)
    # Port under one node; that node's pages and the other's: 2 x 2 choices.
    assert len(got) == 4
    multisets = {frozenset(alt.values()) for alt in got}
    assert len(multisets) == 4


def test_unlike_nodes_are_all_tried():
    query = derive([cell(0, pcpus=2), cell(1, pcpus=4), port(0)])
    # No symmetry: 2 x 2 page choices x 2 places for the port.
    assert len(query.alternatives) == 8


def test_two_ports_on_like_nodes():
    query = derive([cell(0, choices=()), cell(1, choices=()),
                                port(0), port(1)])
    got = placements_without_pages(query)
    # Both ports under one node, or one under each: two alternatives.
    assert sorted(sorted(map(sorted, alt)) for alt in got) == [
        [[], ["_PORT0", "_PORT1"]], [["_PORT0"], ["_PORT1"]]]


def placements_without_pages(query):
    result = []
    for alt in query.alternatives:
        under = {"_NUMA0": set(), "_NUMA1": set()}
        for cell_suffix, dev in alt.same_subtree:
            under[cell_suffix].add(dev)
        result.append(list(under.values()))
    return result
