"""``numa``: a provider per host NUMA cell: its CPUs, memory, huge pages.

The tree gets a ``<nodename>_NUMA<id>`` child of the compute root per cell
(trait ``HW_NUMA_ROOT``); see :mod:`resources.numa.view` for how the
``[compute]`` options split CPUs and memory, and :mod:`resources.numa.provider`
for the inventory records. The plugin has no options of its own: it reads
the framework's ``[compute]`` group, and nova's ``[neutron] physnets``,
``[neutron_physnet_NAME]`` and ``[neutron_tunnel]`` (:mod:`resources.numa.networks`),
named as in nova.

The decision: :mod:`resources.numa.state` (what is free per cell under the
guests in force), :mod:`resources.numa.fit` (which host cell, CPUs and page
size each guest node gets; complete and polynomial), ``verify`` (the same
per-cell checks, :mod:`resources.numa.cell`) and
:mod:`resources.numa.guest` (the domain XML).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg

from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import (
    Earlier,
    GroupAllocation,
    GuestFragment,
    Mappings,
    Rejection,
    ResourcePlugin,
)
from compute_plugins.plugin.topology import TOPOLOGY
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.numa import allocation as numa_allocation
from resources.numa import fit as numa_fit
from resources.numa import guest, networks, options, provider, summary
from resources.numa import request as numa_request
from resources.numa.request import NUMAAssignment, NUMARequest
from resources.numa.state import NUMAState, build_state
from resources.numa.view import (
    InvalidCPUSet,
    NUMAView,
    build_view,
    page_resource_class,
)

__all__ = ["InvalidCPUSet", "NUMAPlugin", "NUMAState", "NUMAView",
           "page_resource_class"]


class NUMAPlugin(ResourcePlugin[NUMAView, NUMARequest, NUMAState, NUMAAssignment]):
    """NUMA cells as ``HW_NUMA_ROOT`` providers with PCPU/VCPU/MEMORY_MB/pages.

    :param conf: the service configuration (reads ``[compute]``).
    """

    name = "numa"
    #: 1.1: ``NUMAAssignment.floating``; 1.2: ``CellState.small_page_kb``,
    #: ``NUMARequest.locked_memory`` and ``cpu_topology`` (issue 17).
    version = "1.2"
    request_type = NUMARequest
    assignment_type = NUMAAssignment
    state_type = NUMAState
    #: Its assignment says where the guest's nodes run
    #: (``NUMAAssignment.guest_topology``): devices that need it run after.
    provides = (TOPOLOGY,)
    #: The flavor keys parsed by :mod:`resources.numa.request` and
    #: :mod:`resources.numa.options` (named when the plugin is disabled).
    owned_keys = (
        "hw:cpu_policy", "hw:cpu_thread_policy", "hw:cpu_dedicated_mask",
        "hw:cpu_realtime", "hw:cpu_realtime_mask", "hw:emulator_threads_policy",
        "hw:numa_nodes", "hw:numa_cpus.*", "hw:numa_mem.*", "hw:mem_page_size",
        "hw:locked_memory", "hw:cpu_sockets", "hw:cpu_cores", "hw:cpu_threads",
        "hw:cpu_max_sockets", "hw:cpu_max_cores", "hw:cpu_max_threads",
    )

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        # NOTE: the configuration is loaded when plugins are built: the
        # [neutron_physnet_<name>] groups are registered now, so that the
        # command line's check of every option at start finds a bad
        # numa_nodes there (exit 2) instead of the discovery failing on it.
        networks.register_dynamic_opts(conf)

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """nova's network NUMA affinity groups (:mod:`resources.numa.networks`;
        the ``[neutron_physnet_NAME]`` groups are registered from
        ``[neutron] physnets`` when the view is built)."""
        return networks.list_opts()

    def discover(self, host: HostInfo) -> NUMAView:
        """The cells of ``host``; :class:`InvalidCPUSet` on bad CPU sets."""
        return build_view(self.conf, host)

    def provider_contributions(
        self, view: NUMAView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``<nodename>_NUMA<id>`` provider per cell."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[NUMARequest]:
        """CPU policies, guest NUMA topology and page size (``hw:`` keys),
        locked memory and guest CPU topology (:mod:`resources.numa.options`)."""
        request = options.parse(request_input, numa_request.parse(request_input))
        return networks.parse(request_input, request)

    def request_groups(self, plugin_request: NUMARequest) -> list[RequestGroup]:
        """One group per guest NUMA node, or one floating group."""
        return numa_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return numa_request.samples()

    def host_state(self, view: NUMAView, providers: Providers,
                   assignments: Sequence[NUMAAssignment]) -> NUMAState:
        """Free and used per cell; AssignmentConflict names a CPU pinned
        twice or a CPU, cell or page size the host lacks."""
        return build_state(
            view, providers, assignments,
            pack=self.conf.compute.packing_host_numa_cells_allocation_strategy)

    def fit(self, state: Optional[NUMAState], request: NUMARequest,
            placement: Mappings, earlier: Earlier
            ) -> Union[NUMAAssignment, Rejection]:
        """Host cell, CPUs and page size of every guest node (or why not);
        a host without NUMA state (discovery failed) is a rejection."""
        return numa_fit.fit(state, request, placement)

    def alternatives(self, state: Optional[NUMAState], request: NUMARequest,
                     placement: Mappings, earlier: Earlier
                     ) -> Iterator[NUMAAssignment]:
        """``fit``'s answer, then placements on other sets of host cells
        (for a device's NUMA affinity), best first; at most one per host
        cell (:func:`resources.numa.fit.alternatives`)."""
        return numa_fit.alternatives(state, request, placement)

    def verify(self, state: Optional[NUMAState], request: NUMARequest,
               assignment: NUMAAssignment) -> Optional[Rejection]:
        """The recorded assignment, checked with the fit's per-cell checks."""
        return numa_fit.verify(state, request, assignment)

    def allocations(self, request: NUMARequest, assignment: NUMAAssignment,
                    state: NUMAState) -> Sequence[GroupAllocation]:
        """Each guest node's group on its host cell, in the chosen page size
        (:mod:`resources.numa.allocation`)."""
        return numa_allocation.allocations(request, assignment, state)

    def utilization(self, state: NUMAState) -> float:
        """Taken share of the cells' CPUs and memory."""
        return numa_allocation.utilization(state)

    def guest_config(self, request: NUMARequest,
                     assignment: NUMAAssignment) -> Sequence[GuestFragment]:
        """``<cputune>``, ``<numatune>``, ``<cpu><numa>``, ``<memoryBacking>``."""
        return guest.fragments(request, assignment)

    def describe(self, request: NUMARequest, assignment: NUMAAssignment) -> list[str]:
        """A line per guest node: its host cell, pinned CPUs, memory and page size."""
        return summary.describe(request, assignment)
