"""``fpga``: FPGA cards as Placement providers, an example third-party plugin.

Everything a resource plugin does, in one small package:

- options ``[fpga] models`` (:mod:`.view`);
- ``discover``: the host's PCI devices of a configured model;
- ``provider_contributions``: one provider ``<nodename>_fpga_<address>`` per
  card, with one ``CUSTOM_FPGA_<MODEL>``, under its NUMA cell's provider;
- ``parse_request`` / ``request_groups``: ``accel:fpga=<N>`` (and
  ``accel:fpga_model``) in flavor extra specs (:mod:`.request`);
  ``sample_requests``: a few of them for the conformance kit;
- ``host_state``, ``fit``, ``verify``: which free card, NUMA-affine to where
  the guest sits (``needs = (TOPOLOGY,)``: whichever plugin places the
  guest decides first and publishes a ``GuestTopology``; :mod:`.fit`);
- ``group_providers``, ``utilization``: which card's provider serves each
  request group (the allocation the scheduler writes), how full the host is;
- ``guest_config``: a PCI ``<hostdev>`` per card (:mod:`.guest`).

Registered in ``pyproject.toml`` under the ``compute_plugins.resources``
entry-point namespace as ``fpga``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional, Union

from oslo_config import cfg

from compute_plugins.api import (
    TOPOLOGY,
    Earlier,
    GuestFragment,
    HostInfo,
    Mappings,
    ProviderContribution,
    Providers,
    Rejection,
    RequestGroup,
    RequestInput,
    ResourcePlugin,
    device_provider_name,
    inventory_record,
    parent_name,
    provider_uuid,
)
from compute_plugins_fpga import fit as fpga_fit
from compute_plugins_fpga import guest, request, view
from compute_plugins_fpga.fit import KIND, FPGAState
from compute_plugins_fpga.request import FPGAAssignment, FPGARequest
from compute_plugins_fpga.view import FPGAView

__all__ = ["FPGAAssignment", "FPGAPlugin", "FPGARequest", "FPGAState", "FPGAView"]


class FPGAPlugin(ResourcePlugin[FPGAView, FPGARequest, FPGAState, FPGAAssignment]):
    """One provider per FPGA card; ``accel:fpga=<N>`` asks for N cards."""

    name = "fpga"
    version = "1.0"
    #: NUMA affinity needs the host cells of the guest's nodes, from the
    #: plugin that places the guest (whichever it is).
    needs = (TOPOLOGY,)
    request_type = FPGARequest
    assignment_type = FPGAAssignment
    state_type = FPGAState

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        return list(view.OPTS)

    def discover(self, host: HostInfo) -> FPGAView:
        return view.build_view(self.conf, host)

    def provider_contributions(self, fpga_view: FPGAView,
                               nodename: str) -> Sequence[ProviderContribution]:
        return [
            ProviderContribution(
                name=device_provider_name(nodename, KIND, card.address),
                uuid=provider_uuid(nodename, KIND, card.address),
                parent=parent_name(nodename, card.cell),
                inventory={card.resource_class: inventory_record(
                    1, what="FPGA %s" % card.address)},
            )
            for card in fpga_view.cards
        ]

    def parse_request(self, request_input: RequestInput) -> Optional[FPGARequest]:
        return request.parse(request_input, view.model_names(self.conf))

    def request_groups(self, plugin_request: FPGARequest) -> list[RequestGroup]:
        return request.request_groups(plugin_request)

    def sample_requests(self) -> list[RequestInput]:
        """A few requests this plugin understands, for the conformance kit
        (:mod:`compute_plugins.testing`)."""
        return request.samples()

    def host_state(self, fpga_view: FPGAView, providers: Providers,
                   assignments: Sequence[FPGAAssignment]) -> FPGAState:
        return fpga_fit.build_state(fpga_view, providers, assignments)

    def fit(self, state: FPGAState, plugin_request: FPGARequest, mappings: Mappings,
            earlier: Earlier) -> Union[FPGAAssignment, Rejection]:
        return fpga_fit.fit(state, plugin_request, mappings, earlier)

    def verify(self, state: FPGAState, plugin_request: FPGARequest,
               assignment: FPGAAssignment) -> Optional[Rejection]:
        return fpga_fit.verify(state, plugin_request, assignment)

    def group_providers(self, plugin_request: FPGARequest, assignment: FPGAAssignment,
                        state: FPGAState) -> Mapping[str, str]:
        """Each ``_FPGA<i>`` group on its card's provider: the scheduler
        writes the allocation of exactly the cards ``fit`` chose."""
        return {card.requester_id: card.provider_uuid for card in assignment.cards}

    def utilization(self, state: FPGAState) -> Optional[float]:
        """The share of the host's cards in use (the scheduler's weighers)."""
        if not state.cards:
            return None
        return sum(card.used for card in state.cards) / len(state.cards)

    def guest_config(self, plugin_request: FPGARequest,
                     assignment: FPGAAssignment) -> Sequence[GuestFragment]:
        return guest.fragments(assignment)

    def describe(self, plugin_request: FPGARequest,
                 assignment: FPGAAssignment) -> list[str]:
        return ["group %s -> FPGA %s (%s)" % (card.requester_id, card.address,
                                              plugin_request.model)
                for card in assignment.cards]
