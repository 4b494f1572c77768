"""The FPGA plugin's request and assignment.

Flavor extra specs (``accel:`` namespace):

- ``accel:fpga=<N>``: N FPGA cards (1-8), each a whole PCI device passed
  through to the guest;
- ``accel:fpga_model=<model>``: which ``[fpga] models`` entry (default: the
  first one).

NUMA affinity follows nova's ``hw:pci_numa_affinity_policy`` (or the image's
``hw_pci_numa_affinity_policy``) as PCI devices do; without it, ``legacy``:
a card on one of the guest's host cells, or one without NUMA information.

Each card is one Placement request group ``_FPGA<i>`` (a card's provider has
one unit, so N groups take N cards) of kind ``device`` with the policy as
its ``affinity``: the framework ties it to the guest's topology nodes (the
``guest_node`` groups) without knowing which plugin asked for either.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from compute_plugins.api import (
    KIND_DEVICE,
    FrozenMap,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
    RequestInput,
    pci_affinity_policy,
    rules,
)
from compute_plugins_fpga.view import resource_class

PLUGIN = "fpga"
COUNT_KEY = "accel:fpga"
MODEL_KEY = "accel:fpga_model"
MAX_CARDS = 8
DEFAULT_POLICY = "legacy"


@dataclasses.dataclass(frozen=True)
class FPGARequest(PluginRequest):
    """``count`` cards of ``model`` with the NUMA ``affinity`` policy."""

    count: int = 1
    model: str = ""
    resource_class: str = ""
    affinity: str = DEFAULT_POLICY

    @property
    def requester_ids(self) -> tuple[str, ...]:
        return tuple("_FPGA%d" % index for index in range(self.count))


@dataclasses.dataclass(frozen=True)
class CardAssignment:
    """The card serving one request group."""

    requester_id: str
    provider_uuid: str
    address: str


@dataclasses.dataclass(frozen=True)
class FPGAAssignment(PluginAssignment):
    """The cards, one per group, and the host cells of the guest's NUMA nodes
    the affinity was decided against (``verify`` gets no numa assignment)."""

    cards: tuple[CardAssignment, ...] = ()
    host_cells: tuple[int, ...] = ()


def parse(ri: RequestInput, models: list[str]) -> Optional[FPGARequest]:
    """The request of ``ri``'s ``accel:fpga*`` keys, None when it has none.

    Problems are reported on ``ri`` (key, value, rule), as every plugin does.
    """
    specs = ri.extra_specs
    if COUNT_KEY not in specs and MODEL_KEY not in specs:
        return None
    ri.claim(COUNT_KEY, MODEL_KEY)
    count = rules.check_int(ri, COUNT_KEY, specs.get(COUNT_KEY), minimum=0,
                            maximum=MAX_CARDS)
    model = specs.get(MODEL_KEY)
    if model is not None and model not in models:
        ri.report(MODEL_KEY, model, "must be one of the [fpga] models: %s"
                  % (", ".join(models) or "(none configured)"))
        return None
    if MODEL_KEY in specs and COUNT_KEY not in specs:
        ri.report(MODEL_KEY, model, "needs %s=<count> in the same flavor" % COUNT_KEY)
        return None
    if not count:
        return None
    if not models:
        ri.report(COUNT_KEY, specs[COUNT_KEY], "no FPGA model is configured "
                  "([fpga] models is empty)")
        return None
    chosen = model or models[0]
    policy = pci_affinity_policy(ri) or DEFAULT_POLICY
    return FPGARequest(count=count, model=chosen, resource_class=resource_class(chosen),
                       affinity=policy)


def request_groups(request: FPGARequest) -> list[RequestGroup]:
    """One ``device`` group of one card per requested card."""
    return [RequestGroup(requester_id=requester_id,
                         resources=FrozenMap({request.resource_class: 1}),
                         owner=PLUGIN, kind=KIND_DEVICE, affinity=request.affinity)
            for requester_id in request.requester_ids]


def samples() -> list[RequestInput]:
    """Representative requests (the plugin's ``sample_requests``): a card,
    a card on a one-node guest's own cell, a card on each of two guest
    nodes' cells."""
    specs = [
        {COUNT_KEY: "1"},
        {COUNT_KEY: "1", "hw:numa_nodes": "1", "hw:pci_numa_affinity_policy": "required"},
        {COUNT_KEY: "2", "hw:numa_nodes": "2", "hw:pci_numa_affinity_policy": "required"},
    ]
    return [RequestInput.from_dicts({"name": "fpga.sample%d" % index, "vcpus": 4,
                                     "memory_mb": 4096, "extra_specs": extra_specs})
            for index, extra_specs in enumerate(specs)]
