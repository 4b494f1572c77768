"""Builders shared by the resource plugin tests: config, hosts, trees."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from oslo_config import cfg
from oslo_config import fixture as config_fixture
from stevedore.extension import Extension
from stevedore.named import NamedExtensionManager

from compute_plugins import conf as conf_areas
from compute_plugins.host.model import (
    CPU,
    DiskInfo,
    HostInfo,
    Mdev,
    MdevType,
    NUMACell,
    PagePool,
    PCIDevice,
)
from compute_plugins.plugin.contract import ResourcePlugin
from compute_plugins.request.inputs import RequestInput
from compute_plugins.runtime import PluginSet
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.contribution import Providers
from compute_plugins.tree.provider_tree import ProviderTree
from resources.disk import DiskPlugin
from resources.memenc import MemEncPlugin
from resources.numa import NUMAPlugin
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.pmem import PMEMPlugin
from resources.sriov import SRIOVPlugin
from resources.vgpu import VGPUPlugin

NODE = "node1"
PLUGINS: dict[str, type[ResourcePlugin]] = {
    "numa": NUMAPlugin, "vgpu": VGPUPlugin, "sriov": SRIOVPlugin, "disk": DiskPlugin,
    "memenc": MemEncPlugin, "pmem": PMEMPlugin}
GIB_KB = 1024 * 1024


def make_conf() -> tuple[cfg.ConfigOpts, config_fixture.Config]:
    """A private ConfigOpts with the framework and plugin options."""
    fixture = config_fixture.Config(cfg.ConfigOpts())
    fixture.setUp()
    conf = fixture.conf
    conf_areas.register_all(conf)
    for plugin in PLUGINS.values():
        for group, opts in plugin.list_opts():
            conf.register_opts(opts, group=group)
    conf([], project="compute-plugins-tests")
    return conf, fixture


def cell(cell_id: int, cpus: Iterable[int], memory_gb: float | None = 4,
         pages: Sequence[tuple[int, int]] | None = None) -> NUMACell:
    """A NUMA cell; ``pages`` defaults to all memory in 4 KiB pages."""
    memory_kb = None if memory_gb is None else int(memory_gb * GIB_KB)
    if pages is None:
        pages = [] if memory_kb is None else [(4, memory_kb // 4)]
    return NUMACell(
        id=cell_id,
        cpus=tuple(CPU(id=i, socket_id=cell_id) for i in cpus),
        memory_kb=memory_kb,
        pages=tuple(PagePool(size, count) for size, count in pages),
    )


def gpu(address: str, numa_node: int | None = 0,
        **types: int) -> PCIDevice:
    """A GPU offering ``types`` (type id with ``_`` for ``-`` -> instances)."""
    return PCIDevice(
        address=address,
        name="pci_" + address.replace(":", "_").replace(".", "_"),
        numa_node=numa_node,
        mdev_types=tuple(MdevType(id=t.replace("_", "-"),
                                  available_instances=n, device_api="vfio-pci")
                         for t, n in types.items()),
    )


def pf(address: str, vfs: int, numa_node: int | None = 0,
       netdev: str | None = None, num_vfs: int | None = None) -> PCIDevice:
    """A PF with ``vfs`` VFs listed by libvirt (``num_vfs`` from udev)."""
    bus = int(address.split(":")[1], 16)
    return PCIDevice(
        address=address,
        name="pci_" + address.replace(":", "_").replace(".", "_"),
        numa_node=numa_node,
        virt_functions=tuple("0000:%02x:10.%d" % (bus + 1, i)
                             for i in range(vfs)),
        max_vfs=max(vfs, 64),
        num_vfs=num_vfs,
        netdevs=(netdev,) if netdev else (),
    )


def host(cells: Sequence[NUMACell] = (), devices: Sequence[PCIDevice] = (),
         mdevs: Sequence[Mdev] = (), memory_kb: int | None = None,
         disk: DiskInfo | None = None, source: str = "/snapshots/h1",
         ) -> HostInfo:
    return HostInfo(hostname=NODE, source=source, cells=tuple(cells),
                    pci_devices=tuple(devices), mdevs=tuple(mdevs),
                    memory_kb=memory_kb, disk=disk)


def manager(conf: cfg.ConfigOpts,
            names: Sequence[str] = ("numa", "vgpu", "sriov", "disk"),
            ) -> PluginManager:
    """A PluginManager over test extensions (no entry points)."""
    # NOTE: test extensions have no entry point (stevedore's own tests pass
    # None too, though its annotation asks for one).
    exts = [Extension(n, None, PLUGINS[n], PLUGINS[n](conf))  # type: ignore[arg-type]
            for n in names]
    return PluginManager(
        conf, extension_manager=NamedExtensionManager.make_test_instance(exts))


def update(mgr: PluginManager, info: HostInfo,
           tree: ProviderTree | None = None) -> ProviderTree:
    tree = tree if tree is not None else ProviderTree()
    mgr.discover(info)
    mgr.update_provider_tree(tree, NODE)
    return tree


def dump(tree: ProviderTree) -> dict[str, dict[str, Any]]:
    """``{name: {parent, inventory: {rc: record}, traits, aggregates}}``."""
    result = {}
    for uuid in tree.get_provider_uuids():
        data = tree.data(uuid)
        parent = tree.data(data.parent_uuid).name if data.parent_uuid else None
        result[data.name] = {
            "uuid": data.uuid,
            "parent": parent,
            "inventory": {rc: dict(rec) for rc, rec in data.inventory.items()},
            "traits": set(data.traits),
            "aggregates": set(data.aggregates),
        }
    return result


def totals(tree: ProviderTree) -> dict[str, dict[str, int]]:
    """``{name: {rc: total}}`` for every provider."""
    return {name: {rc: rec["total"] for rc, rec in p["inventory"].items()}
            for name, p in dump(tree).items()}


def record(total: int, ratio: float = 1.0, reserved: int | None = None
           ) -> dict[str, Any]:
    """An inventory record; ``reserved`` only when configured (else the
    report client keeps Placement's)."""
    out: dict[str, Any] = {"total": total}
    if reserved is not None:
        out["reserved"] = reserved
    out.update(min_unit=1, max_unit=total, step_size=1,
               allocation_ratio=ratio)
    return out


class RecordingTree(ProviderTree):
    """A real ProviderTree that records every change made to it."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[str, str]] = []

    def new_child(self, name: str, parent: str, uuid: str | None = None,
                  generation: int | None = None) -> str:
        self.changes.append(("new_child", name))
        return super().new_child(name, parent, uuid, generation)

    def remove(self, name_or_uuid: str) -> None:
        self.changes.append(("remove", name_or_uuid))
        super().remove(name_or_uuid)

    def update_inventory(self, name_or_uuid: str, inventory: Any,
                         generation: int | None = None) -> bool:
        changed = super().update_inventory(name_or_uuid, inventory, generation)
        if changed:
            self.changes.append(("update_inventory", name_or_uuid))
        return changed

    def update_traits(self, name_or_uuid: str, traits: Any,
                      generation: int | None = None) -> bool:
        self.changes.append(("update_traits", name_or_uuid))
        return super().update_traits(name_or_uuid, traits, generation)

    def update_aggregates(self, name_or_uuid: str, aggregates: Any,
                          generation: int | None = None) -> bool:
        self.changes.append(("update_aggregates", name_or_uuid))
        return super().update_aggregates(name_or_uuid, aggregates, generation)


def parse(plugin: Any, extra_specs: dict[str, str] | None = None,
          ports: Sequence[dict[str, Any]] = (), image: Any = None,
          **flavor: Any) -> Any:
    """``plugin``'s request for a flavor with ``extra_specs`` (and ports,
    image); a request with problems fails the test."""
    doc = {"name": "f", "vcpus": 2, "memory_mb": 2048,
           "extra_specs": extra_specs or {}, **flavor}
    ri = RequestInput.from_dicts(doc, image, ports).for_plugin(plugin.name)
    request = plugin.parse_request(ri)
    assert not ri.has_problems(), ri.problems
    return request


def on_cells(*host_cells: int) -> dict[str, Any]:
    """``earlier`` of a guest whose NUMA node i runs on ``host_cells[i]``."""
    return {"numa": NUMAAssignment(cells=tuple(
        CellAssignment(guest_cell=i, host_cell=c)
        for i, c in enumerate(host_cells)))}


def socket_cell(cell_id: int, socket: int | None, cpus: Iterable[int],
                sockets: Iterable[int] | None = None) -> NUMACell:
    """A cell whose CPUs are all on ``socket``, or (``sockets``) spread over
    several sockets in turn."""
    spread = list(sockets) if sockets is not None else [socket]
    return NUMACell(id=cell_id, cpus=tuple(
        CPU(id=c, socket_id=spread[i % len(spread)]) for i, c in enumerate(cpus)),
        memory_kb=4 * GIB_KB, pages=(PagePool(4, GIB_KB),))


__all__ = ["Mdev", "DiskInfo"]


def encoded(plugin: ResourcePlugin, state: object) -> dict:
    """``state`` as the store holds it (the runtime's encoding)."""
    return PluginSet.of({plugin.name: plugin}).encode_state(plugin.name, state)


def decoded(plugin: ResourcePlugin, doc: object) -> object:
    """The state the runtime reads back from ``doc``."""
    return PluginSet.of({plugin.name: plugin}).decode_state(plugin.name, doc)


def providers(plugin: ResourcePlugin, view: object, nodename: str = NODE) -> Providers:
    """The providers ``plugin`` contributes for ``view``, as the manager
    hands them to ``host_state`` before any tree (the contributions' uuids)."""
    return Providers.of(nodename, plugin.provider_contributions(view, nodename))


def state_of(plugin: ResourcePlugin, view: object, assignments=(),
             nodename: str = NODE) -> object:
    """``plugin``'s host state of ``view`` under ``assignments``."""
    return plugin.host_state(view, providers(plugin, view, nodename), assignments)
