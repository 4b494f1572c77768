"""``vgpu``: physical GPUs that offer an enabled mdev type, as VGPU providers.

Options: ``[vgpu] enabled_mdev_types`` and, per type, ``[mdev_<type>]
device_addresses`` (nova's ``[devices]`` options; see
:mod:`resources.vgpu.view`). Providers: :mod:`resources.vgpu.provider`.
Decision: host state :mod:`resources.vgpu.state`, fit/verify
:mod:`resources.vgpu.fit`, guest XML :mod:`resources.vgpu.guest`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg

from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import (
    Earlier,
    GuestFragment,
    Mappings,
    Rejection,
    ResourcePlugin,
    providers_by_suffix,
)
from compute_plugins.plugin.topology import TOPOLOGY
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.vgpu import fit as vgpu_fit
from resources.vgpu import guest, provider, summary
from resources.vgpu import request as vgpu_request
from resources.vgpu.provider import mdev_type_trait
from resources.vgpu.request import VGPUAssignment, VGPURequest
from resources.vgpu.state import VGPUState, build_state
from resources.vgpu.view import (
    InvalidMdevConfig,
    VGPUView,
    build_view,
    mdev_classes,
    register_dynamic_opts,
)

__all__ = ["InvalidMdevConfig", "VGPUAssignment", "VGPUPlugin", "VGPURequest",
           "VGPUState", "VGPUView", "mdev_type_trait", "register_dynamic_opts"]


class VGPUPlugin(ResourcePlugin[VGPUView, VGPURequest, VGPUState, VGPUAssignment]):
    """One ``VGPU`` provider per physical GPU offering an enabled mdev type.

    :param conf: the service configuration, loaded; ``[vgpu]`` and the
        ``[mdev_<type>]`` groups of ``enabled_mdev_types`` are registered
        on it.
    """

    name = "vgpu"
    #: 1.1: VGPUAssignment.host_cells; host states. 1.2: VGPURequest.isolate
    #: (group_policy=isolate), VGPUGroup.resource_class ([mdev_*] mdev_class).
    version = "1.2"
    request_type = VGPURequest
    assignment_type = VGPUAssignment
    state_type = VGPUState
    #: NUMA affinity needs the host cells of the guest's NUMA nodes: the
    #: plugin that places the guest decides first.
    needs = (TOPOLOGY,)

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        # NOTE: the configuration is loaded when plugins are built: the
        # [mdev_<type>] groups are registered now, so that the command
        # line's check of every option at start finds a bad max_instances
        # or mdev_class (exit 2) instead of each periodic failing on it.
        register_dynamic_opts(conf)

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        return [
            cfg.ListOpt(
                "enabled_mdev_types",
                default=[],
                help="The mdev types (e.g. ``nvidia-35``) offered to guests, "
                "as nova's ``[devices] enabled_mdev_types``. With several "
                "types, add a ``[mdev_<type>]`` section per type whose "
                "``device_addresses`` lists the PCI addresses of the GPUs "
                "that offer it; the first type without ``device_addresses`` "
                "is the default for every other GPU, later ones without it "
                "are ignored. A GPU listed for two types is an error.",
            ),
        ]

    def discover(self, host: HostInfo) -> VGPUView:
        """The GPUs of ``host`` offering an enabled type, with their totals."""
        return build_view(self.conf, host)

    def provider_contributions(
        self, view: VGPUView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``<nodename>_pci_<address>`` provider per GPU."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[vgpu_request.VGPURequest]:
        """``resources[N]:VGPU`` (or an ``[mdev_<type>] mdev_class``) with
        ``trait[N]:CUSTOM_MDEV_TYPE_*``."""
        return vgpu_request.parse(request_input, mdev_classes(self.conf))

    def request_groups(
        self, plugin_request: vgpu_request.VGPURequest
    ) -> list[RequestGroup]:
        """One device group per VGPU group."""
        return vgpu_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return vgpu_request.samples()

    def host_state(self, view: VGPUView, providers: Providers,
                   assignments: Sequence[VGPUAssignment]) -> VGPUState:
        """mdevs per pGPU: free, used, planned (:mod:`resources.vgpu.state`)."""
        return build_state(view, providers, assignments)

    def fit(self, state: VGPUState, request: VGPURequest, placement: Mappings,
            earlier: Earlier) -> Union[VGPUAssignment, Rejection]:
        """The pGPU and mdevs of each VGPU group (:mod:`resources.vgpu.fit`)."""
        return vgpu_fit.fit(state, request, placement, earlier)

    def verify(self, state: VGPUState, request: VGPURequest,
               assignment: VGPUAssignment) -> Optional[Rejection]:
        """The checks of ``fit`` on a recorded assignment."""
        return vgpu_fit.verify(state, request, assignment)

    def group_providers(self, request: VGPURequest, assignment: VGPUAssignment,
                        state: VGPUState) -> Mapping[str, str]:
        """Each VGPU group on the pGPU its mdevs are on."""
        return providers_by_suffix(assignment.devices)

    def utilization(self, state: VGPUState) -> Optional[float]:
        """Taken share of the pGPUs' mdevs."""
        total = sum(g.total for g in state.pgpus)
        used = sum(len(g.used_mdevs) + len(g.planned_mdevs) for g in state.pgpus)
        return min(used / total, 1.0) if total else None

    def guest_config(self, request: VGPURequest,
                     assignment: VGPUAssignment) -> Sequence[GuestFragment]:
        """One mdev ``<hostdev>`` per mdev."""
        return guest.fragments(assignment)

    def describe(self, request: VGPURequest, assignment: VGPUAssignment) -> list[str]:
        """A line per group: its vGPUs, their type and pGPU."""
        return summary.describe(request, assignment)
