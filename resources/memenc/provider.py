"""The memenc plugin's providers, as nova 34 reports them.

One child of the compute root per model with slots, named
``<nodename>_<model>`` (``host1_amd_sev``; nova's
``_ensure_memory_encryption_providers``), with ``MEM_ENCRYPTION_CONTEXT``
(total the slots, ``max_unit`` 1: one slot per guest) and the model's
trait. nova before 2025.2 put the inventory on the root; nova 34 reshapes
it onto these children, which is what is reported here.
"""

from __future__ import annotations

import os_resource_classes as orc

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.memenc.view import MODELS, MemEncView


def provider_name(nodename: str, model: str) -> str:
    """``<nodename>_amd_sev`` for ``amd-sev`` (nova's name)."""
    return "%s_%s" % (nodename, MODELS[model].provider_suffix)


def contributions(view: MemEncView, nodename: str) -> list[ProviderContribution]:
    """A ``<nodename>_<model>`` child per model with slots (module doc)."""
    return [
        ProviderContribution(
            name=provider_name(nodename, slots.model),
            uuid=names.provider_uuid(nodename, "memenc", slots.model),
            parent=nodename,
            inventory={orc.MEM_ENCRYPTION_CONTEXT: inventory_record(
                slots.total, what="%s MEM_ENCRYPTION_CONTEXT" % slots.model,
                max_unit=1)},
            traits=frozenset({MODELS[slots.model].trait}),
        )
        for slots in view.slots
    ]
