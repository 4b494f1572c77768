"""The NUMA plugin's share of the allocation the scheduler writes.

Offline (``fit`` with no Placement mappings) the plugin chooses the host
cells itself; the scheduler then writes to Placement exactly what the
assignment takes: each guest node's group (``_NUMA<N>``) on its host cell's
provider, with the memory in the page size the fit chose (one of the
group's *choices*). A guest without NUMA topology takes its vCPUs and
memory from one cell, from two (the vCPUs on one, the memory on the other:
the unsuffixed group on both), or split evenly over ``k`` cells (groups
``_SPLIT<j>``, :data:`compute_plugins.request.groups.SPLIT_PREFIX`).
On nova's legacy host (``NUMAState.legacy``) a pinned guest's ``PCPU`` is
allocated as ``VCPU``, as nova's fallback query claims it (the flavor's
vCPUs: an isolated emulator thread's CPU is held, not claimed).

:func:`utilization` is how full the host's cells are, for the weighers.
"""

from __future__ import annotations

from typing import Optional

import os_resource_classes as orc

from compute_plugins.plugin.contract import GroupAllocation
from compute_plugins.request.groups import KIND_GUEST_NODE, SPLIT_PREFIX
from resources.numa.request import (
    NUMAAssignment,
    NUMARequest,
    cell_group_id,
    page_resource_class,
    request_groups,
)
from resources.numa.state import NUMAState


def _memory(memory_mb: int, page_size_kb: Optional[int]) -> dict[str, int]:
    if page_size_kb is None:
        return {orc.MEMORY_MB: memory_mb}
    return {page_resource_class(page_size_kb): memory_mb * 1024 // page_size_kb}


def allocations(request: NUMARequest, assignment: NUMAAssignment,
                state: NUMAState) -> list[GroupAllocation]:
    """Every group of ``request`` on the provider ``assignment`` uses.

    :raises ValueError: the assignment does not match the request (a guest
        node without a group, a page size that is none of the choices).
    """
    result = []
    if request.cells:
        groups = {g.requester_id: g for g in request_groups(request)
                  if g.kind == KIND_GUEST_NODE}
        for cell in assignment.cells:
            suffix = cell_group_id(cell.guest_cell)
            group = groups.get(suffix)
            if group is None:
                raise ValueError("the assignment places guest node %d; the "
                                 "request has no group %s"
                                 % (cell.guest_cell, suffix))
            resources = _legacy(dict(group.resources), state,
                                request.extra_pcpus if cell.guest_cell == 0 else 0)
            if group.choices:
                memory = _memory(cell.memory_mb, cell.page_size_kb)
                if memory not in [dict(c) for c in group.choices]:
                    raise ValueError("guest node %d takes %s, none of the "
                                     "choices of group %s"
                                     % (cell.guest_cell, memory, suffix))
                resources.update(memory)
            result.append(GroupAllocation(suffix, _provider(state, cell.host_cell,
                                                            cell.provider_uuid),
                                          resources))
        return result
    parts = assignment.cells
    split = len(parts) > 1 and all(p.shared_vcpus and p.memory_mb for p in parts)
    for part in parts:
        suffix = "%s%d" % (SPLIT_PREFIX, part.guest_cell) if split else ""
        resources = {rc: n for rc, n in ((orc.VCPU, part.shared_vcpus),
                                         (orc.MEMORY_MB, part.memory_mb)) if n}
        result.append(GroupAllocation(suffix, _provider(state, part.host_cell,
                                                        part.provider_uuid),
                                      resources))
    return result


def _legacy(resources: dict[str, int], state: NUMAState,
            emulator: int) -> dict[str, int]:
    """On nova's legacy host (no ``PCPU``) a pinned guest's CPUs are
    ``VCPU``, as nova's fallback query allocates them: the flavor's vCPUs,
    without the ``emulator`` CPU of ``hw:emulator_threads_policy=isolate``
    in the group (only nova's ``PCPU`` translation adds it; the CPU is
    still held on the host)."""
    pcpus = resources.pop(orc.PCPU, 0) - emulator if state.legacy else 0
    if pcpus:
        resources[orc.VCPU] = resources.get(orc.VCPU, 0) + pcpus
    return resources


def _provider(state: NUMAState, host_cell: int, recorded: str) -> str:
    if recorded:
        return recorded
    cell = state.by_id.get(host_cell)
    if cell is None:
        raise ValueError("the assignment names host cell %d; the host has "
                         "none" % host_cell)
    return cell.provider_uuid


def utilization(state: NUMAState) -> float:
    """Taken share of the host's CPUs and memory (their mean), 0.0 to 1.0."""
    cpus = used_cpus = 0.0
    memory = used_memory = 0.0
    ratio = state.cpu_allocation_ratio or 1.0
    for cell in state.cells:
        # NOTE: on a legacy host the pinned guests' CPUs are the floating
        # guests' (NUMAState.legacy): each CPU counts once.
        cpus += len(cell.pcpus | cell.shared_cpus)
        used_cpus += len(cell.pinned) + cell.shared_load / ratio
        memory += cell.memory_mb + sum(p.size_kb * p.total for p in cell.pages) / 1024
        used_memory += cell.used_memory_mb + sum(p.size_kb * p.used
                                                 for p in cell.pages) / 1024
    shares = [used / total for used, total in ((used_cpus, cpus),
                                               (used_memory, memory)) if total]
    return min(max(sum(shares) / len(shares), 0.0), 1.0) if shares else 0.0
