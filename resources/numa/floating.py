"""Guests without a NUMA topology: their vCPUs and memory float.

nova does not place such a guest on NUMA cells; here Placement allocates
its ``VCPU`` and ``MEMORY_MB`` from NUMA cell providers (the group may be
``split``: :mod:`compute_plugins.scheduler.providers`), so the fit says
which cells, and
the guest XML keeps the guest there (``vcpupin`` to those cells' shared
CPUs, ``numatune`` on their memory) so the accounting holds. The shapes
are the query's alternatives, tried in its order:

1. everything on one cell;
2. the vCPUs on one cell and the memory on another (Placement takes each
   resource class of the unsuffixed group from one provider);
3. split evenly over ``k = 2..FLOATING_SPLIT`` distinct cells (groups
   ``_SPLIT<j>``).

With Placement's ``mappings``: the ``_SPLIT<j>`` groups fix the parts' cells;
otherwise the NUMA cells the unsuffixed group ``""`` names hold everything
(one cell) or the vCPUs and the memory (two cells; the uuids do not say
which is which, so both ways are tried). Each part is a
:class:`~resources.numa.cell.NodeDemand` with shared vCPUs and small-page
memory only, checked by the same per-cell code as guest nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.contract import Mappings, Rejection
from compute_plugins.request.groups import SPLIT_PREFIX
from resources.numa import cell as cellfit
from resources.numa.cell import NodeDemand
from resources.numa.matching import NoMatching, preferred_matching
from resources.numa.order import cell_order
from resources.numa.pinning import Subject
from resources.numa.request import FLOATING_SPLIT, NUMAAssignment, NUMARequest
from resources.numa.state import CellState, NUMAState


def split_evenly(amount: int, parts: int) -> list[int]:
    """``amount`` in ``parts`` shares differing by at most one, larger first
    (the query's ``_SPLIT<j>`` amounts)."""
    return [amount // parts + (1 if j < amount % parts else 0)
            for j in range(parts)]


def _part(index: int, who: str, shared: int, memory_mb: int) -> NodeDemand:
    return NodeDemand(node=index, who=who, shared=shared, memory_mb=memory_mb)


def _split_parts(request: NUMARequest, count: int) -> Optional[list[NodeDemand]]:
    """The ``count`` even parts, or None when one would be empty (the query
    does not ask that split)."""
    cpus = split_evenly(request.vcpus, count)
    memory = split_evenly(request.memory_mb, count)
    parts = [_part(j, "part %d of the guest" % j, cpus[j], memory[j])
             for j in range(count)]
    if any(not p.shared and not p.memory_mb for p in parts):
        return None
    return parts


def _match(state: NUMAState, parts: Sequence[NodeDemand],
           allowed: Sequence[Sequence[CellState]]
           ) -> Union[NUMAAssignment, NoMatching]:
    prefs = []
    for part, cells in zip(parts, allowed, strict=True):
        prefs.append([cell.id for cell in cells
                      if not isinstance(cellfit.place(state, cell, part), str)])
    matched = preferred_matching(prefs)
    if isinstance(matched, NoMatching):
        return matched
    placed = []
    for part, cell_id in zip(parts, matched, strict=True):
        result = cellfit.place(state, state.by_id[cell_id], part)
        assert not isinstance(result, str)
        placed.append(result[0])
    return NUMAAssignment(cells=tuple(placed), floating=True)


def _whole_reasons(state: NUMAState, whole: NodeDemand,
                   cells: Sequence[CellState]) -> str:
    classes: dict[tuple[object, ...], list[CellState]] = {}
    for cell in cells:
        classes.setdefault(cellfit.signature(cell), []).append(cell)
    reasons = []
    for members in classes.values():
        placed = cellfit.place(state, members[0], whole,
                               Subject.of([c.id for c in members]))
        if isinstance(placed, str):
            reasons.append(placed)
    return "; ".join(reasons)


def _offline(state: NUMAState, request: NUMARequest
             ) -> Union[NUMAAssignment, Rejection]:
    order = cell_order(state, 1, pinned=False)
    whole = _part(0, "the guest", request.vcpus, request.memory_mb)
    for cell in order:
        placed = cellfit.place(state, cell, whole)
        if not isinstance(placed, str):
            return NUMAAssignment(cells=(placed[0],), floating=True)
    shapes = [[_part(0, "the guest's vCPUs", request.vcpus, 0),
               _part(1, "the guest's memory", 0, request.memory_mb)]]
    for count in range(2, FLOATING_SPLIT + 1):
        parts = _split_parts(request, count)
        if parts:
            shapes.append(parts)
    for parts in shapes:
        if len(parts) > len(order):
            continue
        result = _match(state, parts, [order] * len(parts))
        if isinstance(result, NUMAAssignment):
            return result
    return Rejection(
        "no host cell has room for the guest's %d vCPUs and %d MiB (%s), nor "
        "do two cells have room for its vCPUs on one and its memory on the "
        "other, nor for them split evenly over up to %d cells"
        % (request.vcpus, request.memory_mb,
           _whole_reasons(state, whole, order), FLOATING_SPLIT))


def _split_index(group: str) -> Optional[int]:
    suffix = group[len(SPLIT_PREFIX):]
    if group.startswith(SPLIT_PREFIX) and suffix.isdigit():
        return int(suffix)
    return None


def _placed(state: NUMAState, request: NUMARequest, placement: Mappings
            ) -> Union[NUMAAssignment, Rejection]:
    assert placement is not None
    splits = sorted((index, group) for group in placement
                    for index in [_split_index(group)] if index is not None)
    if splits:
        parts = _split_parts(request, len(splits))
        if parts is None or [i for i, _ in splits] != list(range(len(splits))):
            return Rejection("Placement's mappings split the guest in groups "
                             "%s, not a split the query asks"
                             % ", ".join(g for _, g in splits))
        allowed = [[state.by_uuid[u] for u in placement[group]
                    if u in state.by_uuid] for _, group in splits]
        result = _match(state, parts, allowed)
        if isinstance(result, NUMAAssignment):
            return result
        return Rejection("the guest's parts do not fit the host cells "
                         "Placement chose: %s" % "; ".join(
                             _whole_reasons(state, part, cells)
                             or "no NUMA cell of this host"
                             for part, cells in zip(parts, allowed, strict=True)))
    uuids = list(dict.fromkeys(placement.get("", ())))
    cells = [state.by_uuid[u] for u in uuids if u in state.by_uuid]
    if not cells or len(cells) > 2:
        return Rejection("Placement's allocation for the guest's CPUs and "
                         "memory names %d NUMA cells of this host; expected 1 "
                         "or 2" % len(cells))
    whole = _part(0, "the guest", request.vcpus, request.memory_mb)
    if len(cells) == 1:
        placed = cellfit.place(state, cells[0], whole)
        if isinstance(placed, str):
            return Rejection(placed, provider=cells[0].provider_uuid)
        return NUMAAssignment(cells=(placed[0],), floating=True)
    cpu = _part(0, "the guest's vCPUs", request.vcpus, 0)
    memory = _part(1, "the guest's memory", 0, request.memory_mb)
    reasons: list[str] = []
    for first, second in (cells, cells[::-1]):
        result = _match(state, [cpu, memory], [[first], [second]])
        if isinstance(result, NUMAAssignment):
            return result
        reasons.extend(r for r in (_whole_reasons(state, cpu, [first]),
                                   _whole_reasons(state, memory, [second])) if r)
    return Rejection("the guest's vCPUs and memory do not fit host cells %d "
                     "and %d, where Placement put them, either way: %s"
                     % (cells[0].id, cells[1].id, "; ".join(reasons)))


def fit(state: NUMAState, request: NUMARequest, placement: Mappings
        ) -> Union[NUMAAssignment, Rejection]:
    """The host cells of a guest without NUMA topology (see module doc)."""
    if placement is None:
        return _offline(state, request)
    return _placed(state, request, placement)


def verify(state: NUMAState, request: NUMARequest,
           assignment: NUMAAssignment) -> Optional[Rejection]:
    """None when the recorded parts still fit their cells."""
    parts = assignment.cells
    if not 1 <= len(parts) <= FLOATING_SPLIT:
        return Rejection("the decision spreads the guest over %d host cells; "
                         "at most %d" % (len(parts), FLOATING_SPLIT))
    if len({p.host_cell for p in parts}) != len(parts):
        return Rejection("the decision puts two parts of the guest on one "
                         "host cell")
    vcpus = sum(p.shared_vcpus for p in parts)
    memory = sum(p.memory_mb for p in parts)
    if (vcpus, memory) != (request.vcpus, request.memory_mb):
        return Rejection("the decision places %d vCPUs and %d MiB; the guest "
                         "has %d vCPUs and %d MiB"
                         % (vcpus, memory, request.vcpus, request.memory_mb))
    if assignment.emulator_threads:
        return Rejection("the decision pins the emulator threads of a guest "
                         "without NUMA topology")
    for part in parts:
        cell = state.by_id.get(part.host_cell)
        if cell is None:
            return Rejection("the decision puts part of the guest on host "
                             "cell %d, which the host lacks" % part.host_cell)
        demand = _part(part.guest_cell, "part %d of the guest" % part.guest_cell,
                       part.shared_vcpus, part.memory_mb)
        problem = cellfit.check(state, cell, demand, part, frozenset())
        if problem:
            return Rejection(problem, provider=cell.provider_uuid)
    return None
