"""In which order the fit tries host cells: nova's packing (or spreading).

nova's ``numa_fit_instance_to_host`` sorts the host cells (only when the
host has more cells than the guest has nodes) and takes the first
permutation that fits; :mod:`resources.numa.matching` then finds exactly
that permutation without enumerating them. The sorts, stable, last one
dominant, as nova's:

1. by memory available (most used first when packing);
2. pinned guests: by free dedicated CPUs (fewest first when packing);
   others: by shared-CPU load (most loaded first when packing);
3. when the host has PCI devices (:attr:`NUMAState.cell_devices`, given by
   the framework from the device plugins' states), by the free ones on
   each cell: fewest first for a guest without PCI requests (nova keeps
   those cells for guests that need them), most first for one with
   (:attr:`NUMAState.devices_wanted`).

Packing is ``[compute] packing_host_numa_cells_allocation_strategy``
(:attr:`NUMAState.pack`); spreading reverses both sorts.
"""

from __future__ import annotations

from resources.numa.state import CellState, NUMAState


def cell_order(state: NUMAState, nodes: int, pinned: bool) -> list[CellState]:
    """The host cells, most preferred first, for a guest of ``nodes`` nodes.

    :param pinned: the guest pins CPUs (``dedicated`` or ``mixed``).
    """
    cells = list(state.cells)
    if len(cells) <= nodes:
        return cells
    pack = state.pack
    cells.sort(key=lambda cell: cell.avail_memory_mb, reverse=not pack)
    if pinned:
        cells.sort(key=lambda cell: len(cell.free_pcpus), reverse=not pack)
    else:
        cells.sort(key=lambda cell: cell.shared_load, reverse=pack)
    devices = state.cell_devices
    if devices:
        cells.sort(key=lambda cell: devices.get(cell.id, 0),
                   reverse=state.devices_wanted)
    return cells
