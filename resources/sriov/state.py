"""The SR-IOV plugin's host state: VFs and bandwidth per PF, alias devices.

- Per PF (a provider ``<nodename>_pf_<address>``): its physnet, NUMA cell,
  VFs (address, network interface) and which of them the assignments in
  force use; its bandwidth capacity per direction (None: not reported) and
  what the ports in force take. Only VFs whose address libvirt listed can be
  given: a PF whose ``sriov_numvfs`` exceeds that list has fewer here than
  its ``SRIOV_NET_VF`` inventory.
- Per alias device: vendor, product, device type, NUMA cell, its PF when it
  is a VF, and whether an assignment uses it. With ``[pci]
  report_in_placement`` a device's ``provider_uuid`` is its provider's in
  nova's layout (:mod:`resources.sriov.placement`: its own, a VF's PF's);
  without, the one its provider would have (``provider_uuid(nodename,
  "pci", address)``): no provider is reported for it, and ``fit`` only
  honours a mapping of an alias group when the allocation has one.

The PFs' provider uuids are the plugin's providers handed to ``host_state``
(:class:`~compute_plugins.tree.contribution.Providers`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Optional

from compute_plugins.plugin import names
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.request.types import FrozenMap
from compute_plugins.tree.contribution import Providers
from resources.sriov import placement
from resources.sriov.provider import KIND
from resources.sriov.request import PLUGIN, SRIOVAssignment
from resources.sriov.view import DeviceView, SRIOVView, VFView

#: Kind of an alias device's provider name (``<nodename>_pci_<address>``).
DEVICE_KIND = "pci"


@dataclasses.dataclass(frozen=True)
class PFState:
    """One PF: its VFs and bandwidth, free and used.

    :param total_vfs: its ``SRIOV_NET_VF`` inventory.
    :param egress_kbps: / :param ingress_kbps: bandwidth capacity (None:
        not reported, so a port with a minimum bandwidth cannot use it).
    """

    address: str
    provider_uuid: str
    total_vfs: int
    physnet: Optional[str] = None
    cell: Optional[int] = None
    vfs: tuple[VFView, ...] = ()
    used_vfs: frozenset[str] = frozenset()
    egress_kbps: Optional[int] = None
    ingress_kbps: Optional[int] = None
    used_egress_kbps: int = 0
    used_ingress_kbps: int = 0
    #: Its VFs serve ``remote-managed`` ports only (:class:`PFView`).
    remote_managed: bool = False

    def has_vf(self, address: str) -> bool:
        return any(vf.address == address for vf in self.vfs)

    def free_vfs(self, taken: frozenset[str] = frozenset()) -> tuple[VFView, ...]:
        """The VFs no assignment (nor ``taken``) uses, in VF order."""
        return tuple(vf for vf in self.vfs
                     if vf.address not in self.used_vfs and vf.address not in taken)


@dataclasses.dataclass(frozen=True)
class DeviceState:
    """One PCI device an alias may name."""

    address: str
    provider_uuid: str
    device_type: str
    vendor_id: Optional[str] = None
    product_id: Optional[str] = None
    cell: Optional[int] = None
    parent: Optional[str] = None
    used: bool = False
    #: From ``[pci] device_spec`` (:class:`~resources.sriov.view.DeviceView`).
    resource_class: Optional[str] = None
    traits: Optional[frozenset[str]] = None
    managed: bool = True
    live_migratable: Optional[str] = None
    #: On a provider of nova's layout (``[pci] report_in_placement``).
    placed: bool = False


@dataclasses.dataclass(frozen=True)
class SRIOVState(PluginState):
    """PFs, alias devices and the host cells' sockets (NUMA affinity)."""

    pfs: tuple[PFState, ...] = ()
    devices: tuple[DeviceState, ...] = ()
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)

    @functools.cached_property
    def _free_by_cell(self) -> FrozenMap[int, int]:
        free: dict[int, set[str]] = {}
        for pf in self.pfs:
            if pf.cell is not None:
                free.setdefault(pf.cell, set()).update(
                    vf.address for vf in pf.free_vfs())
        for device in self.devices:
            if device.cell is not None and not device.used:
                free.setdefault(device.cell, set()).add(device.address)
        return FrozenMap({cell: len(found) for cell, found in free.items() if found})

    def free_devices_by_cell(self) -> FrozenMap[int, int]:
        """Host cell -> its free VFs and alias devices (nova's PCI pools'
        counts), for the guest's cell order
        (:class:`compute_plugins.plugin.topology.HoldsCellDevices`)."""
        return self._free_by_cell

    def pf(self, address: str) -> Optional[PFState]:
        for pf in self.pfs:
            if pf.address == address:
                return pf
        return None

    def device(self, address: str) -> Optional[DeviceState]:
        for device in self.devices:
            if device.address == address:
                return device
        return None

    def related(self, device: DeviceState) -> tuple[str, ...]:
        """Addresses that cannot be given with ``device``: its PF, or its
        VFs (nova gives a PF or its VFs, never both)."""
        if device.parent is not None:
            return (device.parent,)
        return tuple(d.address for d in self.devices if d.parent == device.address)


def _conflict(reason: str) -> AssignmentConflict:
    return AssignmentConflict(PLUGIN, reason)


def pf_provider(providers: Providers, address: str) -> str:
    """The uuid of the provider of the PF at ``address``."""
    return providers[names.device_provider_name(providers.nodename, KIND, address)]


