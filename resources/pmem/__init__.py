"""``pmem``: virtual persistent memory (vPMEM) namespaces, as nova.

Options: nova's ``[libvirt] pmem_namespaces`` (:mod:`resources.pmem.view`).
Providers: ``CUSTOM_PMEM_NAMESPACE_<LABEL>`` on the compute root, one unit
per namespace. Request: ``hw:pmem`` (:mod:`resources.pmem.request`).
Decision (which namespaces): :mod:`resources.pmem.fit`; guest XML ``<memory
model="nvdimm">``: :mod:`resources.pmem.guest`.
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
from compute_plugins.plugin.devices import inventory_record
from compute_plugins.plugin.topology import TOPOLOGY
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.tree.contribution import ProviderContribution, Providers
from resources.pmem import fit as pmem_fit
from resources.pmem import guest
from resources.pmem import request as pmem_request
from resources.pmem.fit import PMEMState
from resources.pmem.request import GROUP, PMEMAssignment, PMEMRequest
from resources.pmem.view import (
    InvalidPMEMConfig,
    PMEMNamespaceMissing,
    PMEMView,
    build_view,
)

__all__ = ["InvalidPMEMConfig", "PMEMAssignment", "PMEMNamespaceMissing",
           "PMEMPlugin", "PMEMRequest", "PMEMState", "PMEMView"]

#: nova's option group: an operator's nova.conf value carries over.
OPTION_GROUP = "libvirt"


class PMEMPlugin(ResourcePlugin[PMEMView, PMEMRequest, PMEMState, PMEMAssignment]):
    """vPMEM namespaces of the compute root, one resource class per label.

    :param conf: the service configuration; ``[libvirt] pmem_namespaces``
        is registered on it.
    """

    name = "pmem"
    version = "1.0"
    request_type = PMEMRequest
    assignment_type = PMEMAssignment
    state_type = PMEMState
    #: The devices go on a node of the guest's topology: the plugin that
    #: places the guest decides first.
    needs = (TOPOLOGY,)

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """nova's option, in nova's group ``[libvirt]``."""
        return [(OPTION_GROUP, [cfg.ListOpt(
            "pmem_namespaces",
            default=[],
            help="Persistent memory namespaces offered to guests, as nova's "
            "option: ``$LABEL:$NSNAME[|$NSNAME][,$LABEL:$NSNAME[|$NSNAME]]``, "
            "e.g. ``128G:ns0|ns1,MEDIUM:ns2``. Each label is a resource class "
            "``CUSTOM_PMEM_NAMESPACE_$LABEL`` on the compute node; each "
            "namespace (by its ndctl name, in devdax mode) one unit of it.",
        )])]

    def discover(self, host: HostInfo) -> PMEMView:
        """The configured namespaces, found among ``host``'s."""
        return build_view(self.conf[OPTION_GROUP].pmem_namespaces, host)

    def provider_contributions(
        self, view: PMEMView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``CUSTOM_PMEM_NAMESPACE_*`` inventory per label on the root."""
        classes = view.by_class()
        if not classes:
            return []
        return [ProviderContribution(name=nodename, inventory={
            rc: inventory_record(len(namespaces), what=rc)
            for rc, namespaces in classes.items()})]

    def parse_request(self, request_input: Any) -> Optional[PMEMRequest]:
        """``hw:pmem``."""
        return pmem_request.parse(request_input)

    def request_groups(self, plugin_request: PMEMRequest) -> list[RequestGroup]:
        """``_PMEM``: one namespace per label."""
        return pmem_request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands (the conformance kit's)."""
        return pmem_request.samples()

    def host_state(self, view: PMEMView, providers: Providers,
                   assignments: Sequence[PMEMAssignment]) -> PMEMState:
        """Every configured namespace, used or free."""
        return pmem_fit.build_state(view, providers, assignments)

    def fit(self, state: PMEMState, request: PMEMRequest, placement: Mappings,
            earlier: Earlier) -> Union[PMEMAssignment, Rejection]:
        """A free namespace per label (:mod:`resources.pmem.fit`)."""
        return pmem_fit.fit(state, request, placement, earlier)

    def verify(self, state: PMEMState, request: PMEMRequest,
               assignment: PMEMAssignment) -> Optional[Rejection]:
        """The checks of ``fit`` on a recorded assignment."""
        return pmem_fit.verify(state, request, assignment)

    def group_providers(self, request: PMEMRequest, assignment: PMEMAssignment,
                        state: PMEMState) -> Mapping[str, str]:
        """``_PMEM`` on the root."""
        return {GROUP: assignment.provider_uuid}

    def utilization(self, state: PMEMState) -> Optional[float]:
        """Taken share of the namespaces."""
        total = len(state.namespaces)
        return sum(n.used for n in state.namespaces) / total if total else None

    def guest_config(self, request: PMEMRequest,
                     assignment: PMEMAssignment) -> Sequence[GuestFragment]:
        """An NVDIMM ``<memory>`` device per namespace."""
        return guest.fragments(assignment)

    def describe(self, request: PMEMRequest, assignment: PMEMAssignment) -> list[str]:
        """A line per namespace."""
        return ["label %s -> namespace %s (%s, %d MiB)"
                % (n.label, n.name, n.devpath, n.size_kib // 1024)
                for n in assignment.namespaces]
