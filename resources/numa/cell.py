"""Can one guest NUMA node go on one host cell, and how: nova's per-cell fit.

The fit's whole combinatorics rest on this: a guest node's fit on a host
cell depends only on that node and that cell (each guest node takes a
distinct host cell, as in nova), so :func:`place` answers per pair, and
:mod:`resources.numa.fit` matches nodes to cells. The rules are nova's
``_numa_fit_instance_cell``:

- **memory**, in the page sizes the request allows, tried in nova's order
  (:func:`page_order`): ``small`` the small pages (the cell's smallest
  page: 4 KiB on x86, 16 or 64 KiB on aarch64/ppc64le hosts), ``large`` the
  cell's huge page sizes largest first, ``any`` those then the small
  pages, a size just that size (the small pages when it is theirs; a cell
  without pages of that size cannot take it), none the small pages. Huge
  pages and pinned or page-sized guests never overcommit (nova's
  ``use_free``: free = total - reserved - used, and within Placement's
  capacity); other guests' small-page memory
  may be overcommitted up to ``ram_allocation_ratio`` of total - reserved
  (Placement's capacity) but a node may not be larger than the cell;
- **shared CPUs**: a node's shared vCPUs may not outnumber the cell's
  shared CPUs, and the load stays within ``cpu_allocation_ratio``. (nova
  also refuses a ``mixed`` or shared node *without* shared vCPUs on a cell
  whose load is already above its limit; here a node that adds no load is
  not refused for the load of others);
- **dedicated CPUs**: enough free ones (+1 on guest node 0's cell for
  emulator threads with ``hw:emulator_threads_policy=isolate``), pinned per
  thread policy by :mod:`resources.numa.pinning`.

:func:`check` says whether a recorded :class:`CellAssignment` is valid on
a cell; :func:`place` builds one and passes it through :func:`check`
before returning it, so ``fit`` and ``verify`` share one definition.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from compute_plugins.plugin.cpuset import format_cpu_spec
from compute_plugins.request.types import FrozenMap
from resources.numa import pinning
from resources.numa.pinning import Subject, plural
from resources.numa.request import BASE_PAGE_SIZES_KB, CellAssignment
from resources.numa.state import CellState, NUMAState

#: A page size choice: a huge page size (KiB), or None for small pages.
PageSize = Optional[int]


@dataclasses.dataclass(frozen=True)
class NodeDemand:
    """What one guest NUMA node (or part of a floating guest) asks of a cell.

    :param node: the guest node (the ``guest_cell`` it is recorded under).
    :param who: how messages name it (``guest node 0``).
    :param dedicated: its dedicated guest CPUs, ascending.
    :param emulator: dedicated CPUs more for emulator threads (0 or 1).
    :param shared: its shared (floating) vCPUs.
    :param memory_mb: its memory.
    :param page_alias: ``small``, ``large``, ``any`` or None.
    :param page_size_kb: an explicit page size.
    :param thread_policy: ``prefer``, ``isolate``, ``require`` or None.
    :param strict_memory: no overcommit of small pages (pinned CPUs or a
        page size asked, as nova).
    """

    node: int
    who: str
    dedicated: tuple[int, ...] = ()
    emulator: int = 0
    shared: int = 0
    memory_mb: int = 0
    page_alias: Optional[str] = None
    page_size_kb: Optional[int] = None
    thread_policy: Optional[str] = None
    strict_memory: bool = False

    @property
    def key(self) -> tuple[int, int, int, int]:
        """What distinguishes nodes of one request for the fit (their
        numbers; the policies are the request's)."""
        return (len(self.dedicated), self.emulator, self.shared, self.memory_mb)


def page_order(cell: CellState, demand: NodeDemand) -> list[PageSize]:
    """The page sizes ``demand`` may use on ``cell``, in nova's order (an
    explicit size that is the cell's small page size is the small pages,
    nova's smallest ``mempages`` pool)."""
    if demand.page_size_kb:
        if demand.page_size_kb == cell.small_page_kb:
            return [None]
        return [demand.page_size_kb]
    huge: list[PageSize] = [p.size_kb for p in reversed(cell.pages)]
    if demand.page_alias == "large":
        return huge
    if demand.page_alias == "any":
        return huge + [None]
    return [None]


def memory_problem(state: NUMAState, cell: CellState, demand: NodeDemand,
                   size: PageSize, subject: Subject) -> Optional[str]:
    """Why ``demand``'s memory does not fit ``cell`` in pages of ``size``."""
    need = demand.memory_mb
    if not need:
        return None
    if size is None:
        cap = int((cell.memory_mb - cell.reserved_memory_mb)
                  * state.ram_allocation_ratio)
        if demand.strict_memory:
            free = cell.memory_mb - cell.reserved_memory_mb - cell.used_memory_mb
            # NOTE: Placement's capacity too, should the ratio be below 1.
            free = min(free, cap - cell.used_memory_mb)
            if need > free:
                return ("%s %s %d MiB of free small-page memory, %s needs %d "
                        "MiB" % (subject.name, subject.has, max(free, 0),
                                 demand.who, need))
            return None
        if need > cell.memory_mb:
            return ("%s %s %d MiB of small-page memory, %s needs %d MiB"
                    % (subject.name, subject.has, cell.memory_mb, demand.who,
                       need))
        if cell.used_memory_mb + need > cap:
            return ("%s %s %d MiB of small-page memory left (%d of %d MiB "
                    "used at ram_allocation_ratio %g), %s needs %d MiB"
                    % (subject.name, subject.has,
                       max(cap - cell.used_memory_mb, 0),
                       cell.used_memory_mb, cap, state.ram_allocation_ratio,
                       demand.who, need))
        return None
    pool = cell.page(size)
    if pool is None:
        # NOTE: a base page size asked of a host with another one (4 KiB of
        # a 64 KiB aarch64 host) says what the host's small pages are.
        small = (" (its small pages are %d KiB)" % cell.small_page_kb
                 if size in BASE_PAGE_SIZES_KB else "")
        return ("%s %s no %d KiB pages%s, %s needs %d MiB in them"
                % (subject.name, subject.has, size, small, demand.who, need))
    if need * 1024 % size:
        return ("%s's %d MiB is not a whole number of %d KiB pages"
                % (demand.who, need, size))
    pages = need * 1024 // size
    if pages > pool.free:
        return ("%s %s %s, %s needs %d"
                % (subject.name, subject.has,
                   plural(pool.free, "free %d KiB page" % size), demand.who,
                   pages))
    return None


def choose_page_size(state: NUMAState, cell: CellState, demand: NodeDemand,
                     subject: Subject) -> Union[PageSize, str]:
    """The first page size in nova's order that fits, or why none does."""
    sizes = page_order(cell, demand)
    if not sizes:
        return ("%s %s no huge pages, %s asks hw:mem_page_size=%s"
                % (subject.name, subject.has, demand.who, demand.page_alias))
    reasons = []
    for size in sizes:
        reason = memory_problem(state, cell, demand, size, subject)
        if reason is None:
            return size
        reasons.append(reason)
    return "; ".join(reasons)


def shared_problem(state: NUMAState, cell: CellState, demand: NodeDemand,
                   subject: Subject) -> Optional[str]:
    """Why ``demand``'s shared vCPUs do not fit ``cell``'s shared CPUs."""
    need = demand.shared
    if not need:
        return None
    have = len(cell.shared_cpus)
    if need > have:
        return ("%s %s %s, %s has %s"
                % (subject.name, subject.has, plural(have, "shared CPU"),
                   demand.who, plural(need, "shared vCPU")))
    cap = int(have * state.cpu_allocation_ratio)
    if cell.shared_load + need > cap:
        return ("%s %s room for %s on its %s (%d running, "
                "cpu_allocation_ratio %g), %s needs %d"
                % (subject.name, subject.has,
                   plural(max(cap - cell.shared_load, 0), "more vCPU"),
                   plural(have, "shared CPU"), cell.shared_load,
                   state.cpu_allocation_ratio, demand.who, need))
    return None


def dedicated_problem(cell: CellState, demand: NodeDemand,
                      subject: Subject) -> Optional[str]:
    """Why ``cell`` has too few free dedicated CPUs for ``demand``."""
    need = len(demand.dedicated) + demand.emulator
    if not need:
        return None
    free = len(cell.free_pcpus)
    if need > free:
        extra = " (%s + 1 for emulator threads)" % plural(
            len(demand.dedicated), "vCPU") if demand.emulator else ""
        return ("%s %s %s, %s needs %d%s"
                % (subject.name, subject.has, plural(free, "free dedicated CPU"),
                   demand.who, need, extra))
    return None


def check(state: NUMAState, cell: CellState, demand: NodeDemand,
          assignment: CellAssignment, emulator: frozenset[int]
          ) -> Optional[str]:
    """Why ``assignment`` of ``demand`` is not valid on ``cell`` (None: it is).

    :param emulator: the emulator threads' CPU the assignment holds (on
        guest node 0's cell with ``hw:emulator_threads_policy=isolate``).
    """
    subject = Subject.of([cell.id])
    who = demand.who
    if assignment.host_cell != cell.id:
        return "%s is recorded on host cell %d, not on %s" % (
            who, assignment.host_cell, subject.name)
    if assignment.provider_uuid and assignment.provider_uuid != cell.provider_uuid:
        return ("%s is recorded on provider %s; %s is provider %s"
                % (who, assignment.provider_uuid, subject.name,
                   cell.provider_uuid))
    if assignment.memory_mb != demand.memory_mb:
        return "%s is recorded with %d MiB; it has %d MiB" % (
            who, assignment.memory_mb, demand.memory_mb)
    sizes = page_order(cell, demand)
    if assignment.page_size_kb not in sizes:
        return ("%s is recorded in %s; on %s it may use %s"
                % (who, _page_text(assignment.page_size_kb), subject.name,
                   ", ".join(_page_text(s) for s in sizes) or "no page size"))
    problem = memory_problem(state, cell, demand, assignment.page_size_kb,
                             subject)
    if problem:
        return problem
    if assignment.shared_vcpus != demand.shared:
        return "%s is recorded with %s; it has %d" % (
            who, plural(assignment.shared_vcpus, "shared vCPU"), demand.shared)
    expected_shared = cell.shared_cpus if demand.shared else frozenset()
    if assignment.shared_cpus != expected_shared:
        return ("%s's shared vCPUs are recorded on CPUs %s; %s's shared CPUs "
                "are %s" % (who, format_cpu_spec(assignment.shared_cpus) or
                            "(none)", subject.name,
                            format_cpu_spec(expected_shared) or "(none)"))
    problem = shared_problem(state, cell, demand, subject)
    if problem:
        return problem
    if set(assignment.pinning) != set(demand.dedicated):
        return "%s's pinned vCPUs are recorded as %s; its dedicated vCPUs are %s" % (
            who, format_cpu_spec(assignment.pinning) or "(none)",
            format_cpu_spec(demand.dedicated) or "(none)")
    return _pinning_problem(state, cell, demand, assignment, emulator, subject)


def _pinning_problem(state: NUMAState, cell: CellState, demand: NodeDemand,
                     assignment: CellAssignment, emulator: frozenset[int],
                     subject: Subject) -> Optional[str]:
    """:func:`check` of the CPUs ``assignment`` pins and holds (its last
    part): all :func:`place` checks of the assignments it builds, whose
    other fields it takes from ``cell`` and ``demand`` and whose memory,
    page size and shared CPUs it has just found to fit."""
    who = demand.who
    if len(emulator) != demand.emulator or not emulator <= assignment.held_cpus:
        return ("%s must hold %d CPU for emulator threads on %s; it holds %s"
                % (who, demand.emulator, subject.name,
                   format_cpu_spec(emulator & assignment.held_cpus) or "none"))
    problem = dedicated_problem(cell, demand, subject)
    if problem:
        return problem
    return pinning.problem(
        cell, demand.thread_policy,
        [assignment.pinning[cpu] for cpu in demand.dedicated], emulator,
        assignment.held_cpus - emulator, subject, who, state.legacy)


def _page_text(size: PageSize) -> str:
    return "small pages" if size is None else "%d KiB pages" % size


def place(state: NUMAState, cell: CellState, demand: NodeDemand,
          subject: Optional[Subject] = None
          ) -> Union[tuple[CellAssignment, frozenset[int]], str]:
    """``demand`` placed on ``cell``: ``(assignment, emulator CPU)``, or why
    it does not fit (a reason about ``subject``, default the cell)."""
    subject_given = subject is not None
    subject = subject or Subject.of([cell.id])
    size = choose_page_size(state, cell, demand, subject)
    if isinstance(size, str):
        return size
    problem = (shared_problem(state, cell, demand, subject)
               or dedicated_problem(cell, demand, subject))
    if problem:
        return problem
    chosen = pinning.Pinning(())
    if demand.dedicated or demand.emulator:
        picked = pinning.choose(cell, len(demand.dedicated), demand.emulator,
                                demand.thread_policy, subject, demand.who,
                                state.legacy)
        if isinstance(picked, str):
            return picked
        chosen = picked
    assignment = CellAssignment(
        guest_cell=demand.node,
        host_cell=cell.id,
        provider_uuid=cell.provider_uuid,
        pinning=FrozenMap(zip(demand.dedicated, chosen.cpus, strict=True)),
        shared_cpus=cell.shared_cpus if demand.shared else frozenset(),
        page_size_kb=size,
        memory_mb=demand.memory_mb,
        shared_vcpus=demand.shared,
        held_cpus=chosen.emulator | chosen.idle,
    )
    # NOTE: the fields :func:`check` reads before the pinning are the
    # cell's and the demand's, and the page size, memory and shared CPUs
    # were found to fit just above (the same pure functions): checking
    # them again was about a quarter of a placement's time.
    problem = _pinning_problem(state, cell, demand, assignment, chosen.emulator,
                               Subject.of([cell.id]) if subject_given else subject)
    if problem:
        return problem
    return assignment, chosen.emulator


def signature(cell: CellState) -> tuple[object, ...]:
    """Everything :func:`place` reads of ``cell`` but its ids: cells with
    one signature take the same guest nodes (one class;
    :attr:`CellState.fit_class`, computed once per cell)."""
    return cell.fit_class