def _alias_taken(view: SRIOVView,
                 assignments: Sequence[SRIOVAssignment]) -> set[str]:
    """Addresses of VFs an alias device takes: the VF itself, or every VF
    of a PF given whole (with ``[pci] device_spec`` a NIC's PF and VFs are
    alias devices too)."""
    given = {d.address for a in assignments for d in a.devices}
    taken = set(given)
    for pf in view.pfs:
        if pf.address in given:
            taken.update(f.address for f in pf.functions)
    return taken


def _pf_states(view: SRIOVView, providers: Providers,
               assignments: Sequence[SRIOVAssignment]) -> tuple[PFState, ...]:
    pfs = {pf.address: pf for pf in view.pfs}
    used: dict[str, set[str]] = {a: set() for a in pfs}
    egress = dict.fromkeys(pfs, 0)
    ingress = dict.fromkeys(pfs, 0)
    seen: dict[str, str] = {}
    by_alias = _alias_taken(view, assignments)
    for assignment in assignments:
        for vf in assignment.vfs:
            pf = pfs.get(vf.pf_address)
            if pf is None:
                raise _conflict("port %s uses PF %s, which is not an SR-IOV PF "
                                "of this host" % (vf.port_id or vf.requester_id,
                                                  vf.pf_address))
            provider = pf_provider(providers, pf.address)
            if vf.provider_uuid != provider:
                raise _conflict("port %s names provider %s for PF %s, whose "
                                "provider is %s" % (vf.port_id, vf.provider_uuid,
                                                    pf.address, provider))
            if not any(f.address == vf.vf_address for f in pf.functions):
                raise _conflict("port %s uses VF %s, which is not a VF of PF %s "
                                "on this host" % (vf.port_id, vf.vf_address,
                                                  pf.address))
            if vf.vf_address in seen:
                raise _conflict("VF %s is assigned twice (ports %s and %s)"
                                % (vf.vf_address, seen[vf.vf_address], vf.port_id))
            if vf.vf_address in by_alias:
                raise _conflict("VF %s of port %s is given to an alias too"
                                % (vf.vf_address, vf.port_id))
            seen[vf.vf_address] = vf.port_id
            used[pf.address].add(vf.vf_address)
            egress[pf.address] += vf.egress_kbps
            ingress[pf.address] += vf.ingress_kbps
    # NOTE: ports taking more bandwidth than a PF has now ([sriov]
    # bandwidth lowered since) are no conflict: they run; new ports that
    # need bandwidth there do not fit until some is freed.
    states = []
    for address, pf in pfs.items():
        states.append(PFState(
            address=address,
            provider_uuid=pf_provider(providers, address),
            total_vfs=pf.vfs, physnet=pf.physnet, cell=pf.cell,
            vfs=pf.functions,
            used_vfs=frozenset(used[address] | {f.address for f in pf.functions
                                                if f.address in by_alias}),
            egress_kbps=pf.egress_kbps, ingress_kbps=pf.ingress_kbps,
            used_egress_kbps=egress[address], used_ingress_kbps=ingress[address],
            remote_managed=pf.remote_managed))
    return tuple(states)


def _device_provider(providers: Providers, device: DeviceView) -> str:
    """The uuid of the provider of an alias device: nova's layout's
    (``[pci] report_in_placement``), else the one it would have."""
    if device.placed_on is not None:
        return providers[placement.provider_name(providers.nodename,
                                                 device.placed_on)]
    return names.provider_uuid(providers.nodename, DEVICE_KIND, device.address)


def _device_states(view: SRIOVView, providers: Providers,
                   assignments: Sequence[SRIOVAssignment]) -> tuple[DeviceState, ...]:
    devices = {d.address: d for d in view.devices}
    seen: dict[str, str] = {}
    for assignment in assignments:
        for given in assignment.devices:
            device = devices.get(given.address)
            if device is None:
                raise _conflict("alias %s uses PCI device %s, which this host "
                                "does not offer for aliases"
                                % (given.alias, given.address))
            if given.address in seen:
                raise _conflict("PCI device %s is assigned twice (aliases %s and "
                                "%s)" % (given.address, seen[given.address],
                                         given.alias))
            seen[given.address] = given.alias
    for address in seen:
        parent = devices[address].parent
        if parent is not None and parent in seen:
            raise _conflict("PF %s and its VF %s are both assigned"
                            % (parent, address))
    # NOTE: a VF a port uses is taken for aliases too (its PF: fit's
    # device_problem, through the PF's used VFs).
    by_ports = {vf.vf_address for a in assignments for vf in a.vfs}
    return tuple(
        DeviceState(address=d.address,
                    provider_uuid=_device_provider(providers, d),
                    device_type=d.device_type, vendor_id=d.vendor_id,
                    product_id=d.product_id, cell=d.cell, parent=d.parent,
                    used=d.address in seen or d.address in by_ports,
                    resource_class=d.resource_class, traits=d.traits,
                    managed=d.managed, live_migratable=d.live_migratable,
                    placed=d.placed_on is not None)
        for d in devices.values())


def build_state(view: SRIOVView, providers: Providers,
                assignments: Sequence[SRIOVAssignment]) -> SRIOVState:
    """The :class:`SRIOVState` of ``view`` under ``assignments``.

    :param providers: the plugin's providers (one per PF, by name).

    :raises AssignmentConflict: a VF or device given twice (or a PF with one
        of its VFs), one the host lacks, or a provider uuid that is not the
        PF's.
    """
    return SRIOVState(pfs=_pf_states(view, providers, assignments),
                      devices=_device_states(view, providers, assignments),
                      sockets=view.sockets)
