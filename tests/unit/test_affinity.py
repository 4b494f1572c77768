"""compute_plugins.plugin.topology.Affinity: nova's PCI NUMA affinity policies, one
rule (named in rejections by the device plugins' key, devices.PCI_AFFINITY)."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.devices import PCI_AFFINITY
from compute_plugins.plugin.topology import (
    AFFINE,
    FALLBACK,
    Affinity,
    cell_sockets,
    guest_host_cells,
)
from compute_plugins.request.types import FrozenMap
from tests.unit.resources.helpers import on_cells, socket_cell

#: Host cells 0, 1 on socket 0; 2, 3 on socket 1.
TWO_SOCKETS: FrozenMap[int, int] = FrozenMap({0: 0, 1: 0, 2: 1, 3: 1})


def affinity(policy, *guest_cells, sockets=TWO_SOCKETS):
    return Affinity(policy, frozenset(guest_cells), sockets, key=PCI_AFFINITY)


def test_cell_sockets_as_nova_sets_them():
    cells = [socket_cell(0, 0, [0, 1]), socket_cell(1, 1, [2, 3]),
             socket_cell(2, None, [4, 5], sockets=[0, 1]),
             socket_cell(3, None, [])]
    assert cell_sockets(cells) == {0: 0, 1: 1, 2: None, 3: None}


def test_guest_host_cells_from_the_numa_assignment():
    assert guest_host_cells(on_cells(3, 1)) == {1, 3}
    assert guest_host_cells({}) == frozenset()


@pytest.mark.parametrize("policy", [None, "required", "preferred", "legacy", "socket"])
@pytest.mark.parametrize("cell", [None, 0, 3])
def test_a_guest_without_numa_topology_is_not_constrained(policy, cell):
    assert affinity(policy).rank(cell) == AFFINE
    assert affinity(policy).problem(cell) is None


@pytest.mark.parametrize("policy", [None, "required", "preferred", "legacy", "socket"])
def test_an_affine_device_ranks_first_under_every_policy(policy):
    assert affinity(policy, 1, 2).rank(2) == AFFINE


@pytest.mark.parametrize("policy, cell, rank", [
    ("required", 0, None), ("required", None, None),
    ("legacy", 0, None), ("legacy", None, FALLBACK),
    ("preferred", 0, FALLBACK), ("preferred", None, FALLBACK),
    ("socket", 0, FALLBACK),     # same socket as the guest's cell 1
    ("socket", 2, None),         # the other socket
    ("socket", None, None),      # no NUMA information: no socket either
    (None, 3, FALLBACK),
])
def test_non_affine_devices_by_policy(policy, cell, rank):
    assert affinity(policy, 1).rank(cell) == rank
    assert (affinity(policy, 1).problem(cell) is None) == (rank is not None)


def test_socket_policy_needs_every_cell_socket():
    # nova's _filter_pools_for_socket_affinity gives nothing when a host
    # cell spans sockets, even for a device on another cell of a socket.
    sockets = FrozenMap({0: 0, 1: 0, 2: None})
    rule = affinity("socket", 1, sockets=sockets)
    assert rule.rank(0) is None
    assert rule.problem(0) == (
        "is on host cell 0; hw:pci_numa_affinity_policy=socket needs the "
        "socket of every host cell, and host cell(s) 2 span several sockets "
        "or none")


def test_socket_policy_spans_all_the_guests_sockets():
    rule = affinity("socket", 1, 2)
    assert {c: rule.rank(c) for c in range(4)} == {
        0: FALLBACK, 1: AFFINE, 2: AFFINE, 3: FALLBACK}


def test_problems_name_the_cells_and_the_rule():
    assert affinity("required", 0, 1).problem(3) == (
        "is on host cell 3; hw:pci_numa_affinity_policy=required needs a "
        "device on one of the guest's host cells (0, 1)")
    assert affinity("legacy", 0).problem(2) == (
        "is on host cell 2; hw:pci_numa_affinity_policy=legacy needs a device "
        "on one of the guest's host cells (0) or one without NUMA affinity")
    assert affinity("required", 0).problem(None) == (
        "has no NUMA affinity; hw:pci_numa_affinity_policy=required needs a "
        "device on one of the guest's host cells (0)")
    assert affinity("socket", 0).problem(3) == (
        "is on host cell 3; hw:pci_numa_affinity_policy=socket needs a device "
        "on the socket of the guest's host cells (0): host cells 0, 1")
