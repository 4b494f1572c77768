"""The same host and guest as nova's objects, for nova's NUMA fit.

:func:`host` turns a :class:`~resources.numa.state.NUMAState` into nova's
``NUMATopology`` (small pages as the smallest ``mempages`` pool, of the
cell's ``small_page_kb``, huge pages
as the others, the host's reserved memory as that pool's ``reserved``),
:func:`instance` a :class:`~resources.numa.request.NUMARequest` with a NUMA
topology into an ``InstanceNUMATopology`` (fresh each call: nova's fit
changes it). nova is imported on first use (it is slow to import and only
the benchmark and the compat tests need it).
"""

from __future__ import annotations

from typing import Any, Optional

from resources.numa.request import NUMARequest
from resources.numa.state import NUMAState

_NOVA: dict[str, Any] = {}


def nova() -> dict[str, Any]:
    """nova's ``objects``, ``hardware`` and ``CONF`` (imported once)."""
    if not _NOVA:
        import nova.conf
        from nova import objects
        from nova.virt import hardware
        objects.register_all()
        _NOVA.update(objects=objects, hardware=hardware, CONF=nova.conf.CONF)
    return _NOVA


def host(state: NUMAState) -> Any:
    """nova's ``NUMATopology`` of ``state``."""
    objects = nova()["objects"]
    cells = []
    for cell in state.cells:
        small = cell.small_page_kb
        pages = [objects.NUMAPagesTopology(
            size_kb=small, total=cell.memory_mb * 1024 // small,
            used=cell.used_memory_mb * 1024 // small,
            reserved=cell.reserved_memory_mb * 1024 // small)]
        pages += [objects.NUMAPagesTopology(size_kb=p.size_kb, total=p.total,
                                            used=p.used, reserved=0)
                  for p in cell.pages]
        huge_mb = sum(p.size_kb * p.total for p in cell.pages) // 1024
        huge_used = sum(p.size_kb * p.used for p in cell.pages) // 1024
        cells.append(objects.NUMACell(
            id=cell.id, cpuset=set(cell.shared_cpus), pcpuset=set(cell.pcpus),
            memory=cell.memory_mb + huge_mb,
            memory_usage=cell.used_memory_mb + huge_used,
            cpu_usage=cell.shared_load, pinned_cpus=set(cell.pinned),
            siblings=[set(core) for core in cell.cores], mempages=pages,
            socket=None, network_metadata=objects.NetworkMetadata(
                physnets=set(cell.physnets), tunneled=cell.tunneled)))
    return objects.NUMATopology(cells=cells)


def instance(request: NUMARequest) -> Any:
    """nova's ``InstanceNUMATopology`` of ``request`` (a NUMA guest)."""
    objects = nova()["objects"]
    page: Optional[int] = request.page_size_kb or {
        "small": -1, "large": -2, "any": -3}.get(request.mem_page_size or "")
    cells = [objects.InstanceNUMACell(
        id=cell.id, cpuset=set(cell.cpus), pcpuset=set(cell.pcpus),
        memory=cell.memory_mb, pagesize=page, cpu_policy=request.cpu_policy,
        cpu_thread_policy=request.cpu_thread_policy)
        for cell in request.cells]
    topology = objects.InstanceNUMATopology(cells=cells)
    if request.emulator_threads_policy:
        topology.emulator_threads_policy = request.emulator_threads_policy
    return topology


def limits(state: NUMAState) -> Any:
    """nova's ``NUMATopologyLimits`` with the state's ratios."""
    return nova()["objects"].NUMATopologyLimits(
        cpu_allocation_ratio=state.cpu_allocation_ratio,
        ram_allocation_ratio=state.ram_allocation_ratio)


def fit(state: NUMAState, request: NUMARequest) -> Any:
    """nova's ``numa_fit_instance_to_host`` on the same host and guest,
    with the state's packing strategy (and the guest's networks as nova's
    ``limits.network_metadata``)."""
    n = nova()
    n["CONF"].set_override("packing_host_numa_cells_allocation_strategy",
                           state.pack, "compute")
    nova_limits = limits(state)
    if request.physnets or request.tunneled:
        nova_limits.network_metadata = n["objects"].NetworkMetadata(
            physnets=set(request.physnets), tunneled=request.tunneled)
    return n["hardware"].numa_fit_instance_to_host(
        host(state), instance(request), None, nova_limits)


def placed(result: Any) -> Optional[list[tuple[int, dict[int, int]]]]:
    """``[(host cell, pinning)]`` per guest node of nova's answer."""
    if result is None:
        return None
    return [(cell.id, dict(cell.cpu_pinning or {})) for cell in result.cells]
