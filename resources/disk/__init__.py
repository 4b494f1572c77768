"""``disk``: ``DISK_GB`` of the instance store on the compute root.

Or, for shared storage, membership of the root in the aggregate of the
sharing provider. Rules in :mod:`resources.disk.view`; the host state and
the decision (which provider serves ``DISK_GB``) in :mod:`resources.disk.state`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg, types

from compute_plugins.conf import ratio_opt
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import Earlier, Mappings, Rejection, ResourcePlugin
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.disk import provider, summary
from resources.disk import request as disk_request
from resources.disk import state as disk_state
from resources.disk.request import DiskAssignment, DiskRequest
from resources.disk.state import DiskState
from resources.disk.view import DiskView, InvalidDiskConfig, build_view

__all__ = ["DiskAssignment", "DiskPlugin", "DiskRequest", "DiskState",
           "DiskView", "InvalidDiskConfig"]


class DiskPlugin(ResourcePlugin[DiskView, DiskRequest, DiskState, DiskAssignment]):
    """``DISK_GB`` on the compute root, or a shared-storage aggregate.

    :param conf: the service configuration; ``[disk]`` is registered on it.
    """

    name = "disk"
    #: 1.1: DiskAssignment.disk_gb; host states. 1.2: ephemeral encryption
    #: (DiskRequest.ephemeral_encryption*, DiskState.ephemeral_encryption_formats).
    version = "1.2"
    request_type = DiskRequest
    assignment_type = DiskAssignment
    state_type = DiskState

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        return [
            cfg.StrOpt(
                "instances_path",
                default="/var/lib/nova/instances",
                help="Where instance disks live. On a live host whose "
                "discovery gave no disk size, ``DISK_GB`` is the size of the "
                "file system holding this path (``statvfs``).",
            ),
            cfg.IntOpt(
                "reserved_host_disk_mb",
                default=0,
                min=0,
                help="Disk (MiB) kept for the host, reported as the "
                "``reserved`` of ``DISK_GB``, rounded up to whole GiB as nova "
                "does.",
            ),
            ratio_opt("disk_allocation_ratio", 1.0,
                      "Allocation ratio of ``DISK_GB`` (nova's ``disk_allocation_ratio``)."),
            cfg.StrOpt(
                "shared_storage_aggregate",
                help="Uuid of the Placement aggregate of a shared-storage "
                "provider. When set, the compute root reports no ``DISK_GB`` "
                "and joins this aggregate; the operator creates the sharing "
                "provider (trait ``MISC_SHARES_VIA_AGGREGATE``, inventory "
                "``DISK_GB``) in the same aggregate, as nova documents.",
            ),
            cfg.ListOpt(
                "ephemeral_encryption_formats",
                default=[],
                item_type=types.String(choices=disk_request.EPHEMERAL_ENCRYPTION_FORMATS),
                help="The ephemeral encryption formats (``plain``, ``luks``, "
                "``luksv2``) the host's instance disks support. When set, the "
                "compute root has the traits ``COMPUTE_EPHEMERAL_ENCRYPTION`` "
                "and ``COMPUTE_EPHEMERAL_ENCRYPTION_<FORMAT>`` that nova's "
                "``hw:ephemeral_encryption`` and "
                "``hw:ephemeral_encryption_format`` require. nova's libvirt "
                "driver reports them from its image backend, and no backend "
                "of nova 34 supports encryption yet: the default reports none.",
            ),
        ]

    def discover(self, host: HostInfo) -> DiskView:
        """``DISK_GB`` of ``host`` or its shared-storage aggregate."""
        return build_view(self.conf, host)

    def provider_contributions(
        self, view: DiskView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """The compute root's ``DISK_GB`` or aggregate, if any."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[disk_request.DiskRequest]:
        """``root_gb + ephemeral_gb + swap`` (or ``resources:DISK_GB``)."""
        return disk_request.parse(request_input)

    def request_groups(
        self, plugin_request: disk_request.DiskRequest
    ) -> list[RequestGroup]:
        """``DISK_GB`` in the unsuffixed group (the root or a sharing provider)."""
        return disk_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return disk_request.samples()

    def host_state(self, view: DiskView, providers: Providers,
                   assignments: Sequence[DiskAssignment]) -> DiskState:
        """The root's ``DISK_GB`` and what the guests take."""
        return disk_state.build_state(view, providers, assignments)

    def fit(self, state: DiskState, request: DiskRequest, placement: Mappings,
            earlier: Earlier) -> Union[DiskAssignment, Rejection, None]:
        """The provider serving ``DISK_GB`` (:mod:`resources.disk.state`)."""
        return disk_state.fit(state, request, placement, earlier)

    def verify(self, state: DiskState, request: DiskRequest,
               assignment: DiskAssignment) -> Optional[Rejection]:
        """The checks of ``fit`` on a recorded assignment."""
        return disk_state.verify(state, request, assignment)

    def group_providers(self, request: DiskRequest, assignment: DiskAssignment,
                        state: DiskState) -> Optional[Mapping[str, str]]:
        """Local disk on the root; shared storage: None, the scheduler
        takes a sharing provider Placement found in the aggregate (offline
        the assignment names none)."""
        if assignment.shared and not assignment.provider_uuid:
            return None
        return {group.requester_id: assignment.provider_uuid
                for group in self.request_groups(request)}

    def utilization(self, state: DiskState) -> Optional[float]:
        """Taken share of the root's DISK_GB (None on shared storage)."""
        if not state.capacity_gb:
            return None
        return min(max(state.used_gb / state.capacity_gb, 0.0), 1.0)

    def describe(self, request: DiskRequest, assignment: DiskAssignment) -> list[str]:
        """Where DISK_GB comes from."""
        return summary.describe(request, assignment)
