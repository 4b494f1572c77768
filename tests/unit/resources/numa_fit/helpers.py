"""Builders for the NUMA fit tests: host cells, states and requests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Optional

from resources.numa.request import GuestCell, NUMARequest
from resources.numa.state import CellState, NUMAState, PagesState


def cell(cell_id: int, pcpus: Iterable[int] = (), shared: Iterable[int] = (),
         pinned: Iterable[int] = (), siblings: Sequence[Iterable[int]] = (),
         memory_mb: int = 4096, reserved_mb: int = 0, used_mb: int = 0,
         pages: Sequence[tuple[int, int, int]] = (), load: int = 0
         ) -> CellState:
    """A host cell; ``pages`` are ``(size_kb, total, used)``."""
    return CellState(
        id=cell_id, provider_uuid="uuid-%d" % cell_id,
        pcpus=frozenset(pcpus), pinned=frozenset(pinned),
        shared_cpus=frozenset(shared), shared_load=load,
        siblings=tuple(frozenset(s) for s in siblings if len(set(s)) > 1),
        memory_mb=memory_mb, reserved_memory_mb=reserved_mb,
        used_memory_mb=used_mb,
        pages=tuple(PagesState(*p) for p in pages))


def smt_cell(cell_id: int, cores: int, first: int = 0, threads: int = 2,
             pinned: Iterable[int] = (), **kwargs: object) -> CellState:
    """A cell of ``cores`` dedicated cores of ``threads`` threads from CPU
    ``first`` (core k: CPUs first+k*threads ...)."""
    cpus = range(first, first + cores * threads)
    groups = [range(first + k * threads, first + (k + 1) * threads)
              for k in range(cores)]
    return cell(cell_id, pcpus=cpus, siblings=groups, pinned=pinned,
                **kwargs)  # type: ignore[arg-type]


def state(*cells: CellState, cpu_ratio: float = 4.0, ram_ratio: float = 1.0,
          pack: bool = True, share: Iterable[int] = ()) -> NUMAState:
    return NUMAState(cells=tuple(cells), cpu_allocation_ratio=cpu_ratio,
                     ram_allocation_ratio=ram_ratio, pack=pack,
                     emulator_share_cpus=frozenset(share))


def request(nodes: Sequence[tuple[int, int]] = ((2, 1024),),
            policy: Optional[str] = "dedicated", shared: Sequence[int] = (),
            thread: Optional[str] = None, emulator: Optional[str] = None,
            page: Optional[str] = None, page_kb: Optional[int] = None,
            realtime: Iterable[int] = ()) -> NUMARequest:
    """A guest with NUMA nodes ``(cpus, memory_mb)``; ``shared[i]`` of node
    i's CPUs are shared (mixed), the rest dedicated (policy dedicated or
    mixed) or all shared (policy shared/None)."""
    cells = []
    first = 0
    for index, (cpus, memory) in enumerate(nodes):
        ids = list(range(first, first + cpus))
        first += cpus
        if policy in ("dedicated", "mixed"):
            count = shared[index] if index < len(shared) else 0
            cells.append(GuestCell(index, frozenset(ids[:count]),
                                   frozenset(ids[count:]), memory))
        else:
            cells.append(GuestCell(index, frozenset(ids), frozenset(), memory))
    extra = 1 if emulator == "isolate" and policy in ("dedicated", "mixed") else 0
    return NUMARequest(
        vcpus=first, memory_mb=sum(m for _, m in nodes), cpu_policy=policy,
        cpu_thread_policy=thread, emulator_threads_policy=emulator,
        realtime_cpus=frozenset(realtime), mem_page_size=page,
        page_size_kb=page_kb, cells=tuple(cells), extra_pcpus=extra)


def floating(vcpus: int = 2, memory_mb: int = 1024) -> NUMARequest:
    """A guest without NUMA topology."""
    return NUMARequest(vcpus=vcpus, memory_mb=memory_mb)


def placed(assignment: object) -> dict[int, int]:
    """guest node -> host cell of an assignment."""
    return {c.guest_cell: c.host_cell for c in assignment.cells}  # type: ignore[attr-defined]
