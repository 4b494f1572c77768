"""The SR-IOV plugin's view: physical functions with VFs, physnets, bandwidth.

A *PF* is a network PCI device that has virtual functions now. Its VF count
is udev's ``sriov_numvfs`` (``PCIDevice.num_vfs``) when udev said, since
that is the kernel's live value; otherwise the number of VFs libvirt listed
(``len(PCIDevice.virt_functions)``). A PF with no VF gets no provider; a VF
is never a PF.

Only network controllers are SR-IOV NICs: a PF whose PCI class is
``02xxxx``, or unknown (no ``<class>``, or ``ffffff`` as in libvirt's own
test data). Other PFs with VFs are not NICs: an SR-IOV vGPU (NVIDIA A100,
class ``0302xx``) has VFs that carry ``mdev_types`` and is the ``vgpu``
plugin's; such a PF (any class) whose VFs offer mdev types is skipped too,
so no device is counted twice.

Options (``[sriov]``); a device is named by its network interface (``ens1f0``)
or by its PCI address (``0000:5e:00.0``):

- ``physical_device_mappings = <physnet>:<device>,...`` (neutron's SR-IOV
  agent syntax): the PF is on that physical network (trait
  ``CUSTOM_PHYSNET_<PHYSNET>``). A device on two physnets is an error.
- ``bandwidth = <device>:<egress kbps>:<ingress kbps>,...`` (neutron's
  ``resource_provider_bandwidths`` syntax): the PF's
  ``NET_BW_EGR_KILOBIT_PER_SEC`` / ``NET_BW_IGR_KILOBIT_PER_SEC`` totals. A
  direction left empty (``ens1f0::1000000``) or 0 is not reported; a rate
  above Placement's maximum (2147483647 kbps) is an error.

A PF may be named by its address in one entry and by its netdev in another:
entries are matched to devices, and two that give one PF different values
(physnets or rates) are an :class:`InvalidSRIOVConfig` error.

Malformed entries are :class:`InvalidSRIOVConfig` errors naming the option,
the entry and the expected format. A device that is not on this host, or is
not a PF with VFs, is ignored with a warning (one file can serve many hosts).

For the decision (:mod:`resources.sriov.state`) the view also lists each
PF's VFs (address and network interface: the first ``vfs`` of libvirt's
list, in VF order), the host cells' sockets (NUMA affinity ``socket``), and
the *alias devices*: every PCI device a configured ``[pci] alias`` matches
(:mod:`resources.sriov.alias`), except the NICs' PFs above and their VFs
(they serve ports), devices that offer mdev types or whose VFs do (the
``vgpu`` plugin's) and VFs bound to a vDPA driver (a ``<capability
type='vdpa'>`` node device is their child: ``PCIDevice.vdpa_dev``), which
serve ``vdpa`` ports only, as nova's PCI stats keep ``vdpa`` devices from
every request that does not ask ``dev_type`` ``vdpa``.

nova's ``[pci] device_spec`` (:mod:`resources.sriov.devspec`), when set,
says which devices may be given (nova's whitelist):

- alias devices are the devices a spec matches (a NIC's PF and VFs
  included; never a device offering mdev types, nor a vDPA VF), each with the tags of the
  first spec it matches: its resource class (the spec's ``resource_class``,
  else ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``) and traits, and ``managed``;
- a PF that ``physical_device_mappings`` does not name serves ports with
  those of its VFs a spec with ``physical_network`` or ``remote_managed``
  matches, on that physnet (the first such VF's: VFs of one PF on two
  physnets, or remote-managed and not, are a warning, the others are left
  out); with no such VF it gets no provider. Remote-managed VFs (a SmartNIC
  DPU's, matched only with a card serial number in their VPD:
  :mod:`resources.sriov.devspec`) serve ``remote-managed`` ports only, on
  their physnet or, without one, on tunneled networks; they are never
  alias devices (nova gives them to no request but a remote-managed
  port's). A PF ``physical_device_mappings`` names keeps its physnet and
  all its VFs, unless a spec with ``remote_managed`` matches some: then its
  VFs are remote-managed when its first VF is (the others left out, a
  warning), never direct ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Optional

import os_traits
from oslo_config import cfg

from compute_plugins.conf import pci as pci_conf
from compute_plugins.host.model import HostInfo, PCIDevice
from compute_plugins.plugin.devices import (
    MAX_INVENTORY,
    InvalidOptionValue,
    NUMAParents,
    normalize_pci_address,
)
from compute_plugins.plugin.topology import cell_sockets
from compute_plugins.request.types import FrozenMap
from compute_plugins.util.text import ascii_int
from resources.sriov import alias as alias_rules
from resources.sriov import devspec

LOG = logging.getLogger(__name__)

GROUP = "sriov"
MAPPINGS = "[sriov] physical_device_mappings"
BANDWIDTH = "[sriov] bandwidth"
MAPPING_FORMAT = ("<physnet>:<device>, the device being a network interface "
                  "name or a PCI address, e.g. physnet1:ens1f0")
BANDWIDTH_FORMAT = ("<device>:<egress kbps>:<ingress kbps>, the device "
                    "being a network interface name or a PCI address and "
                    "each rate an integer >= 0 or empty, e.g. "
                    "ens1f0:10000000:10000000")


class InvalidSRIOVConfig(InvalidOptionValue):
    """A ``[sriov]`` option entry is malformed or contradicts another one."""


@dataclasses.dataclass(frozen=True)
class VFView:
    """One VF of a PF: its address, network interface (if known) and, for a
    VF bound to a vDPA driver, its vhost-vdpa device (``/dev/vhost-vdpa-0``):
    such a VF serves ``vdpa`` ports only, the others ``direct`` and
    ``macvtap`` ports only (nova's ``dev_type`` ``vdpa`` / ``type-VF``)."""

    address: str
    netdev: Optional[str] = None
    vdpa_dev: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class PFView:
    """One physical function that has VFs."""

    address: str
    vfs: int
    physnet: Optional[str] = None
    egress_kbps: Optional[int] = None
    ingress_kbps: Optional[int] = None
    #: NUMA cell whose provider is the parent; ``None`` for the root.
    cell: Optional[int] = None
    #: The VFs whose address is known (at most ``vfs``), in VF order.
    functions: tuple[VFView, ...] = ()
    #: Its VFs are ``remote_managed`` (``[pci] device_spec``): they serve
    #: ``remote-managed`` ports, and only them.
    remote_managed: bool = False

    @property
    def vdpa_vfs(self) -> int:
        """How many of its VFs are vDPA devices."""
        return sum(1 for vf in self.functions if vf.vdpa_dev)


@dataclasses.dataclass(frozen=True)
class DeviceView:
    """A PCI device a ``[pci] alias`` may name (see the module)."""

    address: str
    vendor_id: Optional[str] = None
    product_id: Optional[str] = None
    device_type: str = alias_rules.TYPE_PCI
    #: NUMA cell (None: no NUMA information, or no ``numa`` plugin).
    cell: Optional[int] = None
    #: The PF of a VF (a PF and its VFs are not given at the same time).
    parent: Optional[str] = None
    #: Its Placement resource class and traits (``[pci] device_spec``'s
    #: tags; without a device_spec ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``, none).
    resource_class: Optional[str] = None
    traits: Optional[frozenset[str]] = None
    #: ``managed`` tag: False when libvirt must not detach the device.
    managed: bool = True
    #: ``live_migratable`` tag (``"true"``/``"false"``; None: not said).
    live_migratable: Optional[str] = None
    #: ``one_time_use`` tag (``"true"``/``"false"``; None: not said).
    one_time_use: Optional[str] = None
    #: With ``[pci] report_in_placement``: the address of the device whose
    #: provider it is counted on (its own, a VF's PF;
    #: :mod:`resources.sriov.placement`); None: not in Placement.
    placed_on: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SRIOVView:
    pfs: tuple[PFView, ...] = ()
    devices: tuple[DeviceView, ...] = ()
    #: Host cell -> its socket (:func:`compute_plugins.plugin.topology.cell_sockets`).
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)


