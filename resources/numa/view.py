"""The NUMA plugin's view of a host: CPUs, memory and huge pages per cell.

Rules (``[compute]`` options, nova's meaning):

- ``cpu_dedicated_set`` CPUs are ``PCPU``, ``cpu_shared_set`` CPUs are
  ``VCPU``. With both unset every host CPU is a ``VCPU``; with only
  ``cpu_dedicated_set`` set there is no ``VCPU`` (as in nova). A set that
  parses to no CPU, names a CPU that is not online (libvirt ``getCPUMap``
  when known, else the CPUs the cells list: nova's check) or shares a CPU
  with the other set is an :class:`InvalidCPUSet` error. An online CPU no
  cell lists is valid and offered nowhere.
- The legacy host (nova's ``_get_host_numa_topology``): nova's deprecated
  ``vcpu_pin_set`` (``[compute]`` or ``[DEFAULT]``) gives the ``VCPU`` CPUs
  instead of ``cpu_shared_set``, and is refused with ``cpu_dedicated_set``;
  ``cpu_shared_set`` set with it still takes the emulator threads of
  ``hw:emulator_threads_policy=share`` guests (nova's warning says so).
  Without ``cpu_dedicated_set``, and with ``vcpu_pin_set`` set or no
  ``cpu_shared_set``, the host is legacy (:attr:`NUMAView.legacy`): it
  reports no ``PCPU``, and a pinned guest (placed by nova's fallback
  ``VCPU`` query) is pinned to the ``VCPU`` CPUs, as nova sets a legacy
  cell's ``pcpuset`` to its ``cpuset``.
- Only online CPUs count (``HostInfo.online_cpus``, libvirt ``getCPUMap``,
  when known), as nova's ``get_online_cpus``: a cell offers the CPUs it
  lists that are online.
- Memory: a cell's ``MEMORY_MB`` is its memory in small pages. The small
  page size is the host's base page (``HostInfo.base_page_kb``: the
  smallest ``<host><cpu><pages>`` of the capabilities, else 4 KiB), except
  in a cell whose every pool is larger than that: there it is the cell's
  smallest pool, as nova's ``hardware._get_smallest_pagesize`` takes it
  (libvirt's test driver lists cell 1 in 8 KiB pages only: 4096 MiB of
  ``MEMORY_MB``). It is the cell's pool of that size when libvirt lists one
  (libvirt counts there the memory that is not in huge pages), else the
  cell's memory minus its huge pages, else the cell's memory when it lists
  no pages. Huge pages (sizes above the small page with at least one page)
  are their own inventory (:func:`page_resource_class`), so no memory is
  counted twice: a guest backed by huge pages requests
  ``CUSTOM_MEMORY_PAGE_<size>KB`` (memory / page size) and no ``MEMORY_MB``.
- ``reserved_host_memory_mb`` is reserved on the cells in order of their id:
  cell 0 first, up to its whole memory, and what does not fit there on the
  next cell. What does not fit on any cell is dropped (with a warning).
- Networks: the physnets and tunneled networks whose NICs are on each
  cell (nova's ``[neutron_physnet_NAME]`` / ``[neutron_tunnel]``
  ``numa_nodes``, :mod:`resources.numa.networks`).
- Thread siblings: per cell, the cores with more than one usable (online,
  dedicated or shared) thread, from libvirt's ``<cpu siblings=...>``
  restricted to the cell's usable CPUs; a CPU in none of them is a core of
  its own (a host without SMT, or one libvirt said nothing about). Sets that
  overlap (inconsistent data) are merged, so the cores partition the CPUs.
- Hosts without NUMA data: when no cell has a memory size (nor pages),
  ``HostInfo.memory_kb`` is split evenly over the cells (a one-cell host such
  as ``caps-qemu-kvm.xml`` gets it all); a host without cells (``<cells
  num='0'>``, no ``<topology>``) gets a single cell 0 with that memory and
  the host's online CPUs (all ``getInfo()`` CPUs, ``0..n-1``, when the
  online ones are unknown); a host without cells, memory size or CPUs gets
  no NUMA provider.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from oslo_config import cfg

from compute_plugins.host.model import CPU, HostInfo, NUMACell
from compute_plugins.plugin.cpuset import (
    InvalidCPUSpec,
    format_cpu_spec,
    parse_cpu_spec,
)
from compute_plugins.plugin.devices import InvalidOptionValue
from compute_plugins.plugin.names import page_resource_class as page_resource_class  # API
from resources.numa import networks

LOG = logging.getLogger(__name__)

DEDICATED = "[compute] cpu_dedicated_set"
SHARED = "[compute] cpu_shared_set"
PIN_SET = "[compute] vcpu_pin_set"


class InvalidCPUSet(InvalidOptionValue):
    """``[compute] cpu_dedicated_set`` / ``cpu_shared_set`` break a rule."""


@dataclasses.dataclass(frozen=True)
class CellView:
    """What one NUMA cell offers."""

    id: int
    pcpus: frozenset[int] = frozenset()
    vcpus: frozenset[int] = frozenset()
    #: Memory in base pages (MiB); ``None`` when unknown.
    memory_mb: Optional[int] = None
    reserved_memory_mb: int = 0
    #: ``(size_kb, count)`` of huge pages with at least one page, by size.
    huge_pages: tuple[tuple[int, int], ...] = ()
    #: Cores with more than one usable thread (sorted by lowest CPU id);
    #: every other usable CPU is a core of its own.
    siblings: tuple[frozenset[int], ...] = ()
    #: The size of the cell's small pages (KiB): what ``hw:mem_page_size=small``
    #: and an explicit request of that size get (16 or 64 KiB on aarch64
    #: and ppc64le hosts).
    small_page_kb: int = 4
    #: Physnets whose NICs are on this cell (``[neutron_physnet_NAME]
    #: numa_nodes``, :mod:`resources.numa.networks`).
    physnets: frozenset[str] = frozenset()
    #: Tunneled networks' NICs are on this cell (``[neutron_tunnel]``).
    tunneled: bool = False


@dataclasses.dataclass(frozen=True)
class NUMAView:
    """The cells and the allocation ratios that apply to them."""

    cells: tuple[CellView, ...]
    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    #: ``[compute] cpu_shared_set`` is set: emulator threads of guests with
    #: ``hw:emulator_threads_policy=share`` run on its CPUs (nova).
    shared_set: bool = False
    #: With ``vcpu_pin_set`` (which then gives the ``VCPU`` CPUs) and
    #: ``cpu_shared_set`` both set: the online CPUs of ``cpu_shared_set``,
    #: where nova still runs those emulator threads (its
    #: ``_get_emulatorpin_cpuset`` reads ``cpu_shared_set``); else None
    #: (the ``VCPU`` CPUs are ``cpu_shared_set``'s).
    emulator_share: Optional[frozenset[int]] = None
    #: A legacy host (see the module rules): pinned guests are pinned to
    #: the cells' ``vcpus`` (nova's legacy ``pcpuset == cpuset``).
    legacy: bool = False


def _parse(option: str, spec: Optional[str]) -> Optional[frozenset[int]]:
    if not spec:
        return None
    try:
        cpus = parse_cpu_spec(spec)
    except InvalidCPUSpec as err:
        raise InvalidCPUSet(option, spec, str(err)) from None
    if not cpus:
        raise InvalidCPUSet(option, spec, "no CPUs available after parsing it")
    return cpus


def cpu_sets(conf: cfg.ConfigOpts, host_cpus: frozenset[int],
             offline: frozenset[int] = frozenset()
             ) -> tuple[frozenset[int], frozenset[int]]:
    """``(dedicated, shared)`` CPUs from ``[compute]``, checked on the host.

    :param host_cpus: the host's usable (online) CPUs.
    :param offline: CPUs the host has but that are offline (for the message).
    """
    dedicated_spec = conf.compute.cpu_dedicated_set
    pin_spec = conf.compute.vcpu_pin_set
    shared_option, shared_spec = ((PIN_SET, pin_spec) if pin_spec
                                  else (SHARED, conf.compute.cpu_shared_set))
    if pin_spec and dedicated_spec:
        raise InvalidCPUSet(
            f"{PIN_SET} and {DEDICATED}", (pin_spec, dedicated_spec),
            "the legacy vcpu_pin_set cannot be combined with "
            "cpu_dedicated_set (as in nova): use cpu_shared_set")
    dedicated = _parse(DEDICATED, dedicated_spec)
    shared = _parse(shared_option, shared_spec)
    for option, spec, cpus in ((DEDICATED, dedicated_spec, dedicated),
                               (shared_option, shared_spec, shared)):
        if cpus is not None and not cpus <= host_cpus:
            missing = format_cpu_spec(cpus - host_cpus)
            known = format_cpu_spec(host_cpus) or "none"
            down = cpus & offline
            why = (f"; CPU(s) {format_cpu_spec(down)} are offline"
                   if down else "")
            raise InvalidCPUSet(
                option, spec,
                f"every CPU must be an online host CPU; CPU(s) {missing} are "
                f"not (online host CPUs: {known}){why}")
    if dedicated is not None and shared is not None and dedicated & shared:
        both = format_cpu_spec(dedicated & shared)
        raise InvalidCPUSet(
            f"{DEDICATED} and {shared_option}", (dedicated_spec, shared_spec),
            f"the two sets must be disjoint; CPU(s) {both} are in both")
    if dedicated is None and shared is None:
        return frozenset(), host_cpus
    return dedicated or frozenset(), shared or frozenset()


def _emulator_share(conf: cfg.ConfigOpts,
                    online: frozenset[int]) -> Optional[frozenset[int]]:
    """:attr:`NUMAView.emulator_share`: ``cpu_shared_set``'s online CPUs
    when ``vcpu_pin_set`` takes its place for the ``VCPU`` CPUs (nova
    intersects it with the online CPUs when it pins the emulator threads)."""
    compute = conf.compute
    if not (compute.vcpu_pin_set and compute.cpu_shared_set):
        return None
    return (_parse(SHARED, compute.cpu_shared_set) or frozenset()) & online


def is_legacy(conf: cfg.ConfigOpts) -> bool:
    """The host's pinned guests are pinned to its ``VCPU`` CPUs (nova's
    legacy configuration: no ``cpu_dedicated_set``, and ``vcpu_pin_set``
    or no ``cpu_shared_set``)."""
    compute = conf.compute
    return not compute.cpu_dedicated_set and (
        bool(compute.vcpu_pin_set) or not compute.cpu_shared_set)


def _small_page_kb(cell: NUMACell, base_kb: int) -> int:
    """The size of ``cell``'s small pages: the host's base page, or the
    cell's smallest pool when every pool it lists is larger (nova's
    ``hardware._get_smallest_pagesize``)."""
    smallest = min((pool.size_kb for pool in cell.pages), default=base_kb)
    return smallest if smallest > base_kb else base_kb


def _base_memory_kb(cell: NUMACell, base_kb: int) -> Optional[int]:
    """Memory of ``cell`` in base pages (KiB), ``None`` when unknown."""
    if not cell.pages:
        return cell.memory_kb
    base = [pool for pool in cell.pages if pool.size_kb == base_kb]
    if base:
        # NOTE: libvirt counts in the base pool only the memory that is
        # not in huge pages, which is what MEMORY_MB must offer.
        return sum(pool.size_kb * pool.count for pool in base)
    if cell.memory_kb is None:
        return None
    huge = sum(size_kb * count for size_kb, count in _huge_pages(cell, base_kb))
    return max(cell.memory_kb - huge, 0)


def _small_memory_kb(cells: tuple[NUMACell, ...],
                     host: HostInfo) -> dict[int, Optional[int]]:
    """Memory in base pages per cell (KiB), ``None`` when unknown."""
    sizes = {cell.id: _base_memory_kb(
        cell, _small_page_kb(cell, host.base_page_kb)) for cell in cells}
    if host.memory_kb and all(size is None for size in sizes.values()):
        share = host.memory_kb // len(cells)
        sizes = {cell_id: share for cell_id in sizes}
    return sizes


def _huge_pages(cell: NUMACell, base_kb: int) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((pool.size_kb, pool.count) for pool in cell.pages
                        if pool.size_kb > base_kb and pool.count > 0))


def _siblings(cell: NUMACell, usable: frozenset[int]
              ) -> tuple[frozenset[int], ...]:
    """The cores of ``cell`` with more than one usable thread (see module)."""
    cores: list[set[int]] = []
    for cpu in cell.cpus:
        threads = set(cpu.siblings & usable) | ({cpu.id} & usable)
        if len(threads) < 2:
            continue
        overlapping = [core for core in cores if core & threads]
        for core in overlapping:
            threads |= core
            cores.remove(core)
        cores.append(threads)
    return tuple(sorted((frozenset(c) for c in cores), key=min))


def _cells(host: HostInfo) -> tuple[NUMACell, ...]:
    """The host's cells, or the one fallback cell of a cell-less host."""
    cells = tuple(sorted(host.cells, key=lambda c: c.id))
    if cells:
        return cells
    if host.online_cpus is not None:
        cpu_ids = host.online_cpus
    else:
        cpu_ids = frozenset(range(host.cpu_count or 0))
    if not host.memory_kb and not cpu_ids:
        return ()
    return (NUMACell(id=0, memory_kb=host.memory_kb or None,
                     cpus=tuple(CPU(id=cpu) for cpu in sorted(cpu_ids))),)


