"""The FPGA plugin's decision: host state, ``fit`` and ``verify``.

The state lists every card with its provider, model, cell and whether a
guest uses it. ``fit`` gives each request group a free card of the model:
the one Placement allocated the group from (``mappings`` maps the group to
its provider), or offline the free cards NUMA-affine to the guest first
(the host cells of the guest's nodes, from the ``GuestTopology`` the plugin
that places the guest published in ``earlier``:
:func:`compute_plugins.api.guest_host_cells`), then by address. The
assignment records those host cells, so that ``verify`` (which gets no
``earlier``) checks the same affinity, and the framework's verify checks
they are still where the guest sits. It returns :func:`verify` of what it built, so the checks the
compute's claim runs are the scheduler's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.api import (
    PCI_AFFINITY,
    Affinity,
    AssignmentConflict,
    Earlier,
    FrozenMap,
    Mappings,
    PluginState,
    Providers,
    Rejection,
    device_provider_name,
    guest_host_cells,
)
from compute_plugins_fpga.request import (
    PLUGIN,
    CardAssignment,
    FPGAAssignment,
    FPGARequest,
)
from compute_plugins_fpga.view import FPGAView

#: The ``<kind>`` of a card's provider name (``<nodename>_fpga_<address>``).
KIND = "fpga"


@dataclasses.dataclass(frozen=True)
class CardState:
    address: str
    provider_uuid: str
    model: str
    cell: Optional[int] = None
    used: bool = False


@dataclasses.dataclass(frozen=True)
class FPGAState(PluginState):
    cards: tuple[CardState, ...] = ()
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(default_factory=FrozenMap)

    def card(self, address: str) -> Optional[CardState]:
        for card in self.cards:
            if card.address == address:
                return card
        return None


def build_state(view: FPGAView, providers: Providers,
                assignments: Sequence[FPGAAssignment]) -> FPGAState:
    """The cards of ``view`` with those ``assignments`` use marked.

    :param providers: the plugin's own providers, handed in by the framework
        (each card's ``<nodename>_fpga_<address>``, by name -> uuid).

    :raises AssignmentConflict: a card used twice or not on this host.
    """
    known = {card.address for card in view.cards}
    used: dict[str, str] = {}
    for assignment in assignments:
        for card in assignment.cards:
            if card.address not in known:
                raise AssignmentConflict(PLUGIN, "group %s uses FPGA %s, which is "
                                         "not a card of this host"
                                         % (card.requester_id, card.address))
            if card.address in used:
                raise AssignmentConflict(PLUGIN, "FPGA %s is assigned twice (groups "
                                         "%s and %s)" % (card.address,
                                                         used[card.address],
                                                         card.requester_id))
            used[card.address] = card.requester_id
    return FPGAState(
        cards=tuple(CardState(address=c.address, model=c.model, cell=c.cell,
                              provider_uuid=providers[device_provider_name(
                                  providers.nodename, KIND, c.address)],
                              used=c.address in used)
                    for c in view.cards),
        sockets=view.sockets)


def card_problem(card: CardState, request: FPGARequest, affinity: Affinity,
                 taken: Sequence[str]) -> Optional[str]:
    """Why ``card`` cannot serve one of ``request``'s groups, or None."""
    name = "FPGA %s" % card.address
    if card.model != request.model:
        return "%s is a %s, the guest asks for %s" % (name, card.model, request.model)
    if card.used:
        return "%s is used by another guest" % name
    if card.address in taken:
        return "%s is given twice" % name
    problem = affinity.problem(card.cell)
    return None if problem is None else "%s %s" % (name, problem)


def fit(state: FPGAState, request: FPGARequest, mappings: Mappings,
        earlier: Earlier) -> Union[FPGAAssignment, Rejection]:
    affinity = Affinity(request.affinity, guest_host_cells(earlier), state.sockets,
                        key=PCI_AFFINITY)
    chosen: list[CardAssignment] = []
    for requester_id in request.requester_ids:
        taken = [c.address for c in chosen]
        if mappings is not None:
            mapped = set(mappings.get(requester_id, ()))
            options = [c for c in state.cards if c.provider_uuid in mapped]
        else:
            options = sorted(state.cards, key=lambda c: (
                affinity.rank(c.cell) is None, affinity.rank(c.cell) or 0, c.address))
        problems = []
        for card in options:
            problem = card_problem(card, request, affinity, taken)
            if problem is None:
                chosen.append(CardAssignment(requester_id, card.provider_uuid,
                                             card.address))
                break
            problems.append(problem)
        else:
            if not state.cards:
                return Rejection("this host has no FPGA card; the guest asks for "
                                 "%d %s" % (request.count, request.model))
            return Rejection("no FPGA card can serve group %s: %s"
                             % (requester_id, "; ".join(problems[:4])
                                or "Placement mapped no card to it"))
    assignment = FPGAAssignment(cards=tuple(chosen),
                                host_cells=tuple(sorted(affinity.guest_cells)))
    return verify(state, request, assignment) or assignment


def verify(state: FPGAState, request: FPGARequest,
           assignment: FPGAAssignment) -> Optional[Rejection]:
    affinity = Affinity(request.affinity, frozenset(assignment.host_cells), state.sockets,
                        key=PCI_AFFINITY)
    wanted = request.requester_ids
    if tuple(c.requester_id for c in assignment.cards) != wanted:
        return Rejection("the assignment serves FPGA groups %s, the request asks %s"
                         % (", ".join(c.requester_id for c in assignment.cards)
                            or "none", ", ".join(wanted)))
    taken: list[str] = []
    for given in assignment.cards:
        card = state.card(given.address)
        if card is None or card.provider_uuid != given.provider_uuid:
            return Rejection("FPGA %s of group %s is not a card of this host (or "
                             "not with provider %s)" % (given.address, given.requester_id,
                                                        given.provider_uuid),
                             given.provider_uuid)
        problem = card_problem(card, request, affinity, taken)
        if problem is not None:
            return Rejection(problem, card.provider_uuid)
        taken.append(card.address)
    return None