def _device_key(text: str) -> str:
    """A configured device: its normalized PCI address, else its netdev."""
    return normalize_pci_address(text) or text


def parse_mappings(entries: list[str]) -> dict[str, str]:
    """``["physnet1:ens1f0"]`` -> ``{"ens1f0": "physnet1"}``."""
    mappings: dict[str, str] = {}
    for entry in entries:
        physnet, sep, device = (part.strip() for part in entry.partition(":"))
        if not sep or not physnet or not device:
            raise InvalidSRIOVConfig(
                MAPPINGS, entry, "expected " + MAPPING_FORMAT)
        key = _device_key(device)
        if mappings.get(key, physnet) != physnet:
            raise InvalidSRIOVConfig(
                MAPPINGS, entry,
                f"device {device} is already mapped to physnet "
                f"{mappings[key]}; a device is on one physical network")
        mappings[key] = physnet
    return mappings


def _rate(entry: str, text: str) -> Optional[int]:
    text = text.strip()
    if not text:
        return None
    try:
        value = ascii_int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidSRIOVConfig(
            BANDWIDTH, entry, "expected " + BANDWIDTH_FORMAT)
    if value > MAX_INVENTORY:
        raise InvalidSRIOVConfig(
            BANDWIDTH, entry,
            f"a rate is at most {MAX_INVENTORY} kbps (Placement's maximum)")
    return value or None


