"""The SR-IOV plugin's request: direct ports and PCI aliases.

- A port with ``vnic_type`` ``direct`` (or ``macvtap``) needs one VF of a PF
  on its physical network: group ``_PORT<N>`` (N = the port's position) with
  ``SRIOV_NET_VF:1``, its minimum bandwidth (``NET_BW_EGR_KILOBIT_PER_SEC`` /
  ``NET_BW_IGR_KILOBIT_PER_SEC``), traits ``CUSTOM_PHYSNET_<PHYSNET>`` and
  ``CUSTOM_VNIC_TYPE_DIRECT``. A ``vdpa`` port needs one VF bound to a vDPA
  driver (nova's ``dev_type`` ``vdpa``) the same way, with trait
  ``CUSTOM_VNIC_TYPE_VDPA`` instead. Other SR-IOV vnic types
  (``direct-physical``: a whole PF, ``accelerator-direct``...) are refused (a
  vnic_type neutron does not know is refused by the framework).
- A ``remote-managed`` port (a SmartNIC DPU's, nova's
  ``VNIC_TYPE_REMOTE_MANAGED``) needs one VF that ``[pci] device_spec`` says
  ``remote_managed`` (:mod:`resources.sriov.view`), on its network's
  physnet, or, on a tunneled network (no physnet, as nova allows it), on a
  PF whose remote-managed VFs have none: traits
  ``CUSTOM_VNIC_TYPE_REMOTE_MANAGED`` and ``CUSTOM_PHYSNET_<PHYSNET>`` or
  ``CUSTOM_NETWORK_TUNNEL_PROVIDER`` (neutron's trait of tunnels). A port of
  another vnic type never gets such a VF (nova's
  ``_filter_pools_for_unrequested_remote_managed_devices``).
- ``pci_passthrough:alias=<name>:<count>[,...]`` against ``[pci] alias``
  (:mod:`compute_plugins.conf.pci`): group ``_PCI<N>`` with
  ``<alias resource class>:<count>`` and the alias's traits.
- ``hw:pci_numa_affinity_policy`` (image ``hw_pci_numa_affinity_policy``):
  the NUMA affinity of every device group; unset, ports get nova's default
  ``legacy`` and alias devices their alias's ``numa_policy``. A port's own
  policy (neutron's port attribute ``numa_affinity_policy``,
  ``Port.affinity_policy``) overrides it for that port (nova's
  ``create_resource_requests``: "port NUMA policies take precedence over
  image and flavor policies").
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import os_resource_classes as orc

from compute_plugins.conf import pci as pci_conf
from compute_plugins.plugin import devices, names
from compute_plugins.request import rules
from compute_plugins.request.groups import (
    AFFINITY_POLICIES,
    KIND_DEVICE,
    KIND_ROOT,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import FrozenMap, enum_field

PLUGIN = "sriov"
ALIAS_KEY = "pci_passthrough:alias"
# nova's pattern with the count bounded (``\d{1,4}``): no int-digit limit.
ALIAS_PATTERN = r"[^:]+:\d{1,4}(?:\s*,\s*[^:]+:\d{1,4})*"
#: The same language without the ambiguity (``[^:]+`` takes blanks too, so
#: nova's ``\s*,\s*[^:]+`` splits them 2**n ways on ``a:1 , a:1 , ...:``,
#: exponential time): the blanks after the comma are the name's.
ALIAS_MATCH = r"[^:]+:\d{1,4}(?:\s*,[^:]+:\d{1,4})*"
#: A ``vdpa`` port's VF is bound to a vDPA driver (nova's ``dev_type`` ``vdpa``).
VDPA = "vdpa"
#: neutron's vnic type of a SmartNIC DPU's port (nova's
#: ``VNIC_TYPE_REMOTE_MANAGED``).
REMOTE_MANAGED = "remote-managed"
VF_VNIC_TYPES = ("direct", "macvtap", VDPA, REMOTE_MANAGED)
#: vnic types that need a device this plugin does not provide.
UNSUPPORTED_VNIC_TYPES = ("direct-physical",
                          "accelerator-direct", "accelerator-direct-physical")
SOCKET_TRAIT = devices.SOCKET_TRAIT


@dataclasses.dataclass(frozen=True)
class PortRequest:
    """One port's VF.

    :param physnet: its network's physnet; None only for a
        ``remote-managed`` port on a tunneled network.
    :param affinity_policy: the port's own NUMA affinity policy, None when
        it has none (the request's then, :func:`port_affinity_policy`).
    """

    port_id: str
    index: int
    physnet: Optional[str]
    vnic_type: str = enum_field(VF_VNIC_TYPES, "direct")
    min_kbps_egress: int = 0
    min_kbps_ingress: int = 0
    affinity_policy: Optional[str] = enum_field(AFFINITY_POLICIES)

    @property
    def remote_managed(self) -> bool:
        """Whether the port needs a remote-managed VF (and only it may get one)."""
        return self.vnic_type == REMOTE_MANAGED

    @property
    def requester_id(self) -> str:
        return "_PORT%d" % self.index


@dataclasses.dataclass(frozen=True)
class AliasRequest:
    """``count`` devices of the ``[pci] alias`` named ``name``; the device
    it matches (:mod:`resources.sriov.alias`): ``vendor_id``,
    ``product_id``, ``device_type`` when the alias gives them."""

    name: str
    index: int
    count: int
    resource_class: str
    traits: frozenset[str] = frozenset()
    numa_policy: str = enum_field(AFFINITY_POLICIES, "legacy")
    vendor_id: Optional[str] = None
    product_id: Optional[str] = None
    device_type: Optional[str] = enum_field(pci_conf.DEVICE_TYPES)
    #: The alias's ``live_migratable`` (``"true"``/``"false"``; None: any).
    live_migratable: Optional[str] = enum_field(("true", "false"))

    @property
    def requester_id(self) -> str:
        return "_PCI%d" % self.index


@dataclasses.dataclass(frozen=True)
class SRIOVRequest(PluginRequest):
    ports: tuple[PortRequest, ...] = ()
    aliases: tuple[AliasRequest, ...] = ()
    affinity_policy: Optional[str] = enum_field(AFFINITY_POLICIES)


@dataclasses.dataclass(frozen=True)
class VFAssignment:
    """The PF and VF serving one port, with what the port takes of the PF.

    :param physnet: the port's physical network (the PF's); "" for a
        ``remote-managed`` port on a tunneled network.
    :param egress_kbps: / :param ingress_kbps: the port's minimum bandwidth,
        taken from the PF's.
    :param vf_netdev: the VF's network interface (a ``macvtap`` port's
        ``<source dev>``), "" when unknown.
    :param vdpa_dev: a ``vdpa`` port's vhost-vdpa device (its
        ``<source dev>``, ``/dev/vhost-vdpa-0``), "" for other ports.
    """

    requester_id: str
    provider_uuid: str
    pf_address: str
    vf_address: str = ""
    port_id: str = ""
    physnet: str = ""
    egress_kbps: int = 0
    ingress_kbps: int = 0
    vf_netdev: str = ""
    vdpa_dev: str = ""


@dataclasses.dataclass(frozen=True)
class DeviceAssignment:
    """One PCI device given to the guest for a ``pci_passthrough:alias``.

    :param provider_uuid: the uuid a provider of the device has
        (:mod:`resources.sriov.state`).
    """

    requester_id: str
    alias: str
    address: str
    provider_uuid: str = ""


@dataclasses.dataclass(frozen=True)
class SRIOVAssignment(PluginAssignment):
    """The sriov plugin's part of the decision.

    :param vfs: one per port, in the request's port order.
    :param devices: the alias devices, by alias then device.
    :param host_cells: the host cells of the guest's NUMA nodes the NUMA
        affinity was decided against (empty: no NUMA topology); ``verify``
        checks the affinity against them.
    """

    vfs: tuple[VFAssignment, ...] = ()
    devices: tuple[DeviceAssignment, ...] = ()
    host_cells: tuple[int, ...] = ()


def parse(ri: RequestInput, aliases: dict[str, pci_conf.PciAlias]
          ) -> Optional[SRIOVRequest]:
    policy = devices.pci_affinity_policy(ri)
    ports = []
    for index, port in enumerate(ri.ports):
        source = "port[%d]" % index
        if port.vnic_type in UNSUPPORTED_VNIC_TYPES:
            ri.report("vnic_type", port.vnic_type, "vnic_type %s is not "
                      "supported: the sriov plugin provides VFs (vnic_type "
                      "%s or %s)" % (port.vnic_type, ", ".join(VF_VNIC_TYPES[:-1]),
                                      VF_VNIC_TYPES[-1]), source)
            continue
        if port.vnic_type not in VF_VNIC_TYPES:
            continue
        if not port.physnet and port.vnic_type != REMOTE_MANAGED:
            ri.report("physnet", None, "an SR-IOV port (vnic_type %s) needs the "
                      "physical network of its network" % port.vnic_type, source)
            continue
        ports.append(PortRequest(
            port_id=port.id, index=index, physnet=port.physnet,
            vnic_type=port.vnic_type, min_kbps_egress=port.min_kbps_egress,
            min_kbps_ingress=port.min_kbps_ingress,
            affinity_policy=port.affinity_policy))
    alias_requests: list[AliasRequest] = []
    if ALIAS_KEY in ri.extra_specs:
        ri.claim(ALIAS_KEY)
        value = rules.check_pattern(ri, ALIAS_KEY, ri.extra_specs[ALIAS_KEY],
                                    ALIAS_MATCH, shown=ALIAS_PATTERN)
        if value:
            seen: set[str] = set()
            for part in value.split(","):
                name, _, count_text = part.rpartition(":")
                name, count = name.strip(), int(count_text)
                if name not in aliases:
                    ri.report(ALIAS_KEY, value, "PCI alias %s is not defined" % name)
                    continue
                if name in seen:
                    ri.report(ALIAS_KEY, value, "PCI alias %s is requested twice"
                              % name)
                    continue
                seen.add(name)
                if count == 0:
                    continue
                alias = aliases[name]
                alias_requests.append(AliasRequest(
                    name=name, index=len(alias_requests), count=count,
                    resource_class=alias.resource_class, traits=alias.traits,
                    numa_policy=alias.numa_policy,
                    vendor_id=alias.vendor_id and alias.vendor_id.lower(),
                    product_id=alias.product_id and alias.product_id.lower(),
                    device_type=alias.device_type,
                    live_migratable=alias.live_migratable))
    if not ports and not alias_requests:
        return None
    return SRIOVRequest(ports=tuple(ports), aliases=tuple(alias_requests),
                        affinity_policy=policy)


def port_affinity_policy(req: SRIOVRequest, port: PortRequest) -> str:
    """NUMA affinity policy of ``port``'s VF: the port's own, else the
    request's (nova's precedence), else nova's default ``legacy``."""
    return port.affinity_policy or req.affinity_policy or "legacy"


