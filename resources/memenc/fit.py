"""The memenc plugin's host state and decision: a slot of the model.

The state lists each model's provider with its slots and the guests in
force. ``fit`` takes the provider of the requested model (with mappings:
the one Placement allocated ``_MEMENC`` from), ``verify`` checks it is this
host's provider of that model with a free slot. A slot is not a named
unit (the firmware hands out ASIDs at launch): the assignment records the
provider, and the state counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.contract import Earlier, Mappings, Rejection
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.tree.contribution import Providers
from resources.memenc.provider import provider_name
from resources.memenc.request import GROUP, PLUGIN, MemEncAssignment, MemEncRequest
from resources.memenc.view import MemEncView


@dataclasses.dataclass(frozen=True)
class ModelState:
    """One model's provider: its slots and how many guests hold one."""

    model: str
    provider_uuid: str
    total: int
    used: int = 0

    @property
    def free(self) -> int:
        """Slots no guest holds (negative when slots were lowered under
        running guests)."""
        return self.total - self.used


@dataclasses.dataclass(frozen=True)
class MemEncState(PluginState):
    """Every model this host offers."""

    models: tuple[ModelState, ...] = ()

    def model(self, name: str) -> Optional[ModelState]:
        """The provider of model ``name`` (nova's name), if this host offers it."""
        return next((m for m in self.models if m.model == name), None)


def build_state(view: MemEncView, providers: Providers,
                assignments: Sequence[MemEncAssignment]) -> MemEncState:
    """The state of ``view`` under ``assignments``.

    :raises AssignmentConflict: a guest holds a slot of a provider or
        model this host does not have.
    """
    models = {s.model: ModelState(s.model, providers[provider_name(providers.nodename,
                                                                    s.model)], s.total)
              for s in view.slots}
    used = dict.fromkeys(models, 0)
    for assignment in assignments:
        have = models.get(assignment.model)
        if have is None or have.provider_uuid != assignment.provider_uuid:
            raise AssignmentConflict(
                PLUGIN, "a guest holds a %s slot of provider %s, which this host "
                "does not offer" % (assignment.model, assignment.provider_uuid))
        used[assignment.model] += 1
    # NOTE: more guests than slots (slots lowered since) is no conflict:
    # they run; new guests do not fit.
    return MemEncState(models=tuple(dataclasses.replace(m, used=used[m.model])
                                    for m in models.values()))


def fit(state: MemEncState, request: MemEncRequest, mappings: Mappings,
        earlier: Earlier) -> Union[MemEncAssignment, Rejection]:
    """A slot of the requested model (module doc)."""
    have = state.model(request.model)
    if have is None:
        return _absent(state, request)
    if mappings is not None and have.provider_uuid not in mappings.get(GROUP, ()):
        return Rejection("group %s is allocated from %s, not from this host's %s "
                         "provider %s" % (GROUP, ", ".join(mappings.get(GROUP, ()))
                                          or "no provider", request.model,
                                          have.provider_uuid), have.provider_uuid)
    assignment = MemEncAssignment(model=request.model, provider_uuid=have.provider_uuid)
    return verify(state, request, assignment) or assignment


def _absent(state: MemEncState, request: MemEncRequest) -> Rejection:
    """Why a host without the requested model cannot serve it."""
    offered = ", ".join("%s (%d slots)" % (m.model, m.total) for m in state.models)
    return Rejection("this host offers no %s memory encryption (%s)"
                     % (request.model, "it offers " + offered if offered
                        else "its domain capabilities give none"))


def verify(state: MemEncState, request: MemEncRequest,
           assignment: MemEncAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state``."""
    if assignment.model != request.model:
        return Rejection("the assignment is a %s slot, the request asks %s"
                         % (assignment.model, request.model))
    if assignment.requester_id != GROUP:
        return Rejection("the assignment serves group %s, the request's is %s"
                         % (assignment.requester_id, GROUP))
    have = state.model(request.model)
    if have is None:
        return _absent(state, request)
    if assignment.provider_uuid != have.provider_uuid:
        return Rejection("the slot is on provider %s, this host's %s provider is %s"
                         % (assignment.provider_uuid, request.model,
                            have.provider_uuid), have.provider_uuid)
    if have.free < 1:
        return Rejection("all %d %s slots of provider %s are in use"
                         % (have.total, request.model, have.provider_uuid),
                         have.provider_uuid)
    return None