Rates = tuple[Optional[int], Optional[int]]


def parse_bandwidth(entries: list[str]) -> dict[str, Rates]:
    """``["ens1f0:10:20"]`` -> ``{"ens1f0": (10, 20)}`` (egress, ingress)."""
    result: dict[str, Rates] = {}
    for entry in entries:
        parts = entry.rsplit(":", 2)
        if len(parts) != 3 or not parts[0].strip():
            raise InvalidSRIOVConfig(
                BANDWIDTH, entry, "expected " + BANDWIDTH_FORMAT)
        key = _device_key(parts[0].strip())
        if key in result:
            raise InvalidSRIOVConfig(
                BANDWIDTH, entry, f"device {parts[0].strip()} is given twice")
        result[key] = (_rate(entry, parts[1]), _rate(entry, parts[2]))
    return result


def vf_count(device: PCIDevice) -> int:
    """Number of VFs of ``device`` now (udev's ``sriov_numvfs`` wins)."""
    if device.is_vf:
        return 0
    if device.num_vfs is not None:
        return device.num_vfs
    return len(device.virt_functions)


#: PCI classes of SR-IOV NICs: network controllers (``02``), and unknown.
_UNKNOWN_CLASS = "ffffff"


def is_sriov_nic(device: PCIDevice, host: HostInfo) -> bool:
    """Whether PF ``device`` is a NIC (see the module): network or unknown
    class, and no VF of it offers mdev types."""
    code = device.class_code
    if code is not None and code != _UNKNOWN_CLASS and not code.startswith(
            "02"):
        return False
    for address in device.virt_functions:
        vf = host.pci_device(address)
        if vf is not None and vf.mdev_types:
            return False
    return True


def _lookup(config: Mapping[str, object], device: PCIDevice,
            option: str) -> Optional[str]:
    """The key of ``config`` naming ``device`` (address, then netdevs).

    :raises InvalidSRIOVConfig: two keys name the device with different
        values.
    """
    keys = [key for key in (device.address, *device.netdevs) if key in config]
    values = {repr(config[key]) for key in keys}
    if len(values) > 1:
        given = ", ".join(f"{key}: {config[key]}" for key in keys)
        raise InvalidSRIOVConfig(
            option, given,
            f"these entries name the same PF {device.address} with different "
            "values; name each device once")
    return keys[0] if keys else None


#: How a PF's VFs serve ports: their physnet, and whether remote-managed.
_Network = tuple[Optional[str], bool]


def _network_text(network: _Network) -> str:
    physnet, remote = network
    where = "physnet %s" % physnet if physnet else "no physnet"
    return "remote-managed, " + where if remote else where


