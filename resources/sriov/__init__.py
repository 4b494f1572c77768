"""``sriov``: SR-IOV physical functions as ``SRIOV_NET_VF`` providers.

Options ``[sriov] physical_device_mappings`` and ``[sriov] bandwidth``; the
rules are in :mod:`resources.sriov.view`, the providers in
:mod:`resources.sriov.provider`. Decision: host state
:mod:`resources.sriov.state`, fit/verify :mod:`resources.sriov.fit` (alias
matching :mod:`resources.sriov.alias`), guest XML :mod:`resources.sriov.guest`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg

from compute_plugins.conf import pci as pci_conf
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import (
    Earlier,
    GuestFragment,
    Mappings,
    Rejection,
    ResourcePlugin,
    providers_by_suffix,
)
from compute_plugins.plugin.names import VNIC_TYPE_DIRECT, physnet_trait
from compute_plugins.plugin.topology import TOPOLOGY
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.sriov import fit as sriov_fit
from resources.sriov import guest, provider, summary
from resources.sriov import request as sriov_request
from resources.sriov.request import SRIOVAssignment, SRIOVRequest
from resources.sriov.state import SRIOVState, build_state
from resources.sriov.view import InvalidSRIOVConfig, SRIOVView, build_view

__all__ = ["InvalidSRIOVConfig", "SRIOVAssignment", "SRIOVPlugin",
           "SRIOVRequest", "SRIOVState", "SRIOVView", "VNIC_TYPE_DIRECT",
           "physnet_trait"]


class SRIOVPlugin(ResourcePlugin[SRIOVView, SRIOVRequest, SRIOVState,
                                 SRIOVAssignment]):
    """One provider per physical function with VFs.

    :param conf: the service configuration; ``[sriov]`` is registered on it.
    """

    name = "sriov"
    #: 1.1: VFAssignment physnet/bandwidth/netdev, alias devices, host_cells;
    #: AliasRequest vendor/product/device type; host states.
    #: 1.2: ``vdpa`` ports (PortRequest vnic_type vdpa, VFAssignment
    #: vdpa_dev); ports ``remote-managed`` (physnet None when tunneled) and
    #: their own affinity policy; PFState remote_managed.
    version = "1.2"
    request_type = SRIOVRequest
    assignment_type = SRIOVAssignment
    state_type = SRIOVState
    #: NUMA affinity needs the host cells of the guest's NUMA nodes: the
    #: plugin that places the guest decides first.
    needs = (TOPOLOGY,)

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        return [
            cfg.ListOpt(
                "physical_device_mappings",
                default=[],
                help="Physical network of each SR-IOV PF, as "
                "``<physnet>:<device>`` entries (neutron's SR-IOV agent "
                "syntax), the device being a network interface name "
                "(``ens1f0``) or a PCI address (``0000:5e:00.0``). The PF's "
                "provider gets the trait ``CUSTOM_PHYSNET_<PHYSNET>``. "
                "Example: ``physnet1:ens1f0,physnet2:0000:5e:00.1``.",
            ),
            cfg.ListOpt(
                "bandwidth",
                default=[],
                help="Bandwidth of each SR-IOV PF, as "
                "``<device>:<egress kbps>:<ingress kbps>`` entries (neutron's "
                "``resource_provider_bandwidths`` syntax), reported as "
                "``NET_BW_EGR_KILOBIT_PER_SEC`` and "
                "``NET_BW_IGR_KILOBIT_PER_SEC``. A direction left empty or 0 "
                "is not reported. Example: ``ens1f0:10000000:10000000``.",
            ),
        ]

    def discover(self, host: HostInfo) -> SRIOVView:
        """The PFs of ``host`` that have VFs, with physnet and bandwidth."""
        return build_view(self.conf, host)

    def provider_contributions(
        self, view: SRIOVView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``<nodename>_pf_<address>`` provider per PF."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[sriov_request.SRIOVRequest]:
        """Direct, macvtap and vdpa ports, ``pci_passthrough:alias``
        (``[pci] alias``) and ``hw:pci_numa_affinity_policy``."""
        return sriov_request.parse(request_input, pci_conf.load_aliases(self.conf))

    def request_groups(
        self, plugin_request: sriov_request.SRIOVRequest
    ) -> list[RequestGroup]:
        """One device group per port and per alias."""
        return sriov_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return sriov_request.samples()

    def host_state(self, view: SRIOVView, providers: Providers,
                   assignments: Sequence[SRIOVAssignment]) -> SRIOVState:
        """VFs and bandwidth per PF, alias devices (:mod:`resources.sriov.state`)."""
        return build_state(view, providers, assignments)

    def fit(self, state: SRIOVState, request: SRIOVRequest, placement: Mappings,
            earlier: Earlier) -> Union[SRIOVAssignment, Rejection]:
        """The VF of each port, the devices of each alias
        (:mod:`resources.sriov.fit`)."""
        return sriov_fit.fit(state, request, placement, earlier)

    def verify(self, state: SRIOVState, request: SRIOVRequest,
               assignment: SRIOVAssignment) -> Optional[Rejection]:
        """The checks of ``fit`` on a recorded assignment."""
        return sriov_fit.verify(state, request, assignment)

    def group_providers(self, request: SRIOVRequest, assignment: SRIOVAssignment,
                        state: SRIOVState) -> Mapping[str, str]:
        """Each port's group on its VF's PF, each alias group on its device."""
        return providers_by_suffix(tuple(assignment.vfs) + tuple(assignment.devices))

    def utilization(self, state: SRIOVState) -> Optional[float]:
        """Taken share of the VFs and passthrough devices."""
        total = sum(pf.total_vfs for pf in state.pfs) + len(state.devices)
        used = (sum(len(pf.used_vfs) for pf in state.pfs)
                + sum(1 for d in state.devices if d.used))
        return min(used / total, 1.0) if total else None

    def guest_config(self, request: SRIOVRequest,
                     assignment: SRIOVAssignment) -> Sequence[GuestFragment]:
        """VF interfaces and alias ``<hostdev>`` elements."""
        return guest.fragments(request, assignment)

    def describe(self, request: SRIOVRequest, assignment: SRIOVAssignment) -> list[str]:
        """A line per port or alias group: its VF and PF."""
        return summary.describe(request, assignment)
