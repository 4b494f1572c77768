"""The scheduler's filter path: ours against nova's, on the same hosts.

Hosts: 2 NUMA cells of 16 cores x 2 threads (32 dedicated CPUs, 64 GiB
each); a quarter of them with 28 CPUs of cell 0 and 20 of cell 1 already
pinned (a guest of 8 dedicated CPUs on one node fits only cell 1 there),
a quarter with 28 pinned on both cells (it fits nowhere: filtered out).
One allocation candidate per host (nova's shape: its query's unsuffixed
group, on cell 0: where the guest fits only cell 1, ours moves it there).
Guest: 8 dedicated CPUs, 4 GiB, one NUMA node. A new spec object per run,
as nova's scheduler gets one per request.

- ours: ``PluginFitFilter.filter_all`` through nova's ``HostFilterHandler``
  (our RequestSpec from nova's, every host's ``PluginSet.fit``; the states come
  from an in-memory source here, the store's read is not timed);
- nova: ``NUMATopologyFilter`` + ``PciPassthroughFilter`` through the same
  handler, on nova ``HostState``s holding the same hosts as nova's objects
  (:mod:`bench.fit.nova_model`).

Both sides agree on which hosts pass (checked). Printed: the median of
``-n`` runs per host count and the ratio nova/ours. Needs nova.
Run ``python -m bench.filter [-n N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Iterable

from bench.fit import nova_model
from resources.numa.state import CellState, NUMAState

HOST_COUNTS = (100, 1000)


def cell(cell_id: int, host: int, pinned: int) -> CellState:
    first = cell_id * 32
    cpus = range(first, first + 32)
    return CellState(
        id=cell_id, provider_uuid="%08d-0000-0000-0000-%012d" % (host, cell_id),
        pcpus=frozenset(cpus), pinned=frozenset(range(first, first + pinned)),
        siblings=tuple(frozenset({c, c + 1}) for c in range(first, first + 32, 2)),
        memory_mb=65536)


def numa_state(host: int) -> NUMAState:
    pinned = {0: (28, 20), 1: (28, 28)}.get(host % 4, (0, 0))
    return NUMAState(cells=(cell(0, host, pinned[0]), cell(1, host, pinned[1])),
                     cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0, pack=True)


class Source:
    """Hosts' states from memory (the filter's ``states`` protocol)."""

    def __init__(self, states: dict) -> None:
        self.states = states

    def get(self, hosts: Iterable[str]) -> dict:
        return {h: self.states[h] for h in hosts if h in self.states}


def nova_hosts(count: int, states: dict, nova_side: bool) -> list:
    """Fresh nova HostStates (nova's side: with its NUMA topology)."""
    from nova.pci import stats as pci_stats
    from nova.scheduler import host_manager
    out = []
    for i in range(count):
        hs = host_manager.HostState("h%d" % i, "h%d" % i, None)
        # nova's candidate: its query's unsuffixed group on cell 0
        cell0 = states["h%d" % i]["numa"].cells[0].provider_uuid
        hs.allocation_candidates = [{
            "allocations": {cell0: {"resources": {"PCPU": 8, "MEMORY_MB": 4096}}},
            "mappings": {"": [cell0]}}]
        hs.cpu_allocation_ratio = hs.ram_allocation_ratio = 1.0
        if nova_side:
            hs.numa_topology = nova_model.host(states["h%d" % i]["numa"])
            hs.pci_stats = pci_stats.PciDeviceStats(hs.numa_topology)
        out.append(hs)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.filter")
    parser.add_argument("-n", type=int, default=5, help="runs per case")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from nova import objects
            from nova.scheduler import filters as nova_filters
            from nova.scheduler.filters import numa_topology_filter, pci_passthrough_filter
        except ImportError:
            print("nova is not installed: nothing to compare")
            return 0
    objects.register_all()
    from compute_plugins.nova.filters import PluginFitFilter
    from tests.unit.resources import helpers

    conf, fixture = helpers.make_conf()
    manager = helpers.manager(conf, ("numa",))
    spec_obj = objects.RequestSpec(
        flavor=objects.Flavor(name="pinned8", vcpus=8, memory_mb=4096, root_gb=0,
                              ephemeral_gb=0, swap=0,
                              extra_specs={"hw:cpu_policy": "dedicated"}),
        image=objects.ImageMeta.from_dict({"properties": {}}),
        scheduler_hints={}, pci_requests=objects.InstancePCIRequests(requests=[]),
        requested_resources=[], num_instances=1,
        instance_uuid="11111111-2222-3333-4444-555555555555")
    nova_spec = objects.RequestSpec.obj_from_primitive(spec_obj.obj_to_primitive())
    from nova.virt import hardware
    nova_spec.numa_topology = hardware.numa_get_constraints(
        nova_spec.flavor, nova_spec.image)
    handler = nova_filters.HostFilterHandler()
    print("filter path, guest of 8 dedicated CPUs on 1 node; median of %d runs"
          % args.n)
    print("%6s %12s %12s %8s" % ("hosts", "ours ms", "nova ms", "nova/ours"))
    for count in HOST_COUNTS:
        states = {"h%d" % i: {"numa": numa_state(i)} for i in range(count)}

        ours_filter = PluginFitFilter(manager.plugins, Source(states))
        nova_filter_objs = [numa_topology_filter.NUMATopologyFilter(),
                            pci_passthrough_filter.PciPassthroughFilter()]

        def timed(filters, nova_side, spec, count=count, states=states):
            runs, passed = [], None
            for _ in range(args.n):
                candidates = nova_hosts(count, states, nova_side)
                # NOTE: a new spec object per run, as nova's scheduler gets
                # one per request (the filter parses once per request).
                request = spec.obj_clone()
                start = time.perf_counter()
                got = handler.get_filtered_objects(filters, candidates, request)
                runs.append(time.perf_counter() - start)
                passed = sorted(h.host for h in got)
            return statistics.median(runs), passed

        ours_t, ours_pass = timed([ours_filter], False, spec_obj)
        nova_t, nova_pass = timed(nova_filter_objs, True, nova_spec)
        assert len(ours_pass) == count * 3 // 4, len(ours_pass)
        if ours_pass != nova_pass:
            print("hosts passed differ: ours %d, nova %d" % (len(ours_pass), len(nova_pass)))
            return 1
        print("%6d %12.1f %12.1f %8.1f" % (count, ours_t * 1000, nova_t * 1000,
                                           nova_t / ours_t))
    fixture.cleanUp()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
