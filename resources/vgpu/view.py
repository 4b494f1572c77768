"""The vGPU plugin's view: which physical GPU offers which enabled mdev type.

Configuration is nova's ``[devices]``, moved to ``[vgpu]``:

- ``[vgpu] enabled_mdev_types``: the mdev types offered to guests;
- ``[mdev_<type>] device_addresses``: the GPUs (PCI addresses) that offer
  ``<type>``; ``[mdev_<type>] mdev_class``: the resource class of its
  inventory (``VGPU`` by default, or ``CUSTOM_*``); ``[mdev_<type>]
  max_instances``: how many mdevs of the type the host may offer in all.
  These groups are registered when the plugin is built, after the
  configuration is loaded (nova's ``register_dynamic_opts``), so a bad value
  in them is refused when the service starts.

Type of a GPU (nova's rules): the type whose ``device_addresses`` lists it;
else the *default type*, the first enabled type without ``device_addresses``.
Further enabled types without ``device_addresses`` are ignored with a warning,
as in nova (with a single enabled type no group is needed at all). A GPU
listed under two types, or an address that is not a PCI address, is an
:class:`InvalidMdevConfig` error.

Total of a GPU (as nova counts it): ``availableInstances`` of its type plus
the mdevs of that type that already exist on it. A GPU whose total is 0, or
that does not offer its type, gets no provider. ``max_instances`` caps a type
as nova's ``_get_gpu_inventories`` does: the existing mdevs of the type count
first; then, GPU by GPU in address order, a GPU whose available instances
would take the type above the cap gets no provider (nova gives it a total of
0, which deletes its provider); the others keep their whole total.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from oslo_config import cfg, types

from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.devices import (
    InvalidOptionValue,
    NUMAParents,
    normalize_pci_address,
)
from compute_plugins.plugin.topology import cell_sockets
from compute_plugins.request.types import FrozenMap

LOG = logging.getLogger(__name__)

GROUP = "vgpu"


class InvalidMdevConfig(InvalidOptionValue):
    """``[vgpu] enabled_mdev_types`` / ``[mdev_<type>]`` break nova's rules."""


def type_group(mdev_type: str) -> str:
    """Name of the per-type option group: ``mdev_<type>``."""
    return f"mdev_{mdev_type}"


def register_dynamic_opts(conf: cfg.ConfigOpts) -> None:
    """Register ``[mdev_<type>] device_addresses`` for every enabled type.

    Call after the configuration files are loaded (the group names depend on
    ``[vgpu] enabled_mdev_types``); calling it again is harmless.
    """
    for mdev_type in conf[GROUP].enabled_mdev_types:
        opt = cfg.ListOpt(
            "device_addresses",
            default=[],
            item_type=types.String(),
            help="PCI addresses of the physical GPUs that offer mdev "
            f"type {mdev_type!r}.",
        )
        conf.register_opt(opt, group=type_group(mdev_type))
        conf.register_opt(cfg.StrOpt(
            "mdev_class",
            default="VGPU",
            regex=r"^(VGPU|CUSTOM_[A-Z0-9_]+)$",
            max_length=255,
            help="Resource class of the mdevs of type "
            f"{mdev_type!r}: VGPU, or a name prefixed by CUSTOM_."),
            group=type_group(mdev_type))
        conf.register_opt(cfg.IntOpt(
            "max_instances",
            default=None,
            min=1,
            help=f"Number of mdevs of type {mdev_type!r} the host may "
            "offer in all; unset: what the GPUs allow."),
            group=type_group(mdev_type))


def mdev_classes(conf: cfg.ConfigOpts) -> frozenset[str]:
    """The resource classes a request may ask mdevs as: ``VGPU`` and every
    enabled type's ``[mdev_<type>] mdev_class`` (nova's
    ``_get_supported_mdev_resource_classes``)."""
    register_dynamic_opts(conf)
    return frozenset({"VGPU"} | {conf[type_group(t)].mdev_class
                                 for t in conf[GROUP].enabled_mdev_types})


