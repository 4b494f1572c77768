"""compute_plugins.plugin.topology against nova's own PCI NUMA affinity filter.

Every policy, device cell (or none), guest cell set and socket layout of a
4-cell host: a device is allowed by ``Affinity.rank`` exactly when nova's
``PciDeviceStats._filter_pools_for_numa_cells`` keeps a pool of one such
device for a request of one; and when an affine device is there too, nova
keeps only it, as ``rank`` puts it first.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set (see
test_nova_compat).
"""

import itertools
import os
import warnings

import pytest

from compute_plugins.plugin.topology import AFFINE, Affinity
from compute_plugins.request.types import FrozenMap

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.pci.stats as nova_stats
else:
    nova_stats = pytest.importorskip("nova.pci.stats")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from nova import objects

objects.register_all()

POLICIES = ("required", "preferred", "legacy", "socket")
LAYOUTS = ((0, 0, 1, 1), (0, 1, 2, 3), (0, 0, 0, 0), (0, 0, None, 1))
GUESTS = [frozenset(c) for n in (1, 2) for c in itertools.combinations(range(4), n)]
DEVICE_CELLS = (None, 0, 1, 2, 3)


def nova_filter(layout, policy, guest_cells, pools):
    topology = objects.NUMATopology(cells=[
        objects.NUMACell(id=i, socket=s, cpuset=set(), pcpuset=set(), memory=0,
                         siblings=[], mempages=[]) for i, s in enumerate(layout)])
    stats = nova_stats.PciDeviceStats(topology)
    request = objects.InstancePCIRequest(count=1, numa_policy=policy)
    cells = [objects.InstanceNUMACell(id=c) for c in sorted(guest_cells)]
    return [p["numa_node"] for p in
            stats._filter_pools_for_numa_cells(pools, request, cells)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("policy", POLICIES)
def test_allowed_devices_match_nova(layout, policy):
    sockets = FrozenMap(enumerate(layout))
    for guest, cell in itertools.product(GUESTS, DEVICE_CELLS):
        ours = Affinity(policy, guest, sockets).rank(cell) is not None
        theirs = nova_filter(layout, policy, guest,
                             [{"numa_node": cell, "count": 1}]) == [cell]
        assert ours == theirs, (layout, policy, sorted(guest), cell)


@pytest.mark.parametrize("policy", POLICIES)
def test_nova_takes_the_affine_device_first(policy):
    layout = (0, 0, 1, 1)
    sockets = FrozenMap(enumerate(layout))
    for guest, cell in itertools.product(GUESTS, DEVICE_CELLS):
        if cell in guest:
            continue
        affine = min(guest)
        kept = nova_filter(layout, policy, guest, [
            {"numa_node": cell, "count": 1}, {"numa_node": affine, "count": 1}])
        assert kept == [affine]
        rule = Affinity(policy, guest, sockets)
        assert rule.rank(affine) == AFFINE
        assert rule.rank(cell) is None or rule.rank(cell) > AFFINE