def _spec_vfs(specs: tuple[devspec.DeviceSpec, ...], host: HostInfo,
              device: PCIDevice, vfs: int
              ) -> tuple[Optional[_Network], tuple[str, ...]]:
    """The network (physnet, remote-managed) and VFs (of the first
    ``vfs``) of an unmapped PF that a ``device_spec`` with
    ``physical_network`` or ``remote_managed`` matches (see the module)."""
    network: Optional[_Network] = None
    chosen: list[str] = []
    for address in device.virt_functions[:vfs]:
        spec = devspec.first_match(specs, _device(host, address, device), host)
        if spec is None or not (spec.physical_network or spec.remote_managed):
            continue
        mine = (spec.physical_network or None, spec.remote_managed)
        if network is None:
            network = mine
        if mine != network:
            LOG.warning("%s: VF %s of PF %s is on %s, its PF's other VFs on "
                        "%s; left out", devspec.OPTION, address, device.address,
                        _network_text(mine), _network_text(network))
            continue
        chosen.append(address)
    return network, tuple(chosen)


def _mapped_remote_managed(specs: tuple[devspec.DeviceSpec, ...], host: HostInfo,
                           device: PCIDevice, physnet: Optional[str],
                           functions: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    """Whether the VFs ``functions`` of a PF ``physical_device_mappings``
    names are remote-managed (a ``device_spec`` with ``remote_managed``
    matches them: nova gives them to ``remote-managed`` ports only, the
    mapping does not make them direct ones'), and those kept: the first VF
    decides, as for an unmapped PF; the others are left out (a warning)."""
    remote = {address for address in functions
              if (spec := devspec.first_match(specs, _device(host, address, device),
                                              host)) is not None
              and spec.remote_managed}
    if not remote:
        return False, functions
    first = functions[0] in remote
    kept = tuple(a for a in functions if (a in remote) == first)
    LOG.warning("%s: PF %s on physnet %s (%s): its VFs %s are remote-managed "
                "(%s remote_managed), they serve remote-managed ports only%s",
                devspec.OPTION, device.address, physnet, MAPPINGS,
                ", ".join(sorted(remote)), devspec.OPTION,
                "" if len(kept) == len(functions) else "; VFs %s left out" % ", ".join(
                    a for a in functions if a not in kept))
    return first, kept


def _device(host: HostInfo, address: str, pf: PCIDevice) -> PCIDevice:
    """The VF at ``address`` of ``pf`` (a bare one when the host lacks it)."""
    return host.pci_device(address) or PCIDevice(
        address=address, name="", phys_function=pf.address)


def build_view(conf: cfg.ConfigOpts, host: HostInfo) -> SRIOVView:
    """The SR-IOV NICs of ``host`` with VFs, with physnet and bandwidth."""
    mappings = parse_mappings(conf[GROUP].physical_device_mappings)
    bandwidth = parse_bandwidth(conf[GROUP].bandwidth)
    specs = devspec.load(conf)
    devspec.check_host(specs, host)
    parents = NUMAParents(conf, host)
    used: set[str] = set()
    pfs = []
    counted = [(d, vf_count(d)) for d in host.pci_devices
               if (d.virt_functions or d.num_vfs) and is_sriov_nic(d, host)]
    for device, vfs in sorted(counted, key=lambda dv: dv[0].address):
        if vfs <= 0:
            continue
        physnet_key = _lookup(mappings, device, MAPPINGS)
        bw_key = _lookup(bandwidth, device, BANDWIDTH)
        used.update(k for k in (device.address, *device.netdevs)
                    if k in mappings or k in bandwidth)
        egress, ingress = bandwidth[bw_key] if bw_key else (None, None)
        physnet = mappings[physnet_key] if physnet_key else None
        functions = device.virt_functions[:vfs]
        remote_managed = False
        if specs and physnet is None:
            network, functions = _spec_vfs(specs, host, device, vfs)
            if network is None or not functions:
                continue
            physnet, remote_managed = network
            vfs = len(functions)
        elif specs:
            remote_managed, functions = _mapped_remote_managed(
                specs, host, device, physnet, functions)
            vfs = len(functions)
            if not functions:
                continue
        pfs.append(PFView(
            address=device.address,
            vfs=vfs,
            physnet=physnet,
            egress_kbps=egress,
            ingress_kbps=ingress,
            cell=parents.cell(device.numa_node),
            functions=tuple(_vf_view(host, a) for a in functions),
            remote_managed=remote_managed,
        ))
    for option, config in ((MAPPINGS, mappings), (BANDWIDTH, bandwidth)):
        for key in sorted(set(config) - used):
            LOG.warning("%s: device %s is not a PF with VFs on this "
                        "host; ignored", option, key)
    in_placement = bool(conf.pci.report_in_placement)
    devices = (spec_devices(specs, host, parents, in_placement) if specs
               else alias_devices(conf, host, pfs, parents))
    return SRIOVView(tuple(pfs), devices, cell_sockets(host.cells))


def _vf_view(host: HostInfo, address: str) -> VFView:
    device = host.pci_device(address)
    netdev = device.netdevs[0] if device is not None and device.netdevs else None
    return VFView(address, netdev, device.vdpa_dev if device is not None else None)


def _offers_mdevs(device: PCIDevice, host: HostInfo) -> bool:
    """Whether the device or one of its VFs offers mdev types (vGPU)."""
    if device.mdev_types:
        return True
    return any((vf := host.pci_device(a)) is not None and bool(vf.mdev_types)
               for a in device.virt_functions)


def alias_devices(conf: cfg.ConfigOpts, host: HostInfo, pfs: list[PFView],
                  parents: NUMAParents) -> tuple[DeviceView, ...]:
    """The devices a configured alias matches (see the module).

    A malformed ``[pci] alias`` gives none, with a warning: the PFs' providers
    do not depend on it (a request naming an alias is refused at parsing).
    """
    try:
        aliases = list(pci_conf.load_aliases(conf).values())
    except pci_conf.PciInvalidAlias as err:
        LOG.warning("[pci] alias: %s; no PCI device is offered for aliases", err)
        return ()
    if not aliases:
        return ()
    nic_pfs = {pf.address for pf in pfs}
    devices = []
    for device in sorted(host.pci_devices, key=lambda d: d.address):
        if device.address in nic_pfs or device.phys_function in nic_pfs:
            continue
        if _offers_mdevs(device, host) or device.vdpa_dev:
            continue
        kind = alias_rules.device_type(device)
        if all(alias_rules.mismatch(a, device.vendor_id, device.product_id, kind)
               for a in aliases):
            continue
        devices.append(DeviceView(
            address=device.address, vendor_id=device.vendor_id,
            product_id=device.product_id, device_type=kind,
            cell=parents.cell(device.numa_node), parent=device.phys_function))
    return tuple(devices)


def spec_devices(specs: tuple[devspec.DeviceSpec, ...], host: HostInfo,
                 parents: NUMAParents, in_placement: bool = False
                 ) -> tuple[DeviceView, ...]:
    """The devices ``[pci] device_spec`` matches (see the module), with
    their spec's resource class, traits and ``managed``.

    :param in_placement: ``[pci] report_in_placement``: the devices with a
        ``physical_network`` are left out (nova does not report them, they
        serve ports) and the others say the provider they are counted on.
    """
    devices = []
    for device in sorted(host.pci_devices, key=lambda d: d.address):
        if _offers_mdevs(device, host) or device.vdpa_dev:
            continue
        spec = devspec.first_match(specs, device, host)
        if spec is None or (in_placement and spec.physical_network):
            continue
        if spec.remote_managed:
            # NOTE: nova's _filter_pools_for_unrequested_remote_managed_devices
            continue
        placed_on = None
        traits = alias_rules.spec_traits(spec.traits, spec.live_migratable)
        if in_placement:
            placed_on = device.phys_function or device.address
            if spec.one_time_use == "true" and not device.phys_function:
                # NOTE: nova's trait of its one-time-use providers
                traits |= {os_traits.HW_PCI_ONE_TIME_USE}
        devices.append(DeviceView(
            address=device.address, vendor_id=device.vendor_id,
            product_id=device.product_id,
            device_type=alias_rules.device_type(device),
            cell=parents.cell(device.numa_node), parent=device.phys_function,
            resource_class=alias_rules.spec_resource_class(
                spec.resource_class, device.vendor_id, device.product_id),
            traits=traits,
            managed=spec.managed != "false",
            live_migratable=spec.tag("live_migratable"),
            one_time_use=spec.one_time_use,
            placed_on=placed_on))
    return tuple(devices)