@dataclasses.dataclass(frozen=True)
class GPUView:
    """One physical GPU that offers vGPUs of its enabled type."""

    address: str
    mdev_type: str
    total: int
    #: NUMA cell whose provider is the parent; ``None`` for the root.
    cell: Optional[int] = None
    #: ``[mdev_<type>] mdev_class``.
    resource_class: str = "VGPU"
    #: Uuids of the mdevs of ``mdev_type`` that exist on the GPU now (a
    #: guest reuses a free one before one is created, as nova does).
    mdevs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class VGPUView:
    gpus: tuple[GPUView, ...] = ()
    #: Host cell -> its socket (:func:`compute_plugins.plugin.topology.cell_sockets`),
    #: for the ``socket`` NUMA affinity policy.
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)


def type_mapping(conf: cfg.ConfigOpts) -> tuple[dict[str, str], Optional[str]]:
    """``({gpu address: type}, default type)`` from the configuration.

    :raises InvalidMdevConfig: a duplicate or malformed device address.
    """
    register_dynamic_opts(conf)
    mapping: dict[str, str] = {}
    default: Optional[str] = None
    for mdev_type in dict.fromkeys(conf[GROUP].enabled_mdev_types):
        group = type_group(mdev_type)
        addresses = conf[group].device_addresses
        if not addresses:
            if default is None:
                default = mdev_type
            else:
                LOG.warning("[vgpu] enabled_mdev_types: the default mdev "
                            "type is already %s (no [%s] device_addresses) "
                            "so %s will not be used",
                            default, type_group(default), mdev_type)
            continue
        for raw in addresses:
            address = normalize_pci_address(raw)
            if address is None:
                raise InvalidMdevConfig(
                    f"[{group}] device_addresses", raw,
                    "a PCI address such as 0000:84:00.0 is expected")
            if address in mapping:
                raise InvalidMdevConfig(
                    f"[{group}] device_addresses", raw,
                    "a GPU can offer one mdev type only; it is also listed "
                    f"in [{type_group(mapping[address])}] device_addresses")
            mapping[address] = mdev_type
    return mapping, default


def build_view(conf: cfg.ConfigOpts, host: HostInfo) -> VGPUView:
    """The GPUs of ``host`` offering an enabled type (see the module)."""
    if not conf[GROUP].enabled_mdev_types:
        return VGPUView()
    mapping, default = type_mapping(conf)
    known = {device.address for device in host.pci_devices}
    for address in sorted(set(mapping) - known):
        LOG.warning("[%s] device_addresses: no PCI device %s on this host",
                    type_group(mapping[address]), address)
    parents = NUMAParents(conf, host)
    existing_uuids: dict[tuple[str, str], list[str]] = {}
    for mdev in host.mdevs:
        if mdev.parent:
            parent = normalize_pci_address(mdev.parent) or mdev.parent
            existing_uuids.setdefault((parent, mdev.type), []).append(mdev.uuid)
    existing = {key: len(uuids) for key, uuids in existing_uuids.items()}

    # NOTE: as nova, the existing mdevs of a type count against its
    # max_instances before any GPU's available instances.
    used: dict[str, int] = {}
    for (_parent, type_id), count in existing.items():
        used[type_id] = used.get(type_id, 0) + count
    gpus = []
    capable = [d for d in host.pci_devices if d.mdev_types]
    for device in sorted(capable, key=lambda d: d.address):
        mdev_type = mapping.get(device.address, default)
        if mdev_type is None:
            continue
        offered = [t for t in device.mdev_types if t.id == mdev_type]
        if not offered:
            continue
        available = sum(t.available_instances for t in offered)
        limit = conf[type_group(mdev_type)].max_instances
        if limit and used.get(mdev_type, 0) + available > limit:
            LOG.debug("[%s] max_instances = %d: GPU %s and its %d available "
                      "mdevs are not offered", type_group(mdev_type), limit,
                      device.address, available)
            continue
        used[mdev_type] = used.get(mdev_type, 0) + available
        total = available + existing.get((device.address, mdev_type), 0)
        if total <= 0:
            continue
        gpus.append(GPUView(
            device.address, mdev_type, total, parents.cell(device.numa_node),
            conf[type_group(mdev_type)].mdev_class,
            tuple(sorted(existing_uuids.get((device.address, mdev_type), ())))))
    return VGPUView(tuple(gpus), cell_sockets(host.cells))
