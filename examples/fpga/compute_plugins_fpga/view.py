"""Which PCI devices are FPGA cards, and of which model.

``[fpga] models`` lists ``<model>:<vendor id>:<product id>`` (e.g.
``intel_pac_a10:8086:09c4``); every PCI device of the host with those ids is
a card of that model, whose resource class is ``CUSTOM_FPGA_<MODEL>``
(:func:`compute_plugins.api.custom_name`, the framework's one helper for
custom names). A card's provider goes under its NUMA cell's provider
(:class:`compute_plugins.plugin.devices.NUMAParents`, the rule every device plugin
follows), so a guest's FPGA can be asked on its own NUMA node with a
Placement ``same_subtree`` query.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from oslo_config import cfg

from compute_plugins.api import (
    FrozenMap,
    HostInfo,
    InvalidOptionValue,
    NUMAParents,
    cell_sockets,
    custom_name,
)

GROUP = "fpga"
MODELS = "[fpga] models"
_MODEL = re.compile(r"^([a-z0-9_]+):([0-9a-f]{4}):([0-9a-f]{4})$")

OPTS = [
    cfg.ListOpt(
        "models",
        default=["intel_pac_a10:8086:09c4"],
        help="FPGA card models: ``<model>:<vendor id>:<product id>`` (lower-case "
        "hex), e.g. ``intel_pac_a10:8086:09c4``. Each card of a model is a "
        "provider ``<nodename>_fpga_<address>`` with one "
        "``CUSTOM_FPGA_<MODEL>``; the first model is the one ``accel:fpga`` "
        "asks for unless ``accel:fpga_model`` names another.",
    ),
]


class InvalidFPGAConfig(InvalidOptionValue):
    """An ``[fpga] models`` entry is malformed or repeats a model or ids."""


def resource_class(model: str) -> str:
    """``intel_pac_a10`` -> ``CUSTOM_FPGA_INTEL_PAC_A10``."""
    return custom_name("FPGA", model)


def parse_models(entries: list[str]) -> dict[tuple[str, str], str]:
    """``["m:8086:09c4"]`` -> ``{("8086", "09c4"): "m"}``.

    :raises InvalidFPGAConfig: naming the option, the entry and the rule.
    """
    models: dict[tuple[str, str], str] = {}
    for entry in entries:
        match = _MODEL.match(entry.strip().lower())
        if match is None:
            raise InvalidFPGAConfig(MODELS, entry, "expected <model>:<vendor id>:"
                                    "<product id>, e.g. intel_pac_a10:8086:09c4")
        model, vendor, product = match.groups()
        if (vendor, product) in models or model in models.values():
            raise InvalidFPGAConfig(MODELS, entry, "each model and each vendor:"
                                    "product pair may be listed once")
        models[(vendor, product)] = model
    return models


def model_names(conf: cfg.ConfigOpts) -> list[str]:
    """The configured models, in the option's order."""
    return list(parse_models(conf[GROUP].models).values())


@dataclasses.dataclass(frozen=True)
class CardView:
    """One FPGA card: its PCI address, model and NUMA cell (None: the root)."""

    address: str
    model: str
    cell: Optional[int] = None

    @property
    def resource_class(self) -> str:
        return resource_class(self.model)


@dataclasses.dataclass(frozen=True)
class FPGAView:
    cards: tuple[CardView, ...] = ()
    #: Host cell -> socket, for ``hw:pci_numa_affinity_policy=socket``.
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(default_factory=FrozenMap)


def build_view(conf: cfg.ConfigOpts, host: HostInfo) -> FPGAView:
    models = parse_models(conf[GROUP].models)
    parents = NUMAParents(conf, host)
    cards = tuple(
        CardView(address=device.address,
                 model=models[(device.vendor_id or "", device.product_id or "")],
                 cell=parents.cell(device.numa_node))
        for device in host.pci_devices
        if (device.vendor_id or "", device.product_id or "") in models)
    return FPGAView(cards=cards, sockets=cell_sockets(host.cells))
