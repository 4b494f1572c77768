"""Time discover + update_provider_tree of the built-in plugins on a big host.

The host: 8 NUMA cells, 448 CPUs, huge pages, 16 vGPU-capable GPUs and 16
SR-IOV PFs with 128 VFs each, plus local disk. Three figures, each the median
of N runs:

- ``first``: a fresh :class:`compute_plugins.provider_tree.ProviderTree`,
  ``PluginManager.discover`` + ``update_provider_tree`` (the first periodic);
- ``steady``: the same again on the now up-to-date tree (every periodic after);
- ``nova``: building the same final tree directly with nova's
  ``nova.compute.provider_tree.ProviderTree`` (``new_child``,
  ``update_inventory``, ``update_traits``), the baseline of the ratio.

Run ``python -m bench.discovery [-n N]``; nova is imported when importable
(e.g. ``PYTHONPATH=/path/to/nova-src``), otherwise the ratio is skipped.
"""

from __future__ import annotations

import argparse
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
from compute_plugins.manager import PluginManager
from compute_plugins.provider_tree import ProviderTree

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


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def final_tree(mgr: PluginManager, info: HostInfo) -> ProviderTree:
    tree = ProviderTree()
    mgr.discover(info)
    mgr.update_provider_tree(tree, NODE)
    return tree


def nova_build(nova_tree_cls: Any, providers: list[Any]) -> Any:
    """Build ``providers`` (ours, parents first) with nova's tree."""
    tree = nova_tree_cls()
    for p in providers:
        if p.parent_uuid is None:
            tree.new_root(p.name, p.uuid)
        else:
            tree.new_child(p.name, p.parent_uuid, uuid=p.uuid)
        tree.update_inventory(p.uuid, p.inventory)
        tree.update_traits(p.uuid, p.traits)
        if p.aggregates:
            tree.update_aggregates(p.uuid, p.aggregates)
    return tree


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.discovery")
    parser.add_argument("-n", "--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    info = synthetic_host()
    conf = make_conf()
    mgr = PluginManager(conf, names=["numa", "vgpu", "sriov", "disk"])
    configure_plugins(conf)

    reference = final_tree(mgr, info)
    assert not mgr.degraded, mgr.failures
    providers = [reference.data(u) for u in reference.get_provider_uuids()]

    # NOTE: managers are built beforehand: loading the entry points is a
    # start-up cost, not a periodic one.
    fresh = [PluginManager(conf, names=["numa", "vgpu", "sriov", "disk"])
             for _ in range(args.repeat)]

    def first() -> None:
        final_tree(fresh.pop(), info)

    def steady() -> None:
        mgr.discover(info)
        mgr.update_provider_tree(reference, NODE)

    first_t = statistics.median(timed(first, args.repeat))
    steady_t = statistics.median(timed(steady, args.repeat))
    print("host: %d cells, %d CPUs, %d GPUs, %d PFs x %d VFs, %d PCI "
          "devices; tree: %d providers"
          % (CELLS, CPUS, GPUS, PFS, VFS, len(info.pci_devices),
             len(providers)))
    print("first periodic (discover + update, fresh tree): %.2f ms "
          "(median of %d)" % (first_t * 1e3, args.repeat))
    print("steady periodic (discover + update, no change): %.2f ms"
          % (steady_t * 1e3))
    try:
        from nova.compute import provider_tree as nova_pt
    except Exception as err:  # noqa: BLE001 - any import failure skips
        print("nova not installed: ratio skipped (%s)" % err)
        return 0
    nova_t = statistics.median(timed(
        lambda: nova_build(nova_pt.ProviderTree, providers), args.repeat))
    print("nova ProviderTree, same final tree built directly: %.2f ms"
          % (nova_t * 1e3))
    print("ratio first/nova: %.2f; steady/nova: %.2f"
          % (first_t / nova_t, steady_t / nova_t))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
