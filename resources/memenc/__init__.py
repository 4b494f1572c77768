"""``memenc``: memory encryption contexts (AMD SEV, SEV-ES, SEV-SNP, Intel
TDX) as nova 34 schedules them.

Discovery: the models and slots of the host's domain capabilities
(:mod:`resources.memenc.view`). Providers: a ``<nodename>_<model>`` child
of the root with ``MEM_ENCRYPTION_CONTEXT`` and the model's trait
(:mod:`resources.memenc.provider`). Request: ``hw:mem_encryption`` and
``hw:mem_encryption_model`` with nova's firmware and machine type rules
(:mod:`resources.memenc.request`). Decision: :mod:`resources.memenc.fit`;
guest XML ``<launchSecurity>``: :mod:`resources.memenc.guest`.
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
)
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.memenc import fit as memenc_fit
from resources.memenc import guest, provider
from resources.memenc import request as memenc_request
from resources.memenc.fit import MemEncState
from resources.memenc.request import MemEncAssignment, MemEncRequest
from resources.memenc.view import MemEncView, build_view

#: nova's option group: an operator's nova.conf value carries over.
OPTION_GROUP = "libvirt"

__all__ = ["MemEncAssignment", "MemEncPlugin", "MemEncRequest", "MemEncState",
           "MemEncView"]


class MemEncPlugin(ResourcePlugin[MemEncView, MemEncRequest, MemEncState,
                                  MemEncAssignment]):
    """Memory encryption slots per model, on ``<nodename>_<model>`` children.

    :param conf: the service configuration; ``[libvirt]
        num_intel_tdx_guests`` is registered on it.
    """

    name = "memenc"
    version = "1.0"
    request_type = MemEncRequest
    assignment_type = MemEncAssignment
    state_type = MemEncState

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """nova's option, in nova's group ``[libvirt]``: an operator's
        nova.conf value carries over (as ``pmem``'s ``pmem_namespaces``)."""
        return [(OPTION_GROUP, [
            cfg.IntOpt(
                "num_intel_tdx_guests",
                min=0,
                help="Intel TDX guests this host can run at once (nova's "
                "option, in nova's group). Unset: no TDX slots, as nova when "
                "the misc cgroup does not say either.",
            ),
        ])]

    def discover(self, host: HostInfo) -> MemEncView:
        """The models of ``host``'s domain capabilities, with their slots."""
        return build_view(host, self.conf[OPTION_GROUP].num_intel_tdx_guests)

    def provider_contributions(
        self, view: MemEncView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``<nodename>_<model>`` provider per model with slots."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[MemEncRequest]:
        """``hw:mem_encryption`` / ``hw_mem_encryption`` and the model."""
        return memenc_request.parse(request_input)

    def request_groups(self, plugin_request: MemEncRequest) -> list[RequestGroup]:
        """One ``MEM_ENCRYPTION_CONTEXT`` with the model's trait."""
        return memenc_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return memenc_request.samples()

    def host_state(self, view: MemEncView, providers: Providers,
                   assignments: Sequence[MemEncAssignment]) -> MemEncState:
        """Each model's slots and the guests holding one."""
        return memenc_fit.build_state(view, providers, assignments)

    def fit(self, state: MemEncState, request: MemEncRequest, placement: Mappings,
            earlier: Earlier) -> Union[MemEncAssignment, Rejection]:
        """A slot of the requested model (:mod:`resources.memenc.fit`)."""
        return memenc_fit.fit(state, request, placement, earlier)

    def verify(self, state: MemEncState, request: MemEncRequest,
               assignment: MemEncAssignment) -> Optional[Rejection]:
        """The checks of ``fit`` on a recorded assignment."""
        return memenc_fit.verify(state, request, assignment)

    def group_providers(self, request: MemEncRequest, assignment: MemEncAssignment,
                        state: MemEncState) -> Mapping[str, str]:
        """``_MEMENC`` on the model's provider."""
        return {assignment.requester_id: assignment.provider_uuid}

    def utilization(self, state: MemEncState) -> Optional[float]:
        """Taken share of the slots."""
        total = sum(m.total for m in state.models)
        return min(sum(m.used for m in state.models) / total, 1.0) if total else None

    def guest_config(self, request: MemEncRequest,
                     assignment: MemEncAssignment) -> Sequence[GuestFragment]:
        """``<launchSecurity>`` (and locked memory for SEV, SEV-ES)."""
        return guest.fragments(assignment)

    def describe(self, request: MemEncRequest, assignment: MemEncAssignment) -> list[str]:
        """One line: the model and its provider."""
        return ["%s memory encryption slot (provider %s)"
                % (assignment.model, assignment.provider_uuid)]
