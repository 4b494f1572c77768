"""The benchmark's hosts: four shapes, discovered by the real plugins,
reported to Placement by the report client and published to the store.

- ``2cell``: 2 NUMA cells of 16 dedicated CPUs and 32 GiB;
- ``8cell``: 8 cells of 8 dedicated CPUs and 8 GiB;
- ``gpu``: 2 cells of 16 shared CPUs, a GPU (8 ``nvidia-35`` mdevs) per cell;
- ``sriov``: 2 cells of 16 shared CPUs, a PF with 8 VFs on ``physnet1``
  under cell 0.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any, Optional

from oslo_config import cfg
from stevedore import extension, named

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
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.placement import report
from compute_plugins.runtime import manager as runtime_manager
from compute_plugins.runtime.manager import PluginManager

SHAPES = ("2cell", "8cell", "gpu", "sriov")
PF = "0000:5e:00.0"


def _cells(count: int, cpus: int, memory_mb: int) -> tuple[NUMACell, ...]:
    return tuple(NUMACell(i, tuple(CPU(i * cpus + c, socket_id=0) for c in range(cpus)),
                          memory_kb=memory_mb * 1024, pages=(PagePool(4, memory_mb * 256),))
                 for i in range(count))


def host_info(name: str, shape: str) -> HostInfo:
    devices: list[PCIDevice] = []
    if shape == "8cell":
        cells = _cells(8, 8, 8192)
    else:
        cells = _cells(2, 16, 32768)
    if shape == "gpu":
        devices = [PCIDevice(address="0000:3b:00.%d" % i, name="pci_0000_3b_00_%d" % i,
                             vendor_id="10de", product_id="1eb8", class_code="030200",
                             numa_node=i,
                             mdev_types=(MdevType("nvidia-35", available_instances=8),))
                   for i in range(2)]
    if shape == "sriov":
        devices = [PCIDevice(address=PF, name="pci_0000_5e_00_0", vendor_id="8086",
                             product_id="1572", class_code="020000", numa_node=0,
                             max_vfs=8, num_vfs=8,
                             virt_functions=tuple("0000:5e:%02x.0" % (0x10 + v)
                                                  for v in range(8)))]
    return HostInfo(hostname=name, source="bench", cells=cells,
                    pci_devices=tuple(devices), disk=DiskInfo(1000, 1000))


@functools.lru_cache(maxsize=1)
def _plugin_classes() -> dict[str, tuple[Any, Any]]:
    """Every installed plugin: name -> (entry point, class); read once."""
    return {ep.name: (ep, ep.load())
            for ep in metadata.entry_points(group=runtime_manager.NAMESPACE)}


def manager(shape: str, cached: bool = False) -> PluginManager:
    """The plugins as the shape's agent configures them.

    :param cached: the enabled plugins' classes found once per process
        instead of through stevedore's entry points (80% of the time of
        this call); each manager still has its own plugin objects.
    """
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-bench", default_config_files=[],
         default_config_dirs=[])
    loaded = None
    if cached:
        classes = _plugin_classes()
        loaded = named.NamedExtensionManager.make_test_instance([
            extension.Extension(name, classes[name][0], classes[name][1],
                                classes[name][1](conf))
            for name in conf.compute_plugins.enabled_plugins])
    plugins = PluginManager(conf, extension_manager=loaded)
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    if shape in ("2cell", "8cell"):
        conf.set_override("cpu_dedicated_set", "0-%d" % (63 if shape == "8cell" else 31),
                          "compute")
    conf.set_override("physical_device_mappings", ["physnet1:%s" % PF], "sriov")
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "vgpu")
    return plugins


def build(client: Any, store: HostStateStore, count: int,
          managers: Optional[dict[str, PluginManager]] = None) -> dict[str, int]:
    """``count`` hosts, shapes in turn; shape -> how many.

    :param managers: filled with host -> its plugins, discovered (to
        publish its state again under claims).
    """
    reporter = report.ReportClient(client, refresh_interval=0, sleep=lambda s: None)
    made: dict[str, int] = {}
    for i in range(count):
        shape = SHAPES[i % len(SHAPES)]
        name = "bench-%s-%04d" % (shape, i)
        plugins = manager(shape)
        plugins.discover(host_info(name, shape))
        result = reporter.periodic(plugins.update_provider_tree, name)
        if not result.ok:
            raise RuntimeError("host %s: %s" % (name, result.error))
        tree = reporter.provider_tree()
        providers = {u: tree.data(u).name for u in tree.get_provider_uuids_in_tree(name)}
        built, broken = plugins.host_states(name, {})
        if broken:
            raise RuntimeError("host %s: %s" % (name, broken))
        states, _ = plugins.plugins.encode_states(built)
        store.publish(name, states, 0, nodename=name, providers=providers)
        made[shape] = made.get(shape, 0) + 1
        if managers is not None:
            managers[name] = plugins
    return made
