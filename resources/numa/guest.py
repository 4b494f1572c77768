"""The libvirt domain XML of a NUMA decision (nova's libvirt driver's).

One fragment per top-level element under ``<domain>``
(:mod:`compute_plugins.compute.guest` merges elements of one tag):

- ``<cputune>``: a ``<vcpupin>`` per vCPU (a dedicated vCPU to its host
  CPU, a shared one to its host cell's shared CPUs), ``<emulatorpin>``, and
  ``<vcpusched scheduler='fifo' priority='1'>`` for realtime vCPUs;
- ``<numatune>``: ``<memory mode='strict'>`` on the host cells and a
  ``<memnode>`` per guest node;
- ``<cpu>``: ``<topology sockets cores threads>`` (nova's
  ``get_best_cpu_topology``, :mod:`resources.numa.options`; every guest, as
  nova's driver) and ``<numa>``, a ``<cell>`` per guest node (its CPUs and
  memory; ``memAccess='shared'`` with huge pages, as nova);
- ``<memoryBacking>``: ``<hugepages>`` with a ``<page>`` per page size and
  the guest nodes using it; ``<nosharepages/>`` and ``<locked/>`` for a
  realtime guest, ``<locked/>`` for ``hw:locked_memory`` (nova's
  ``_get_guest_memory_backing_config``).

A guest without NUMA topology gets no guest NUMA cells: its vCPUs are pinned
to the shared CPUs of the cells holding them and its memory is kept on the
cells holding it, so the host's accounting holds.

Before it is given, ``<cpu><numa>`` is checked against the request's vCPUs
and memory (:func:`check_cells`): libvirt quietly accepts guest cells that
do not add up to the domain's, so a wrong one would boot a guest other than
the flavor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional
from xml.etree import ElementTree as ET

from compute_plugins.compute.guest import MEMORY_UNITS, GuestConfigError
from compute_plugins.plugin.contract import GuestFragment
from compute_plugins.plugin.cpuset import InvalidCPUSpec, format_cpu_spec, parse_cpu_spec
from resources.numa.request import PLUGIN, NUMAAssignment, NUMARequest

#: nova's ``[libvirt] realtime_scheduler_priority`` default.
REALTIME_PRIORITY = 1


def _fragment(element: ET.Element) -> GuestFragment:
    return GuestFragment(parent="domain",
                         xml=ET.tostring(element, encoding="unicode"))


def _cputune(request: NUMARequest, assignment: NUMAAssignment) -> ET.Element:
    pins: dict[int, str] = {}
    by_node = {cell.guest_cell: cell for cell in assignment.cells}
    if request.cells:
        for guest in request.cells:
            placed = by_node[guest.id]
            for cpu in guest.pcpus:
                pins[cpu] = str(placed.pinning[cpu])
            for cpu in guest.cpus:
                pins[cpu] = format_cpu_spec(placed.shared_cpus)
    else:
        shared = frozenset().union(*(c.shared_cpus for c in assignment.cells
                                     if c.shared_vcpus))
        for cpu in range(request.vcpus):
            pins[cpu] = format_cpu_spec(shared)
    tune = ET.Element("cputune")
    for cpu in sorted(pins):
        ET.SubElement(tune, "vcpupin", vcpu=str(cpu), cpuset=pins[cpu])
    if assignment.emulator_threads:
        ET.SubElement(tune, "emulatorpin",
                      cpuset=format_cpu_spec(assignment.emulator_threads))
    if request.realtime_cpus:
        ET.SubElement(tune, "vcpusched",
                      vcpus=format_cpu_spec(request.realtime_cpus),
                      scheduler="fifo", priority=str(REALTIME_PRIORITY))
    return tune


def _numatune(request: NUMARequest, assignment: NUMAAssignment) -> ET.Element:
    tune = ET.Element("numatune")
    with_memory = [c for c in assignment.cells if c.memory_mb]
    ET.SubElement(tune, "memory", mode="strict", nodeset=format_cpu_spec(
        c.host_cell for c in with_memory))
    if request.cells:
        for cell in sorted(with_memory, key=lambda c: c.guest_cell):
            ET.SubElement(tune, "memnode", cellid=str(cell.guest_cell),
                          mode="strict", nodeset=str(cell.host_cell))
    return tune


def _cpu_topology(request: NUMARequest) -> ET.Element:
    """``<cpu><topology>``: the request's, or nova's default (a socket per
    vCPU) for a request recorded before the topology was read.

    :raises GuestConfigError: the topology does not make the flavor's vCPUs
        (libvirt refuses such a domain; a decision edited by hand).
    """
    sockets, cores, threads = request.cpu_topology or (request.vcpus, 1, 1)
    if sockets * cores * threads != request.vcpus:
        raise GuestConfigError(
            PLUGIN, "CPU topology %d sockets x %d cores x %d threads is not "
            "the flavor's %d vCPUs" % (sockets, cores, threads, request.vcpus))
    cpu = ET.Element("cpu")
    ET.SubElement(cpu, "topology", sockets=str(sockets), cores=str(cores),
                  threads=str(threads))
    return cpu


def _cpu_numa(request: NUMARequest, assignment: NUMAAssignment) -> ET.Element:
    huge = any(c.page_size_kb for c in assignment.cells)
    cpu = _cpu_topology(request)
    numa = ET.SubElement(cpu, "numa")
    for guest in request.cells:
        attrs = {"id": str(guest.id),
                 "cpus": format_cpu_spec(guest.cpus | guest.pcpus),
                 "memory": str(guest.memory_mb * 1024), "unit": "KiB"}
        if huge:
            attrs["memAccess"] = "shared"
        ET.SubElement(numa, "cell", attrs)
    return cpu


def _memory_backing(request: NUMARequest, assignment: NUMAAssignment
                    ) -> Optional[ET.Element]:
    """nova's ``_get_guest_memory_backing_config``: the huge pages, for a
    realtime guest locked, unshared memory, and locked memory for
    ``hw:locked_memory`` (in nova's element order)."""
    sizes: dict[int, list[int]] = {}
    for cell in assignment.cells:
        if cell.page_size_kb:
            sizes.setdefault(cell.page_size_kb, []).append(cell.guest_cell)
    if not sizes and not request.realtime_cpus and not request.locked_memory:
        return None
    backing = ET.Element("memoryBacking")
    if sizes:
        pages = ET.SubElement(backing, "hugepages")
        for size in sorted(sizes):
            ET.SubElement(pages, "page", size=str(size), unit="KiB",
                          nodeset=format_cpu_spec(sizes[size]))
    if request.realtime_cpus:
        ET.SubElement(backing, "nosharepages")
    if request.realtime_cpus or request.locked_memory:
        ET.SubElement(backing, "locked")
    return backing


def fragments(request: NUMARequest, assignment: NUMAAssignment
              ) -> Sequence[GuestFragment]:
    """The domain XML elements the decision asks for (see module doc)."""
    if not assignment.cells:
        return ()
    elements = [_cputune(request, assignment), _numatune(request, assignment)]
    if request.cells:
        cpu = _cpu_numa(request, assignment)
        check_cells(cpu, request.vcpus, request.memory_mb)
        elements.append(cpu)
    else:
        elements.append(_cpu_topology(request))
    backing = _memory_backing(request, assignment)
    if backing is not None:
        elements.append(backing)
    return tuple(_fragment(e) for e in elements)


def _number(cell: ET.Element, name: str, where: str) -> int:
    value = cell.get(name)
    if value is None or not value.strip().isdigit():
        raise GuestConfigError(PLUGIN, "%s: %s=%r is not a number" % (where, name, value))
    return int(value)


def _kib(value: str, unit: str) -> int:
    scale = MEMORY_UNITS.get(unit)
    if scale is None or not value.strip().isdigit():
        raise GuestConfigError(PLUGIN, "guest NUMA cell memory %r %s is not a "
                               "libvirt memory size" % (value, unit))
    return int(value) * scale // 1024


def check_cells(cpu: ET.Element, vcpus: int, memory_mb: int) -> None:
    """The guest NUMA cells of ``cpu`` (its ``<numa>``): distinct ids,
    disjoint CPUs covering exactly ``vcpus``, memory adding up to
    ``memory_mb`` (the flavor's).

    :raises GuestConfigError: naming this plugin and the cell.
    """
    numa = cpu.find("numa")
    if numa is None:
        return
    ids: set[int] = set()
    covered: set[int] = set()
    total_kib = 0
    for cell in numa.findall("cell"):
        where = "guest NUMA <cell id='%s'>" % cell.get("id")
        cell_id = _number(cell, "id", where)
        if cell_id in ids:
            raise GuestConfigError(PLUGIN, "%s is given twice" % where)
        ids.add(cell_id)
        try:
            cpus = parse_cpu_spec(cell.get("cpus", ""))
        except InvalidCPUSpec as err:
            raise GuestConfigError(PLUGIN, "%s cpus: %s" % (where, err)) from None
        if not cpus:
            raise GuestConfigError(PLUGIN, "%s has no CPUs" % where)
        if cpus & covered:
            raise GuestConfigError(PLUGIN, "%s: vCPUs %s are in another cell too"
                                   % (where, format_cpu_spec(cpus & covered)))
        covered |= cpus
        total_kib += _kib(cell.get("memory", ""), cell.get("unit", "KiB"))
    if covered != set(range(vcpus)):
        raise GuestConfigError(
            PLUGIN, "guest NUMA cells hold vCPUs %s; the flavor has %d (0-%d)"
            % (format_cpu_spec(covered) or "none", vcpus, vcpus - 1))
    if total_kib != memory_mb * 1024:
        raise GuestConfigError(
            PLUGIN, "guest NUMA cells hold %d KiB of memory; the flavor has "
            "%d MiB (%d KiB)" % (total_kib, memory_mb, memory_mb * 1024))
