"""The NUMA plugin's host state: what each cell has free under the guests.

:class:`NUMAState` is what the fit reads (and all it reads): per host cell
its provider, its dedicated CPUs and which are taken, its shared CPUs and
how many guest vCPUs float on them, its thread siblings, its memory in small
pages and its huge pages per size; and the ``[compute]`` options the fit
applies (allocation ratios, the packing strategy, where emulator threads
``share``). It is a frozen dataclass, carried as JSON by
:meth:`compute_plugins.runtime.PluginSet.encode_state`.

:func:`build_state` subtracts the assignments in force from the view. An
assignment is self-contained (see :class:`~resources.numa.request.CellAssignment`):
the host CPUs it pins or holds, the shared vCPUs and the memory it takes on
each host cell. A CPU pinned twice, a CPU that is not a dedicated CPU of its
cell, a shared or emulator CPU, a cell or a page size the host lacks is an
:class:`~compute_plugins.plugin.state.AssignmentConflict` naming it; memory or load
above the totals is not (the host may have shrunk): the cell just has no
room left.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Optional

from compute_plugins.plugin import names
from compute_plugins.plugin.cpuset import format_cpu_spec
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.request.types import FrozenMap, min_field
from compute_plugins.tree.contribution import Providers
from resources.numa.request import PLUGIN, NUMAAssignment
from resources.numa.view import CellView, NUMAView


@dataclasses.dataclass(frozen=True)
class PagesState:
    """Huge pages of one size on a cell.

    :param size_kb: the page size (KiB).
    :param total: pages the cell has.
    :param used: pages guests take.
    """

    size_kb: int
    total: int
    used: int = 0

    @property
    def free(self) -> int:
        return max(self.total - self.used, 0)


@dataclasses.dataclass(frozen=True)
class CellState:
    """One host NUMA cell under the guests in force.

    :param id: the host cell id.
    :param provider_uuid: the uuid of the cell's ``<nodename>_NUMA<id>``
        provider (what Placement's ``mappings`` name).
    :param pcpus: dedicated CPUs (``PCPU``).
    :param pinned: dedicated CPUs taken (pinned, or held idle by a guest).
    :param shared_cpus: shared CPUs (``VCPU``).
    :param shared_load: guest vCPUs floating on ``shared_cpus``.
    :param siblings: cores with more than one usable thread; every other
        CPU of the cell is a core of its own.
    :param memory_mb: memory in small pages (MiB).
    :param reserved_memory_mb: of which reserved for the host.
    :param used_memory_mb: small-page memory guests take.
    :param pages: huge pages per size (ascending).
    :param small_page_kb: the size of the small pages (KiB; 4 on x86, 16
        or 64 on aarch64 and ppc64le hosts): an explicit page size request
        of that size is served by the small pages, as in nova.
    :param physnets: physnets whose NICs are on the cell.
    :param tunneled: tunneled networks' NICs are on the cell.
    """

    id: int
    provider_uuid: str
    pcpus: frozenset[int] = frozenset()
    pinned: frozenset[int] = frozenset()
    shared_cpus: frozenset[int] = frozenset()
    shared_load: int = 0
    siblings: tuple[frozenset[int], ...] = ()
    memory_mb: int = 0
    reserved_memory_mb: int = 0
    used_memory_mb: int = 0
    pages: tuple[PagesState, ...] = ()
    small_page_kb: int = min_field(1, default=4)
    physnets: frozenset[str] = frozenset()
    tunneled: bool = False

    @functools.cached_property
    def free_pcpus(self) -> frozenset[int]:
        """Dedicated CPUs no guest takes."""
        return self.pcpus - self.pinned

    @functools.cached_property
    def cores(self) -> tuple[frozenset[int], ...]:
        """Every core of the cell (its dedicated and shared CPUs), sorted by
        lowest CPU id: the sibling sets, then each other CPU alone."""
        in_sets = frozenset().union(*self.siblings)
        alone = [frozenset({cpu}) for cpu in (self.pcpus | self.shared_cpus)
                 - in_sets]
        return tuple(sorted(list(self.siblings) + alone, key=min))

    @functools.cached_property
    def core_of(self) -> dict[int, frozenset[int]]:
        """CPU -> its core."""
        return {cpu: core for core in self.cores for cpu in core}

    @functools.cached_property
    def fit_class(self) -> tuple[object, ...]:
        """Everything the NUMA fit reads of the cell but its ids
        (:func:`resources.numa.cell.signature`): the cores by (threads,
        free, dedicated), the shared CPUs and their load, the memory and
        the pages. Cells with one class take the same guest nodes. Kept on
        the cell: a host's state is decoded once per generation and fitted
        by every decision until it publishes again."""
        free, pcpus = self.free_pcpus, self.pcpus
        # NOTE: counted as :attr:`cores` has them (the sibling sets, then
        # each other CPU alone) without building them: the class of every
        # cell of a host is read by each cold fit, its cores only on the
        # cells a guest node is placed on.
        shapes = collections.Counter(
            (len(core), len(core & free), len(core & pcpus)) for core in self.siblings)
        alone = (pcpus | self.shared_cpus).difference(*self.siblings)
        free_alone = len(alone & free)  # NOTE: free CPUs are dedicated ones
        taken_alone = len(alone & pcpus) - free_alone
        for shape, count in (((1, 1, 1), free_alone), ((1, 0, 1), taken_alone),
                             ((1, 0, 0), len(alone) - free_alone - taken_alone)):
            if count:
                shapes[shape] += count
        return (
            tuple(sorted(shapes.items())),
            len(self.shared_cpus), self.shared_load,
            self.memory_mb, self.reserved_memory_mb, self.used_memory_mb,
            tuple((p.size_kb, p.total, p.used) for p in self.pages),
            self.small_page_kb,
        )

    @property
    def has_threads(self) -> bool:
        """The cell has SMT: a core with more than one thread (nova's
        ``NUMACell.has_threads``)."""
        return bool(self.siblings)

    def page(self, size_kb: int) -> Optional[PagesState]:
        """The cell's huge pages of ``size_kb`` (None when it has none)."""
        for pool in self.pages:
            if pool.size_kb == size_kb:
                return pool
        return None

    @property
    def avail_memory_mb(self) -> int:
        """Memory not taken, small and huge pages together (nova's
        ``avail_memory``, which orders cells for packing)."""
        small = self.memory_mb - self.used_memory_mb
        huge = sum(p.size_kb * (p.total - p.used) for p in self.pages) // 1024
        return small + huge

    def describe(self) -> str:
        """``host cell 1`` (for messages)."""
        return "host cell %d" % self.id


@dataclasses.dataclass(frozen=True)
class NUMAState(PluginState):
    """The NUMA plugin's host state (see the module doc).

    :param cells: the host cells, by id.
    :param cpu_allocation_ratio: of shared CPUs (``VCPU``).
    :param ram_allocation_ratio: of small-page memory (``MEMORY_MB``).
    :param pack: ``[compute] packing_host_numa_cells_allocation_strategy``.
    :param emulator_share_cpus: ``[compute] cpu_shared_set`` (online), where
        emulator threads of ``hw:emulator_threads_policy=share`` guests run;
        empty when the option is unset (they then run with the vCPUs).
    :param legacy: nova's legacy host: pinned guests take the ``VCPU``
        CPUs and are allocated ``VCPU``.
    :param cell_devices: host cell -> free PCI devices on it, and
    :param devices_wanted: whether the guest asks PCI devices; both given
        at fit time by the framework
        (:func:`compute_plugins.plugin.topology.order_by_cell_devices`),
        never published: nova's PCI-aware cell order
        (:mod:`resources.numa.order`).
    """

    cells: tuple[CellState, ...] = ()
    cpu_allocation_ratio: float = min_field(0, default=1.0)
    ram_allocation_ratio: float = min_field(0, default=1.0)
    pack: bool = True
    emulator_share_cpus: frozenset[int] = frozenset()
    cell_devices: FrozenMap[int, int] = dataclasses.field(default_factory=FrozenMap)
    devices_wanted: bool = False
    #: nova's legacy host (:attr:`resources.numa.view.NUMAView.legacy`):
    #: ``pcpus`` are the ``VCPU`` CPUs, and a pinned guest's CPUs are
    #: allocated as ``VCPU`` (what nova's fallback query claims).
    legacy: bool = False

    def with_cell_devices(self, free: Mapping[int, int],
                          wanted: bool) -> NUMAState:
        """This state for a fit that orders cells by their free PCI
        devices (:class:`compute_plugins.plugin.topology.OrdersByCellDevices`)."""
        return dataclasses.replace(self, cell_devices=FrozenMap(free),
                                   devices_wanted=wanted)

    def consumed(self, assignment: NUMAAssignment) -> NUMAState:
        """This state once ``assignment`` is taken too: what a scheduler
        gave an earlier guest of the same request on this host, before the
        host publishes again (nova's ``num_instances > 1``).

        :raises AssignmentConflict: a CPU it pins is taken already, or a
            cell or page size the state lacks (named).
        """
        by_id = self.by_id
        cells = dict(by_id)
        for part in assignment.cells:
            cell = cells.get(part.host_cell)
            if cell is None:
                raise _conflict("an earlier guest of the request takes host "
                                "cell %d, which the host lacks" % part.host_cell)
            taken = frozenset(part.pinning.values()) | part.held_cpus
            twice = sorted(taken & cell.pinned)
            if twice:
                raise _conflict("CPU %s of host cell %d is pinned twice (an "
                                "earlier guest of the request)"
                                % (format_cpu_spec(twice), cell.id))
            pages = cell.pages
            memory = cell.used_memory_mb
            if part.page_size_kb is None:
                memory += part.memory_mb
            else:
                if part.page_size_kb not in {p.size_kb for p in pages}:
                    raise _conflict("host cell %d has no %d KiB pages"
                                    % (cell.id, part.page_size_kb))
                count = part.memory_mb * 1024 // part.page_size_kb
                pages = tuple(dataclasses.replace(p, used=p.used + count)
                              if p.size_kb == part.page_size_kb else p
                              for p in pages)
            cells[cell.id] = dataclasses.replace(
                cell, pinned=cell.pinned | taken, used_memory_mb=memory,
                shared_load=cell.shared_load + part.shared_vcpus, pages=pages)
        return dataclasses.replace(self, cells=tuple(cells[c.id] for c in self.cells))

    @functools.cached_property
    def by_id(self) -> dict[int, CellState]:
        return {cell.id: cell for cell in self.cells}

    @functools.cached_property
    def by_uuid(self) -> dict[str, CellState]:
        return {cell.provider_uuid: cell for cell in self.cells}


class _Usage:
    """What the assignments take on one cell, while they are added up."""

    def __init__(self) -> None:
        self.pinned: set[int] = set()
        self.shared_load = 0
        self.memory_mb = 0
        self.pages: dict[int, int] = {}


def _conflict(reason: str) -> AssignmentConflict:
    return AssignmentConflict(PLUGIN, reason)


def _pinnable(cell: CellView, legacy: bool) -> frozenset[int]:
    """The CPUs of ``cell`` pinned guests take: its ``PCPU`` CPUs, or on a
    legacy host (:attr:`NUMAView.legacy`) its ``VCPU`` CPUs, as nova's
    legacy cell has ``pcpuset == cpuset``."""
    return cell.vcpus if legacy else cell.pcpus


def _add(usage: dict[int, _Usage], view_cells: dict[int, CellView],
         assignment: NUMAAssignment, index: int, legacy: bool = False) -> None:
    for cell in assignment.cells:
        where = "assignment %d, guest node %d" % (index, cell.guest_cell)
        host = view_cells.get(cell.host_cell)
        if host is None:
            raise _conflict("%s names host cell %d; the host has cells %s"
                            % (where, cell.host_cell,
                               format_cpu_spec(view_cells) or "none"))
        used = usage[cell.host_cell]
        pcpus = _pinnable(host, legacy)
        taken = list(cell.pinning.values()) + sorted(cell.held_cpus)
        for cpu in taken:
            if cpu not in pcpus:
                raise _conflict(
                    "%s takes CPU %d, which is not a dedicated CPU of host "
                    "cell %d (dedicated CPUs: %s)"
                    % (where, cpu, cell.host_cell,
                       format_cpu_spec(pcpus) or "none"))
            if cpu in used.pinned:
                raise _conflict("CPU %d of host cell %d is pinned twice (%s)"
                                % (cpu, cell.host_cell, where))
            used.pinned.add(cpu)
        lacking = sorted(cell.shared_cpus - host.vcpus - pcpus)
        if lacking:
            raise _conflict("%s floats on CPU %s, which host cell %d lacks "
                            "(its CPUs: %s)"
                            % (where, format_cpu_spec(lacking), cell.host_cell,
                               format_cpu_spec(host.vcpus | pcpus) or "none"))
        used.shared_load += cell.shared_vcpus
        if cell.page_size_kb is None:
            used.memory_mb += cell.memory_mb
            continue
        sizes = dict(host.huge_pages)
        if cell.page_size_kb not in sizes:
            raise _conflict("%s takes %d KiB pages; host cell %d has none "
                            "(page sizes: %s)"
                            % (where, cell.page_size_kb, cell.host_cell,
                               ", ".join("%d KiB" % s for s in sorted(sizes))
                               or "small pages only"))
        pages = cell.memory_mb * 1024 // cell.page_size_kb
        used.pages[cell.page_size_kb] = used.pages.get(cell.page_size_kb, 0) + pages


def build_state(view: NUMAView, providers: Providers,
                assignments: Sequence[NUMAAssignment], pack: bool = True
                ) -> NUMAState:
    """The :class:`NUMAState` of ``view`` with ``assignments`` in force.

    :param providers: the plugin's providers (each cell's
        ``<nodename>_NUMA<id>``, by name).
    :param pack: ``[compute] packing_host_numa_cells_allocation_strategy``.
    :raises AssignmentConflict: a CPU pinned twice, or a CPU, cell or page
        size the host lacks (named).
    """
    view_cells = {cell.id: cell for cell in view.cells}
    usage = {cell_id: _Usage() for cell_id in view_cells}
    every_cpu = frozenset().union(*(c.pcpus | c.vcpus for c in view.cells),
                                  view.emulator_share or ())
    for index, assignment in enumerate(assignments):
        _add(usage, view_cells, assignment, index, view.legacy)
        lacking = sorted(assignment.emulator_threads - every_cpu)
        if lacking:
            raise _conflict("assignment %d pins emulator threads to CPU %s, "
                            "which the host lacks (its CPUs: %s)"
                            % (index, format_cpu_spec(lacking),
                               format_cpu_spec(every_cpu) or "none"))
    cells = []
    for cell in view.cells:
        used = usage[cell.id]
        cells.append(CellState(
            id=cell.id,
            provider_uuid=providers[names.numa_provider_name(providers.nodename,
                                                             cell.id)],
            pcpus=_pinnable(cell, view.legacy),
            pinned=frozenset(used.pinned),
            shared_cpus=cell.vcpus,
            shared_load=used.shared_load,
            siblings=cell.siblings,
            memory_mb=cell.memory_mb or 0,
            reserved_memory_mb=cell.reserved_memory_mb,
            used_memory_mb=used.memory_mb,
            pages=tuple(PagesState(size, count, used.pages.get(size, 0))
                        for size, count in cell.huge_pages),
            small_page_kb=cell.small_page_kb,
            physnets=cell.physnets,
            tunneled=cell.tunneled,
        ))
    share: frozenset[int] = frozenset()
    if view.emulator_share is not None:
        share = view.emulator_share
    elif view.shared_set:
        share = share.union(*(c.vcpus for c in view.cells))
    return NUMAState(
        cells=tuple(cells),
        cpu_allocation_ratio=view.cpu_allocation_ratio,
        ram_allocation_ratio=view.ram_allocation_ratio,
        pack=pack,
        emulator_share_cpus=share,
        legacy=view.legacy,
    )
