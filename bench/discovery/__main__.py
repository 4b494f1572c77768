"""discover + update_provider_tree of the built-in plugins on a big host,
against nova's ProviderTree doing the same tree work.

The host: 8 NUMA cells, 448 CPUs, huge pages, 16 vGPU-capable GPUs and 16
SR-IOV PFs with 128 VFs each, plus local disk (41 providers). Like is
compared with like, ours and nova's samples interleaved:

- ``first``: ours: a fresh ``PluginManager`` and
  :class:`compute_plugins.tree.provider_tree.ProviderTree`, ``discover`` +
  ``update_provider_tree`` (the first periodic; the project's
  ``functools`` caches are cleared first, as in a new process); nova: a
  fresh ``nova.compute.provider_tree.ProviderTree`` built to the same tree
  (``new_root``/``new_child``, ``update_inventory``, ``update_traits``,
  ``update_aggregates``).
- ``steady``: ours: ``discover`` + ``update_provider_tree`` on the
  up-to-date tree (every periodic after the first); nova: the same
  ``update_inventory``/``update_traits``/``update_aggregates`` calls on its
  up-to-date tree (what nova's driver does each periodic), nothing changed.
- ``steady tree``: ours: ``update_provider_tree`` alone, after the
  plugins' ``discover`` (untimed); against the same nova figure.

Each of our periodics gets host facts of its own (a new ``HostInfo``, as
discovery returns every periodic, made untimed before the sample), so
nothing is reused across periodics that a real agent would not reuse
either. nova's samples follow the making of host facts too, so both start
from the caches discovery leaves. nova is handed the finished inventory
dicts: its driver's share of working them out from the host is not
counted, only the tree work; ours counts the plugins' views.

Figures are CPU time of this process (``time.process_time``): the machines
are shared and a loaded machine stretches wall-clock time unevenly (a 3 ms
run is preempted where a 1 ms one is not). Each figure is the median of N
samples; the ratio is ours/nova (below 1: ours is faster).

Run ``python -m bench.discovery [-n N]``; nova is imported when importable
(the ``test`` extra installs it), otherwise only our figures are printed.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.host.model import (
    CPU,
    DiskInfo,
    HostInfo,
    MdevType,
    NUMACell,
    PagePool,
    PCIDevice,
)
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.provider_tree import ProviderTree

NODE = "bench-node"
CELLS = 8
CPUS = 448
GPUS = 16
PFS = 16
VFS = 128
GIB_KB = 1024 * 1024


def synthetic_host() -> HostInfo:
    per_cell = CPUS // CELLS
    cells = []
    for c in range(CELLS):
        cpus = tuple(CPU(id=i, socket_id=c // 2, core_id=i % per_cell)
                     for i in range(c * per_cell, (c + 1) * per_cell))
        cells.append(NUMACell(
            id=c, cpus=cpus, memory_kb=256 * GIB_KB,
            pages=(PagePool(4, 192 * GIB_KB // 4), PagePool(2048, 16384),
                   PagePool(1048576, 32))))
    devices = []
    for g in range(GPUS):
        address = "0000:%02x:00.0" % (0x20 + g)
        devices.append(PCIDevice(
            address=address, name="pci_" + address.replace(":", "_")
            .replace(".", "_"), numa_node=g % CELLS,
            mdev_types=(MdevType("nvidia-35", available_instances=16),
                        MdevType("nvidia-36", available_instances=8))))
    for p in range(PFS):
        bus = 0x60 + 2 * p
        address = "0000:%02x:00.0" % bus
        vfs = tuple("0000:%02x:%02x.%d" % (bus + 1, v // 8, v % 8)
                    for v in range(VFS))
        devices.append(PCIDevice(
            address=address, name="pci_" + address.replace(":", "_")
            .replace(".", "_"), numa_node=p % CELLS, virt_functions=vfs,
            max_vfs=VFS, num_vfs=VFS, netdevs=("ens%df0" % p,)))
        devices.extend(
            PCIDevice(address=vf, name="pci_" + vf.replace(":", "_")
                      .replace(".", "_"), numa_node=p % CELLS,
                      phys_function=address)
            for vf in vfs)
    return HostInfo(hostname=NODE, source="bench://synthetic",
                    cells=tuple(cells), pci_devices=tuple(devices),
                    memory_kb=CELLS * 256 * GIB_KB,
                    disk=DiskInfo(total_gb=3500, free_gb=3000))


def make_conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-bench")
    conf.set_override("cpu_dedicated_set", "8-55,64-111,120-167,176-223,"
                      "232-279,288-335,344-391,400-447", "compute")
    conf.set_override("cpu_shared_set", "0-7,56-63,112-119,168-175,"
                      "224-231,280-287,336-343,392-399", "compute")
    return conf


def configure_plugins(conf: cfg.ConfigOpts) -> None:
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    conf.set_override("physical_device_mappings",
                      ["physnet%d:ens%df0" % (p % 4, p) for p in range(PFS)],
                      "sriov")
    conf.set_override("bandwidth", ["ens%df0:25000000:25000000" % p
                                    for p in range(PFS)], "sriov")


Run = tuple[Callable[[], Any], Callable[[Any], Any]]


def interleaved(runs: dict[str, Run], repeat: int) -> dict[str, float]:
    """Median CPU time of each of ``runs``, sampled in turn ``repeat`` times.

    A run is ``(setup, fn)``: ``fn(setup())`` is timed, ``setup()`` is not.
    """
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, (setup, fn) in runs.items():
            arg = setup()
            start = time.process_time()
            fn(arg)
            samples[name].append(time.process_time() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def final_tree(mgr: PluginManager, info: HostInfo) -> ProviderTree:
    tree = ProviderTree()
    mgr.discover(info)
    mgr.update_provider_tree(tree, NODE)
    return tree


def forget_cached_results() -> None:
    """Clear every ``functools`` cache of the project's modules."""
    for name, module in list(sys.modules.items()):
        if not name.startswith(("compute_plugins", "resources")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


def nova_build(nova_tree_cls: Any, providers: list[Any]) -> Any:
    """Build ``providers`` (ours, parents first) with nova's tree."""
    tree = nova_tree_cls()
    for p in providers:
        if p.parent_uuid is None:
            tree.new_root(p.name, p.uuid)
        else:
            tree.new_child(p.name, p.parent_uuid, uuid=p.uuid)
    nova_update(tree, providers)
    return tree


def nova_update(tree: Any, providers: list[Any]) -> None:
    """What nova's driver calls on every provider, every periodic."""
    for p in providers:
        tree.update_inventory(p.uuid, p.inventory)
        tree.update_traits(p.uuid, p.traits)
        if p.aggregates:
            tree.update_aggregates(p.uuid, p.aggregates)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.discovery")
    parser.add_argument("-n", "--repeat", type=int, default=31)
    args = parser.parse_args(argv)

    conf = make_conf()
    mgr = PluginManager(conf, names=["numa", "vgpu", "sriov", "disk"])
    configure_plugins(conf)
    reference = final_tree(mgr, synthetic_host())
    assert not mgr.degraded, mgr.failures
    providers = [reference.data(u) for u in reference.get_provider_uuids()]
    nodes = {p.name: p for p in providers}

    def new_manager() -> tuple[PluginManager, HostInfo]:
        # NOTE: loading the entry points is a start-up cost, and making the
        # host facts is discovery's (libvirt), not the periodic's. What a
        # new process has not cached yet is forgotten.
        forget_cached_results()
        return (PluginManager(conf, names=["numa", "vgpu", "sriov", "disk"]),
                synthetic_host())

    def first(made: tuple[PluginManager, HostInfo]) -> None:
        final_tree(*made)

    def steady(host: HostInfo) -> None:
        mgr.discover(host)
        mgr.update_provider_tree(reference, NODE)

    def discovered() -> None:
        mgr.discover(synthetic_host())

    def steady_tree(_: None) -> None:
        mgr.update_provider_tree(reference, NODE)

    runs: dict[str, Run] = {"first": (new_manager, first),
                            "steady": (synthetic_host, steady),
                            "steady tree": (discovered, steady_tree)}
    try:
        from nova.compute import provider_tree as nova_pt
    except Exception as err:  # noqa: BLE001 - any import failure skips
        nova_pt = None
        print("nova not installed: ratios skipped (%s)" % err)
    else:
        nova_tree = nova_build(nova_pt.ProviderTree, providers)
        # NOTE: nova's samples follow the making of host facts too (not
        # used): both sides then start with the caches discovery left.
        runs["nova first"] = (synthetic_host, lambda _: nova_build(
            nova_pt.ProviderTree, providers))
        runs["nova steady"] = (synthetic_host, lambda _: nova_update(
            nova_tree, providers))
    figures = interleaved(runs, args.repeat)

    # The steady periodics changed nothing.
    assert all(reference.data(name).inventory == p.inventory
               and reference.data(name).traits == p.traits
               for name, p in nodes.items())
    print("host: %d cells, %d CPUs, %d GPUs, %d PFs x %d VFs, %d PCI "
          "devices; tree: %d providers"
          % (CELLS, CPUS, GPUS, PFS, VFS, GPUS + PFS * (1 + VFS), len(providers)))
    print("CPU time, median of %d interleaved samples:" % args.repeat)
    rows = [("first periodic: ours discover + update, fresh tree", "first",
             "nova builds the same tree", "nova first"),
            ("steady periodic: ours discover + update, no change", "steady",
             "nova updates every provider", "nova steady"),
            ("  of which the tree: ours update_provider_tree", "steady tree",
             "nova updates every provider", "nova steady")]
    for label, ours, nova_label, nova in rows:
        line = "  %s %.3f ms" % (label, figures[ours] * 1e3)
        if nova_pt is not None:
            line += "; %s %.3f ms; ratio ours/nova %.2f" % (
                nova_label, figures[nova] * 1e3, figures[ours] / figures[nova])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
