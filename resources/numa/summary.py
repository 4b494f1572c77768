"""The NUMA assignment in words (``compute-plugins fit``): a line per guest
node, e.g. ``guest node 0 -> host cell 3: CPUs 0-3 -> 12,14,16,18; 4096 MiB
in 2048 KiB pages``."""

from __future__ import annotations

from compute_plugins.plugin.cpuset import format_cpu_spec
from resources.numa.request import CellAssignment, GuestCell, NUMAAssignment, NUMARequest


def _cell_line(cell: CellAssignment, guest: GuestCell | None,
               request: NUMARequest) -> str:
    parts = []
    pinned = sorted(cell.pinning.items())
    if pinned:
        parts.append("CPUs %s -> %s" % (
            format_cpu_spec(vcpu for vcpu, _ in pinned),
            ",".join(str(pcpu) for _, pcpu in pinned)))
    if cell.shared_cpus:
        floating = guest.cpus if guest is not None else (
            frozenset(range(request.vcpus)) - set(cell.pinning))
        parts.append("CPUs %s float on %s" % (format_cpu_spec(floating) or "-",
                                              format_cpu_spec(cell.shared_cpus)))
    memory = "%d MiB" % (guest.memory_mb if guest is not None else request.memory_mb)
    if cell.page_size_kb:
        memory += " in %d KiB pages" % cell.page_size_kb
    parts.append(memory)
    return "guest node %d -> host cell %d: %s" % (cell.guest_cell, cell.host_cell,
                                                  "; ".join(parts))


def describe(request: NUMARequest, assignment: NUMAAssignment) -> list[str]:
    """A line per guest node, then the emulator threads' CPUs (if pinned)."""
    guests = {cell.id: cell for cell in request.cells}
    lines = [_cell_line(cell, guests.get(cell.guest_cell), request)
             for cell in sorted(assignment.cells, key=lambda c: c.guest_cell)]
    if assignment.emulator_threads:
        lines.append("emulator threads -> host CPUs %s"
                     % format_cpu_spec(assignment.emulator_threads))
    return lines or ["no host cell chosen: CPUs and memory float"]