def port_traits(port: PortRequest) -> frozenset[str]:
    """The traits of the PF ``port`` needs (see the module)."""
    vnic = (names.VNIC_TYPE_REMOTE_MANAGED if port.remote_managed
            else names.VNIC_TYPE_VDPA if port.vnic_type == VDPA
            else names.VNIC_TYPE_DIRECT)
    network = (names.physnet_trait(port.physnet) if port.physnet
               else names.NETWORK_TUNNEL_PROVIDER)
    return frozenset({vnic, network})


def alias_affinity_policy(req: SRIOVRequest, alias: AliasRequest) -> str:
    """NUMA affinity policy of an alias's devices: the request's policy,
    else the alias's ``numa_policy`` (nova's precedence)."""
    return req.affinity_policy or alias.numa_policy


def request_groups(req: SRIOVRequest) -> list[RequestGroup]:
    groups = []
    socket = req.affinity_policy == "socket"
    for port in req.ports:
        affinity = port_affinity_policy(req, port)
        socket = socket or affinity == "socket"
        resources = {orc.SRIOV_NET_VF: 1}
        if port.min_kbps_egress:
            resources[orc.NET_BW_EGR_KILOBIT_PER_SEC] = port.min_kbps_egress
        if port.min_kbps_ingress:
            resources[orc.NET_BW_IGR_KILOBIT_PER_SEC] = port.min_kbps_ingress
        groups.append(RequestGroup(
            requester_id=port.requester_id, resources=FrozenMap(resources),
            required_traits=port_traits(port),
            owner=PLUGIN, kind=KIND_DEVICE, affinity=affinity))
    for alias in req.aliases:
        affinity = alias_affinity_policy(req, alias)
        socket = socket or affinity == "socket"
        groups.append(RequestGroup(
            requester_id=alias.requester_id,
            resources=FrozenMap({alias.resource_class: alias.count}),
            required_traits=alias.traits, owner=PLUGIN, kind=KIND_DEVICE,
            affinity=affinity))
    if socket:
        groups.append(RequestGroup(
            requester_id="", required_traits=frozenset({SOCKET_TRAIT}),
            owner=PLUGIN, kind=KIND_ROOT))
    return groups


def samples() -> list[RequestInput]:
    """Representative requests (the plugin's ``sample_requests``): a direct
    port, one with guaranteed bandwidth, two ports on the guest's own NUMA
    cell."""
    flavor = {"name": "sriov.sample", "vcpus": 2, "memory_mb": 2048}
    return [
        RequestInput.from_dicts(flavor, ports=[
            {"id": "port0", "vnic_type": "direct", "physnet": "physnet1"}]),
        RequestInput.from_dicts(flavor, ports=[
            {"id": "port0", "vnic_type": "direct", "physnet": "physnet2",
             "min_kbps_egress": 5000000, "min_kbps_ingress": 5000000}]),
        RequestInput.from_dicts(
            {**flavor, "extra_specs": {"hw:numa_nodes": "1",
                                       "hw:pci_numa_affinity_policy": "required"}},
            ports=[{"id": "port0", "vnic_type": "direct", "physnet": "physnet1"},
                   {"id": "port1", "vnic_type": "direct", "physnet": "physnet1"}]),
    ]
