"""The NUMA plugin's providers: one ``<nodename>_NUMA<id>`` child per cell.

Each carries the trait ``HW_NUMA_ROOT`` and, where the cell has some:
``PCPU`` (ratio 1.0), ``VCPU`` (``cpu_allocation_ratio``), ``MEMORY_MB``
(``ram_allocation_ratio``, ``reserved`` from ``reserved_host_memory_mb``,
always sent, 0 included, so the configuration wins; CPU and huge page
classes send none: see :func:`compute_plugins.plugin.devices.inventory_record`) and
one ``CUSTOM_MEMORY_PAGE_<size>KB`` class per huge page size (ratio 1.0).
Placement refuses a total of 0, so a class the cell has none of is left out.
``max_unit`` is the total: one guest may take a whole cell.

On the compute root it owns the trait ``HW_CPU_HYPERTHREADING`` when a cell
has thread siblings (SMT), as nova's libvirt driver reports it: the query
asks it for ``hw:cpu_thread_policy=require`` and forbids it for
``isolate``.
"""

from __future__ import annotations

from typing import Any

import os_resource_classes as orc
import os_traits

from compute_plugins.plugin import names
from compute_plugins.plugin.devices import inventory_record
from compute_plugins.tree.contribution import ProviderContribution
from resources.numa.view import CellView, NUMAView


def cell_inventory(cell: CellView,
                   view: NUMAView) -> dict[str, dict[str, Any]]:
    inventory: dict[str, dict[str, Any]] = {}
    if cell.pcpus:
        inventory[orc.PCPU] = inventory_record(len(cell.pcpus))
    if cell.vcpus:
        inventory[orc.VCPU] = inventory_record(
            len(cell.vcpus), view.cpu_allocation_ratio)
    if cell.memory_mb:
        inventory[orc.MEMORY_MB] = inventory_record(
            cell.memory_mb, view.ram_allocation_ratio,
            cell.reserved_memory_mb, what=f"cell {cell.id} {orc.MEMORY_MB}")
    for size_kb, count in cell.huge_pages:
        inventory[names.page_resource_class(size_kb)] = inventory_record(
            count, what=f"cell {cell.id} {size_kb} KiB pages")
    return inventory


def contributions(view: NUMAView, nodename: str) -> list[ProviderContribution]:
    root = []
    if any(cell.siblings for cell in view.cells):
        root.append(ProviderContribution(
            name=nodename, traits=frozenset({os_traits.HW_CPU_HYPERTHREADING})))
    return root + [
        ProviderContribution(
            name=names.numa_provider_name(nodename, cell.id),
            uuid=names.provider_uuid(nodename, "numa", str(cell.id)),
            inventory=cell_inventory(cell, view),
            traits=frozenset({os_traits.HW_NUMA_ROOT}),
        )
        for cell in view.cells
    ]