def build_view(conf: cfg.ConfigOpts, host: HostInfo) -> NUMAView:
    """The :class:`NUMAView` of ``host`` under ``conf`` (see the module rules).

    :raises InvalidCPUSet: a ``[compute] cpu_*_set`` option breaks a rule.
    """
    cells = _cells(host)
    listed = frozenset().union(*(c.cpu_ids for c in cells))
    online = listed if host.online_cpus is None else listed & host.online_cpus
    # NOTE: the sets are checked against the online CPUs as nova checks
    # them (getCPUMap); a CPU no cell lists is offered nowhere.
    valid = online if host.online_cpus is None else host.online_cpus
    dedicated, shared = cpu_sets(conf, valid, listed - online)
    memory_kb = _small_memory_kb(cells, host) if cells else {}

    to_reserve = conf.compute.reserved_host_memory_mb
    nets = networks.cell_networks(conf, (cell.id for cell in cells))
    views = []
    for cell in cells:
        pcpus = cell.cpu_ids & online & dedicated
        vcpus = cell.cpu_ids & online & shared
        memory_mb = None
        reserved = 0
        small_kb = memory_kb[cell.id]
        if small_kb is not None:
            memory_mb = small_kb // 1024
            reserved = min(to_reserve, memory_mb)
            to_reserve -= reserved
        small_page = _small_page_kb(cell, host.base_page_kb)
        views.append(CellView(
            id=cell.id,
            pcpus=pcpus,
            vcpus=vcpus,
            memory_mb=memory_mb,
            reserved_memory_mb=reserved,
            huge_pages=_huge_pages(cell, small_page),
            siblings=_siblings(cell, pcpus | vcpus),
            small_page_kb=small_page,
            physnets=nets[cell.id][0],
            tunneled=nets[cell.id][1],
        ))
    if to_reserve and any(v.memory_mb is not None for v in views):
        LOG.warning("[compute] reserved_host_memory_mb = %d MiB exceeds the "
                    "memory of every NUMA cell; %d MiB could not be reserved",
                    conf.compute.reserved_host_memory_mb, to_reserve)
    return NUMAView(
        cells=tuple(views),
        cpu_allocation_ratio=conf.compute.cpu_allocation_ratio,
        ram_allocation_ratio=conf.compute.ram_allocation_ratio,
        shared_set=bool(conf.compute.cpu_shared_set),
        emulator_share=_emulator_share(conf, valid),
        legacy=is_legacy(conf),
    )
